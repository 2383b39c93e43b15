"""The configuration the docs show is the configuration the daemon reads.

docs/configuration.md promises "a complete example": it must parse with the daemon's own
parser and set every key of every section, so a key added to the configuration without
its line in the docs fails here. Every other TOML fragment of README.md and docs/ may be
partial (a section on its own), but each key it names must exist where it is written.
Another program's file (Codex's ``config.toml``) is fenced ```` ```toml codex ````: the
info string's first word still highlights it, and it is not ours to check.
"""

import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.config import (
    BudgetsConfig,
    CompressionConfig,
    Config,
    DaemonConfig,
    GuardrailsConfig,
    MetricsConfig,
    ModelConfig,
    OtelConfig,
    PriceConfig,
    ProviderConfig,
    ToolsConfig,
    parse_config,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
_TOML = re.compile(r"^```toml\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "daemon": DaemonConfig, "providers": ProviderConfig, "models": ModelConfig,
    "tools": ToolsConfig, "compression": CompressionConfig, "budgets": BudgetsConfig,
    "guardrails": GuardrailsConfig,
    "metrics": MetricsConfig,
    "otel": OtelConfig,
}


def _complete_example() -> str:
    text = CONFIGURATION.read_text()
    section = text.split("\n## A complete example\n", 1)[1].split("\n## ", 1)[0]
    blocks = _TOML.findall(section)
    assert len(blocks) == 1, "the complete example is the section's one TOML block"
    return str(blocks[0])


def _tables(raw: dict[str, Any]) -> list[tuple[str, type[msgspec.Struct], dict[str, Any]]]:
    """(where, struct, table) for every table of a parsed TOML document."""
    found = []
    for name, value in raw.items():
        struct = _SECTIONS.get(name)
        assert struct is not None, f"[{name}] is not a section of the configuration"
        for index, table in enumerate(value if isinstance(value, list) else [value]):
            where = f"{name}[{index}]" if isinstance(value, list) else name
            found.append((where, struct, table))
            if isinstance(table.get("price"), dict):
                found.append((f"{where}.price", PriceConfig, table["price"]))
    return found


def test_the_complete_example_parses() -> None:
    config = parse_config(_complete_example(), "docs/configuration.md")
    assert config.providers and config.models
    assert config.budgets.session_usd is not None


def test_the_complete_example_sets_every_key() -> None:
    raw = tomllib.loads(_complete_example())
    assert set(raw) == set(Config.__struct_fields__)
    written: dict[type[msgspec.Struct], set[str]] = {}
    for _, struct, table in _tables(raw):
        written.setdefault(struct, set()).update(table)
    missing = [f"{struct.__name__}.{field}"
               for struct in (*_SECTIONS.values(), PriceConfig)
               for field in struct.__struct_fields__
               if field not in written.get(struct, set())]
    assert missing == [], "docs/configuration.md: add these keys to the complete example"


def test_every_key_of_a_toml_fragment_in_the_docs_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    unknown = []
    checked = 0
    for page in pages:
        for block in _TOML.findall(page.read_text()):
            for where, struct, table in _tables(tomllib.loads(block)):
                checked += 1
                unknown += [f"{page.relative_to(ROOT)}: {where}.{key}" for key in table
                            if key not in struct.__struct_fields__]
    assert checked > 10
    assert unknown == []
