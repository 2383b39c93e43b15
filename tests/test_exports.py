"""Every public name of a package is exported in ``__all__``, and nothing else (httpx-style).

A public name is one not starting with ``_`` that is not a submodule (unless ``__all__``
exports the submodule on purpose, like ``sessionwarden.store.errors``) and not an object
re-exported from outside the package (like ``SessionwardenError`` in the errors modules).
"""

import importlib
import inspect
from types import ModuleType

import pytest

MODULES = [
    ("sessionwarden.store", "sessionwarden.store"),
    ("sessionwarden.store.errors", "sessionwarden.store"),
    ("sessionwarden.events", "sessionwarden.events"),
    ("sessionwarden.events.errors", "sessionwarden.events"),
    ("sessionwarden.config", "sessionwarden.config"),
    ("sessionwarden.config.errors", "sessionwarden.config"),
    ("sessionwarden.domain.errors", "sessionwarden.domain"),
    ("sessionwarden.actors.errors", "sessionwarden.actors"),
    ("sessionwarden.upstream.errors", "sessionwarden.upstream"),
    ("sessionwarden.views.errors", "sessionwarden.views"),
    ("sessionwarden.cmd.errors", "sessionwarden.cmd"),
    ("sessionwarden.errors", "sessionwarden.errors"),
]

#: Each package's errors module and the root of its tree.
ERROR_ROOTS = [
    ("sessionwarden.store.errors", "StoreError"),
    ("sessionwarden.events.errors", "EventError"),
    ("sessionwarden.config.errors", "ConfigError"),
    ("sessionwarden.domain.errors", "DomainError"),
    ("sessionwarden.actors.errors", "ActorError"),
    ("sessionwarden.upstream.errors", "UpstreamError"),
    ("sessionwarden.views.errors", "ViewError"),
    ("sessionwarden.cmd.errors", "CommandError"),
]


def public_names(module: ModuleType, package: str) -> set[str]:
    exported = set(getattr(module, "__all__", ()))
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if inspect.ismodule(value):
            if name in exported:
                names.add(name)
            continue
        origin = getattr(value, "__module__", None)
        if origin == "typing" and name in exported:
            names.add(name)  # a type alias defined here (ApiMode = Literal[...])
            continue
        if origin == "typing" or (
            (inspect.isclass(value) or inspect.isfunction(value))
            and isinstance(origin, str)
            and origin != package
            and not origin.startswith(package + ".")
        ):
            continue  # imported from elsewhere, e.g. SessionwardenError or typing.ClassVar
        names.add(name)
    return names


@pytest.mark.parametrize(("module_name", "package"), MODULES)
def test_all_lists_exactly_the_public_names(module_name: str, package: str) -> None:
    module = importlib.import_module(module_name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicates in __all__"
    public = public_names(module, package)
    missing, extra = sorted(public - set(exported)), sorted(set(exported) - public)
    assert not missing, f"public but not in {module_name}.__all__: {missing}"
    assert not extra, f"in {module_name}.__all__ but not public: {extra}"


@pytest.mark.parametrize(("module_name", "package"), MODULES)
def test_every_exported_name_resolves(module_name: str, package: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.__all__ names missing {name!r}"


@pytest.mark.parametrize(("module_name", "root"), ERROR_ROOTS)
def test_every_error_derives_from_the_package_root(module_name: str, root: str) -> None:
    from sessionwarden.errors import SessionwardenError

    module = importlib.import_module(module_name)
    base = getattr(module, root)
    assert issubclass(base, SessionwardenError)
    for name in module.__all__:
        assert issubclass(getattr(module, name), base), name


def _drawn(doc: str) -> list[str]:
    """The class names drawn in a module docstring's tree (after ├── / └──)."""
    return [line.split("── ", 1)[1].split()[0].rsplit(".", 1)[-1]
            for line in doc.splitlines() if "── " in line]


@pytest.mark.parametrize(("module_name", "root"), ERROR_ROOTS)
def test_each_errors_module_draws_its_whole_tree(module_name: str, root: str) -> None:
    module = importlib.import_module(module_name)
    drawn = _drawn(module.__doc__ or "")
    assert sorted(drawn) == sorted(module.__all__), module_name


def test_the_root_draws_every_error_of_every_package() -> None:
    from sessionwarden import errors

    drawn = set(_drawn(errors.__doc__ or ""))
    for module_name, _ in ERROR_ROOTS:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            assert name in drawn, f"{module_name}.{name} is missing from the root's tree"
    every = set(errors.__all__) | {
        name for module_name, _ in ERROR_ROOTS
        for name in importlib.import_module(module_name).__all__}
    assert drawn <= every, drawn - every


def test_unavailable_is_what_the_call_path_catches() -> None:
    """One class for "retry later": every failure of the log and an actor that is down."""
    from sessionwarden.actors.errors import ActorCrash, ActorUnavailable
    from sessionwarden.errors import Unavailable
    from sessionwarden.store import errors as store_errors

    assert issubclass(ActorUnavailable, Unavailable)
    assert not issubclass(ActorCrash, Unavailable)  # raised inside an actor, never caught
    for name in store_errors.__all__:
        assert issubclass(getattr(store_errors, name), Unavailable), name
