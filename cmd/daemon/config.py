"""Finding and reading the configuration: ``--config``, ``$SESSIONWARDEN_CONFIG``, or none.

Parsing and validation live below the actors, in ``sessionwarden.config``; this module only
decides *which* text to parse, reading the file or falling back to the zero config built
from the environment's well-known key variables.
"""

from collections.abc import Mapping
from pathlib import Path

from sessionwarden.config import Config, ConfigError, parse_config, zero_config

__all__ = ["CONFIG_ENV", "load_config"]

#: The environment variable naming the config file when ``--config`` is not given.
CONFIG_ENV = "SESSIONWARDEN_CONFIG"


def load_config(path: Path | None, environ: Mapping[str, str]) -> Config:
    """Load the configuration from ``path``, ``$SESSIONWARDEN_CONFIG``, or the environment.

    Args:
        path: an explicit config file (``--config``), or None.
        environ: the process environment (injected for tests).

    Raises:
        ConfigError: the named file is missing, unreadable or invalid.
    """
    if path is None:
        named = environ.get(CONFIG_ENV, "").strip()
        if not named:
            return zero_config(environ)
        path = Path(named)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    return parse_config(data, str(path))
