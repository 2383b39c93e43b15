"""Errors of the CLI and the daemon's HTTP layer.

The tree::

    SessionwardenError
    └── CommandError            exit 1   anything the CLI reports without a traceback
        ├── UsageError          exit 64  bad command-line usage (EX_USAGE)
        ├── ListenError         exit 69  the address to listen on is in use or cannot be
        │                                bound (EX_UNAVAILABLE)
        ├── UnsafeFile          exit 74  the state directory or the token file is another
        │                                user's, a link, or open to others and cannot be
        │                                made private (EX_IOERR, as any unusable database)
        └── BodyTooLarge                 a request body over ``[daemon] max_body_mib``
                                         (the daemon answers 413; never reaches the CLI)

Configuration errors are ``sessionwarden.config.errors.ConfigError`` (exit 78); the
CLI's table of exit codes by error is in ``cmd/cli/main.py``. Messages are safe to show a
user: they never contain a secret value.
"""

from typing import ClassVar

from sessionwarden.errors import SessionwardenError

__all__ = ["BodyTooLarge", "CommandError", "ListenError", "UnsafeFile", "UsageError"]


class CommandError(SessionwardenError):
    """Base of the errors the CLI turns into a one-line message and an exit code."""

    exit_code: ClassVar[int] = 1


class UsageError(CommandError):
    """The command line itself is wrong (unknown option, conflicting flags, bad value)."""

    exit_code: ClassVar[int] = 64


class ListenError(CommandError):
    """The daemon cannot listen: the address is in use or cannot be bound."""

    exit_code: ClassVar[int] = 69


class UnsafeFile(CommandError):
    """A file or directory holding the daemon's secrets cannot be made private."""

    exit_code: ClassVar[int] = 74


class BodyTooLarge(CommandError):
    """A request body exceeds the configured cap."""
