"""Imports point one way: a lower layer never imports a higher one.

The layers, lowest first (ARCHITECTURE.md, "Layers")::

    errors, redact, clock          the root: import nothing of ours but ``errors``
    events                         the facts
    store                          the log (knows events only as bytes and tags; clock)
    config                         the configuration
    domain                         policy: events, config, clock; no store, no I/O
    actors, upstream               the shells, the wire; both above the domain
    cmd                            the CLI and the daemon, which wires everything

Every ``import`` in every module is checked, including those inside functions.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sessionwarden"

#: What each part may import (besides itself and third-party modules).
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "redact": frozenset({"errors"}),
    "clock": frozenset(),
    "events": frozenset({"errors"}),
    "store": frozenset({"errors", "clock", "events"}),
    "config": frozenset({"errors", "redact"}),
    "domain": frozenset({"errors", "redact", "clock", "events", "config"}),
    "actors": frozenset({"errors", "redact", "clock", "events", "store", "config", "domain"}),
    "upstream": frozenset({"errors", "redact", "clock", "events", "config", "domain"}),
    "cmd": frozenset({"errors", "redact", "clock", "events", "store", "config", "domain",
                      "actors", "upstream", "__init__"}),
    "__init__": frozenset(),
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


def imported_parts(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    parts: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            head, _, rest = name.partition(".")
            if head == PACKAGE:
                parts.add(rest.partition(".")[0] or "__init__")
    return parts


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {part_of(rel) for rel in modules()} <= set(ALLOWED)


@pytest.mark.parametrize("rel", modules(), ids=str)
def test_imports_point_down(rel: Path) -> None:
    part = part_of(rel)
    wrong = imported_parts(ROOT / rel) - ALLOWED[part] - {part}
    assert not wrong, f"{rel} ({part}) imports {sorted(wrong)}"


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The rule has teeth: a domain module importing an actor is caught."""
    bad = tmp_path / "probe.py"
    bad.write_text("import sessionwarden.events\n"
                   "def f() -> None:\n    from sessionwarden.actors import bridge\n")
    assert imported_parts(bad) == {"events", "actors"}
    assert imported_parts(bad) - ALLOWED["domain"] == {"actors"}
