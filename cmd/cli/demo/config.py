"""The configuration of ``sessionwarden demo``'s daemon: a small-window model for ``sim``.

The demo's long session (:mod:`sessionwarden.cmd.cli.demo.context`) needs a model whose
window is small enough to be compressed within a few turns: :data:`DEMO_CONFIG` declares
it, a ``[[models]]`` entry on the built-in offline provider ``sim``. :func:`config_text`
is the whole file the demo's daemon reads:

* on a fresh log, :data:`DEMO_CONFIG` alone (no provider keys: the daemon's environment
  has none either);
* with ``--db``, the user's configuration — the file ``$SESSIONWARDEN_CONFIG`` names, or
  the zero config their key variables give, written out as the ``[[providers]]`` it
  stands for, so the pool of that log keeps its keys — followed by :data:`DEMO_CONFIG`.

:func:`check_offline` refuses a configuration with which the demo would leave the
machine: a provider named ``sim`` that replaces the simulated one, or a ``[compression]``
summary model on a real provider (the compression would call it).
"""

from collections.abc import Mapping
from pathlib import Path

from sessionwarden.cmd.errors import CommandError
from sessionwarden.config import (
    SIM_PROVIDER,
    ZERO_CONFIG_PROVIDERS,
    Config,
    ConfigError,
    UnknownModel,
    find_model,
    parse_config,
)
from sessionwarden.text import printable

__all__ = ["DEMO_CONFIG", "DEMO_MODEL", "check_offline", "config_text", "write_config"]

#: The model of the long session: a ``[[models]]`` name is sent upstream as it is, and
#: sim plays an agent for ``agent-N`` (up to N tool-calling turns a user message).
DEMO_MODEL = "agent-20"
#: What the demo adds to its daemon's configuration.
DEMO_CONFIG = f"""
# Added by `sessionwarden demo`: sim's agent with a small window (16,000 tokens), so the
# demo's long session has a tool result spilled and its history compressed within a few
# turns (trigger: 85 % of the 15,000 tokens left once the answer's 1,000 are reserved).
[[models]]
name = "{DEMO_MODEL}"
provider = "sim"
context_length = 16000
max_output_tokens = 1000
"""
_CONFIG_ENV = "SESSIONWARDEN_CONFIG"


def _zero_config_toml(environ: Mapping[str, str]) -> str:
    """The zero config of ``environ`` as TOML (key references only, never a key)."""
    lines: list[str] = []
    for variable, name, base_url, api_mode, pricing_url in ZERO_CONFIG_PROVIDERS:
        if environ.get(variable, "").strip():
            lines += ["[[providers]]", f'name = "{name}"', f'base_url = "{base_url}"',
                      f'api_mode = "{api_mode}"', f'keys = ["env:{variable}"]']
            lines += [f'pricing_url = "{pricing_url}"'] if pricing_url else []
            lines.append("")
    return "\n".join(lines)


def config_text(own_db: bool, environ: Mapping[str, str]) -> str:
    """The demo daemon's configuration file (``own_db``: the user's, plus the demo's)."""
    if not own_db:
        return DEMO_CONFIG.lstrip()
    named = environ.get(_CONFIG_ENV, "").strip()
    if not named:
        return _zero_config_toml(environ) + DEMO_CONFIG
    try:
        base = Path(named).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CommandError(printable(f"config file not found: {named}")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(printable(f"cannot read config file {named}: {exc}")) from None
    return base.rstrip("\n") + "\n" + DEMO_CONFIG


def check_offline(config: Config) -> None:
    """Refuse a configuration with which the demo's calls could leave the machine."""
    sim = config.provider(SIM_PROVIDER.name)
    if sim is None or not sim.simulated:
        raise CommandError("the demo stays offline, but the configuration replaces the "
                           "simulated provider sim: run `sessionwarden demo` without --db")
    compression = config.compression
    if compression.summariser == "model" and compression.summary_model:
        try:
            provider, _ = find_model(config, compression.summary_model)
        except UnknownModel:  # pragma: no cover - the config's own check refuses it
            return
        if not provider.simulated:
            raise CommandError(printable(
                f"the demo stays offline, but the configuration's summary model is on "
                f"provider {provider.name}: run `sessionwarden demo` without --db"))


def write_config(path: Path, own_db: bool, environ: Mapping[str, str]) -> None:
    """Write the demo daemon's configuration to ``path``, checked first.

    Raises:
        CommandError: the user's configuration is unreadable or invalid once the demo's
            model is added (a ``[[models]]`` entry of the same name, say), or it would
            take the demo online.
    """
    text = config_text(own_db, environ)
    try:
        config = parse_config(text, str(environ.get(_CONFIG_ENV) or "the demo's config"))
    except ConfigError as exc:
        raise CommandError(printable(f"the demo cannot add its model {DEMO_MODEL!r} to "
                                     f"your configuration: {exc}")) from None
    check_offline(config)
    path.write_text(text, encoding="utf-8")
