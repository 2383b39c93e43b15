"""Errors of the CLI and its configuration, each carrying the process exit code to use.

The tree::

    SessionwardenError
    └── CommandError            exit 1   anything the CLI reports without a traceback
        ├── ConfigError         exit 78  a bad or unreadable config file (EX_CONFIG)
        ├── UsageError          exit 64  bad command-line usage (EX_USAGE)
        ├── ListenError         exit 69  the address to listen on is in use or cannot be
        │                                bound (EX_UNAVAILABLE)
        └── UnknownModel        exit 78  a model name the configuration cannot resolve

Messages are safe to show a user: they name the offending key path and never contain a
secret value.
"""

from typing import ClassVar

from sessionwarden.errors import SessionwardenError

__all__ = ["CommandError", "ConfigError", "ListenError", "UnknownModel", "UsageError"]


class CommandError(SessionwardenError):
    """Base of the errors the CLI turns into a one-line message and an exit code."""

    exit_code: ClassVar[int] = 1


class ConfigError(CommandError):
    """The configuration (file, environment or a key reference) is invalid.

    Attributes:
        key_path: the offending key in TOML terms (``"providers[1].strategy"``), or None
            when the problem is not tied to one key (unreadable file, TOML syntax).
    """

    exit_code: ClassVar[int] = 78

    def __init__(self, message: str, *, key_path: str | None = None) -> None:
        """Create the error; ``message`` must already name ``key_path`` when there is one."""
        super().__init__(message)
        self.key_path = key_path


class UsageError(CommandError):
    """The command line itself is wrong (unknown option, conflicting flags, bad value)."""

    exit_code: ClassVar[int] = 64


class ListenError(CommandError):
    """The daemon cannot listen: the address is in use or cannot be bound."""

    exit_code: ClassVar[int] = 69


class UnknownModel(CommandError):
    """A model name that the configuration cannot resolve.

    It is neither ``"<provider>/<model>"`` with a configured provider nor a name listed
    under ``[[models]]``. The proxy turns it into a 404 for the client; the CLI exits
    with EX_CONFIG because the fix is to configure the model or provider.

    Attributes:
        model: the name that could not be resolved.
    """

    exit_code: ClassVar[int] = 78

    def __init__(self, model: str, known: tuple[str, ...] = ()) -> None:
        """Create the error for ``model``; ``known`` lists configured names as a hint."""
        hint = f" (configured: {', '.join(known)})" if known else ""
        shown = model if len(model) <= 200 else model[:200] + "…"
        super().__init__(
            f"unknown model {shown!r}: use '<provider>/<model>' or a name under [[models]]{hint}"
        )
        self.model = model
