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
    ("sessionwarden.actors.errors", "sessionwarden.actors"),
    ("sessionwarden.cmd.errors", "sessionwarden.cmd"),
    ("sessionwarden.errors", "sessionwarden.errors"),
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


@pytest.mark.parametrize(
    ("module_name", "root"),
    [("sessionwarden.store.errors", "StoreError"), ("sessionwarden.events.errors", "EventError")],
)
def test_every_error_derives_from_the_package_root(module_name: str, root: str) -> None:
    from sessionwarden.errors import SessionwardenError

    module = importlib.import_module(module_name)
    base = getattr(module, root)
    assert issubclass(base, SessionwardenError)
    for name in module.__all__:
        assert issubclass(getattr(module, name), base), name
