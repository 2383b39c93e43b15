"""Imports point one way: a lower layer never imports a higher one, and nothing is a cycle.

The layers, lowest first (docs/architecture/layers.md, "The import rules")::

    errors, redact, clock, text    the root: import nothing of ours but ``errors``
    events                         the facts
    store                          the log (knows events only as bytes and tags; clock)
    config                         the configuration
    domain                         policy: events, config, clock; no store, no I/O
    views                          the read side: projections, their SQL, the readers
    actors, upstream               the shells, the wire; both above the domain
    cmd                            the programs: cmd.daemon (the process, the call path),
                                   cmd.cli (the commands, which may use the daemon's
                                   client helpers; never the reverse)

Inside ``domain/`` the concerns are ranked too (:data:`DOMAIN_RANKS`): a concern imports
only lower ranks. Every ``import`` in every module is checked, including those inside
functions and under ``TYPE_CHECKING``; and no module reaches itself through its imports.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sessionwarden"

#: What each part may import (besides itself and third-party modules).
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "redact": frozenset({"errors"}),
    "clock": frozenset(),
    "text": frozenset(),
    "events": frozenset({"errors"}),
    "store": frozenset({"errors", "clock", "events"}),
    "config": frozenset({"errors", "redact"}),
    "domain": frozenset({"errors", "redact", "clock", "events", "config"}),
    "views": frozenset({"errors", "redact", "clock", "text", "events", "store", "config",
                        "domain"}),
    "actors": frozenset({"errors", "redact", "clock", "events", "store", "config", "domain",
                         "views"}),
    "upstream": frozenset({"errors", "redact", "clock", "events", "config", "domain"}),
    "cmd": frozenset({"errors", "redact", "clock", "text", "events", "store", "config",
                      "domain", "views", "actors", "upstream", "__init__"}),
    "__init__": frozenset(),
}

#: The concerns of ``domain/``, lowest first: a module imports only lower ranks (the
#: shared vocabulary ``session`` and ``calls`` sits above the concerns it names).
DOMAIN_RANKS: dict[str, int] = {
    "errors": 0, "__init__": 0,
    "keys": 1, "context": 1,
    "usage": 2, "runaway": 2,
    "cost": 3,
    "classify": 4, "credits": 4,
    "session": 5,
    "calls": 6,
    "admission": 7,
}

#: Inside ``cmd/``: the shared errors, the daemon, the CLI (which may use the daemon's
#: client helpers and its configuration loading, never the reverse).
CMD_ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "daemon": frozenset({"errors"}),
    "cli": frozenset({"errors", "daemon"}),
}


def modules() -> list[Path]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench", "build", ".venv") or rel.parts[0].startswith("."):
            continue
        found.append(rel)
    return found


def part_of(rel: Path) -> str:
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def module_name(rel: Path) -> str:
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").exists() or path.is_dir()


def imported_modules(path: Path) -> set[str]:
    """Every module of ours ``path`` imports (without the package prefix)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = [node.module]
            # ``from sessionwarden.domain import usage`` imports a module, not a name
            found += [f"{node.module}.{alias.name}" for alias in node.names
                      if _is_module(f"{node.module}.{alias.name}")]
        else:
            continue
        for name in found:
            head, _, rest = name.partition(".")
            if head == PACKAGE:
                names.add(rest or "__init__")
    return names


def imported_parts(path: Path) -> set[str]:
    return {name.partition(".")[0] for name in imported_modules(path)}


def _second(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {part_of(rel) for rel in modules()} <= set(ALLOWED)
    assert {_second(module_name(rel)) for rel in modules()
            if part_of(rel) == "domain"} <= set(DOMAIN_RANKS)
    assert {_second(module_name(rel)) for rel in modules()
            if part_of(rel) == "cmd"} <= set(CMD_ALLOWED)


@pytest.mark.parametrize("rel", modules(), ids=str)
def test_imports_point_down(rel: Path) -> None:
    part = part_of(rel)
    wrong = imported_parts(ROOT / rel) - ALLOWED[part] - {part}
    assert not wrong, f"{rel} ({part}) imports {sorted(wrong)}"


def _inside(rel: Path, part: str) -> Iterator[tuple[str, str]]:
    """(own concern, imported concern) for every import of ``part`` by ``rel`` in ``part``."""
    own = _second(module_name(rel))
    for name in imported_modules(ROOT / rel):
        if name.partition(".")[0] == part and _second(name) != own:
            yield own, _second(name)


@pytest.mark.parametrize("rel", [r for r in modules() if part_of(r) == "domain"], ids=str)
def test_domain_concerns_point_down(rel: Path) -> None:
    wrong = {theirs for own, theirs in _inside(rel, "domain")
             if DOMAIN_RANKS.get(theirs, 99) >= DOMAIN_RANKS[own]}
    assert not wrong, f"{rel} imports the domain's {sorted(wrong)} (same rank or higher)"


@pytest.mark.parametrize("rel", [r for r in modules() if part_of(r) == "cmd"], ids=str)
def test_the_daemon_never_imports_the_cli(rel: Path) -> None:
    wrong = {theirs for own, theirs in _inside(rel, "cmd")
             if theirs not in CMD_ALLOWED[own]}
    assert not wrong, f"{rel} imports cmd.{sorted(wrong)}"


def test_no_import_cycle() -> None:
    known = {module_name(rel): rel for rel in modules()}
    graph = {name: {m for m in imported_modules(ROOT / rel) if m in known and m != name}
             for name, rel in known.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for following in sorted(graph[name]):
            assert following not in path, "import cycle: " + " -> ".join(
                [*path[path.index(following):], following])
            if following not in done:
                visit(following, [*path, following])
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The rule has teeth: a domain module importing an actor is caught."""
    bad = tmp_path / "probe.py"
    bad.write_text("import sessionwarden.events\n"
                   "def f() -> None:\n    from sessionwarden.actors import bridge\n")
    assert imported_parts(bad) == {"events", "actors"}
    assert imported_parts(bad) - ALLOWED["domain"] == {"actors"}


@pytest.mark.parametrize("rel", [r for r in modules() if part_of(r) != "actors"], ids=str)
def test_actors_are_told_through_the_bridge(rel: Path) -> None:
    """``x.tell(m)`` outside ``actors/`` would let pykka's ActorDeadError escape raw (a
    500, and a call left open when the actor is down): ``bridge.tell`` turns it into
    ActorUnavailable, which every caller handles."""
    tree = ast.parse((ROOT / rel).read_text(), str(rel))
    bare = [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "tell"]
    assert not bare, f"{rel}: a bare .tell( on line(s) {bare}: use actors.bridge.tell"
