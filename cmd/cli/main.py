"""The ``sessionwarden`` command: argument parsing, dispatch, and errors without tracebacks.

Every subcommand is a function ``run(args, db) -> exit code``. Errors a user can cause
(:class:`~sessionwarden.errors.SessionwardenError`) become one line on stderr and their
exit code; a bug becomes one line naming the exception type and a pointer to
``--debug``, which shows the traceback for developers.

The database path is decided here, and so is its directory, which the store never
creates: a path the user chose (``--db``, ``$SESSIONWARDEN_DB``) must be in an existing
directory, since a typo there must not start a new, empty log somewhere else; the default
state directory is created (0700) before a command that writes, and made 0700 if it
exists open to others. Every command runs under umask 077, so nothing it creates is
open to other users (``cmd/daemon/private.py``).
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from sessionwarden import __version__
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.cmd.cli.daemon import add_daemon_command, add_ui_command
from sessionwarden.cmd.cli.keys import add_keys_commands
from sessionwarden.cmd.cli.log import add_log_commands
from sessionwarden.cmd.cli.options import Parser, common_options
from sessionwarden.cmd.cli.usage import add_usage_commands
from sessionwarden.cmd.daemon.private import UMASK, private_directory
from sessionwarden.cmd.errors import CommandError
from sessionwarden.config import ConfigError
from sessionwarden.errors import SessionwardenError
from sessionwarden.redact import default_redactor
from sessionwarden.store import default_db_path
from sessionwarden.store.errors import CorruptStore, StoreUnavailable

__all__ = ["Parser", "build_parser", "database", "internal_error", "main"]

#: Exit code for a database that cannot be opened or is corrupt (EX_IOERR / EX_DATAERR).
EXIT_UNAVAILABLE = 74
EXIT_CORRUPT = 65
#: Exit code for an invalid configuration (EX_CONFIG).
EXIT_CONFIG = 78

#: The commands that may create the log, and so the default state directory.
_WRITING_COMMANDS = frozenset({"daemon"})
#: The commands that make a log of their own unless ``--db`` names one (not
#: ``$SESSIONWARDEN_DB``: a demo must not write into the log a user exported).
_OWN_LOG_COMMANDS = frozenset({"demo"})



def build_parser() -> argparse.ArgumentParser:
    """The full argument parser of the CLI."""
    parser = Parser(
        prog="sessionwarden",
        description="Govern long LLM-agent sessions; audit every decision in an event log.",
        parents=[common_options(default_db=None, default_debug=False)],
    )
    parser.add_argument("--version", action="version", version=f"sessionwarden {__version__}")
    # The commands register on plain ArgumentParser subparsers; these are Parsers (the
    # main parser's class), which only changes the exit code of their errors.
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(title="commands", metavar="COMMAND", dest="command"),
    )
    sub.required = True
    # Subparsers copy --db so it may stand before or after the command name. Their copies
    # default to "not given": a subparser's default would overwrite what the main parser
    # already read (``sessionwarden --db F events`` would lose F).
    original = sub.add_parser
    common = common_options(default_db=argparse.SUPPRESS, default_debug=argparse.SUPPRESS)

    def add_parser(name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("parents", [common])
        return original(name, **kwargs)  # type: ignore[arg-type]

    sub.add_parser = add_parser  # type: ignore[method-assign]
    add_daemon_command(sub)
    add_ui_command(sub)
    add_log_commands(sub)
    add_usage_commands(sub)
    add_keys_commands(sub)
    return parser


def database(args: argparse.Namespace, environ: dict[str, str]) -> Path:
    """The database path for ``args``, its directory checked or (if the default) created.

    Raises:
        StoreUnavailable: a chosen path's directory is missing or not a directory, or the
            default state directory cannot be created.
    """
    if args.command in _OWN_LOG_COMMANDS and args.db is None:
        return default_db_path(environ)  # not opened: the command makes its own log
    chosen = args.db is not None or bool(environ.get("SESSIONWARDEN_DB"))
    db: Path = args.db or default_db_path(environ)
    directory = db.parent
    if chosen:
        if not directory.exists():
            raise StoreUnavailable(f"{directory}: no such directory")
        if not directory.is_dir():
            raise StoreUnavailable(f"{directory}: not a directory")
    else:
        # Ours alone: created 0700 by a command that writes, tightened (or refused) if
        # it exists open to others, whatever the command.
        try:
            private_directory(directory, _warn, create=args.command in _WRITING_COMMANDS)
        except OSError as exc:
            raise StoreUnavailable(
                f"{directory}: cannot create the state directory ({exc.strerror})"
            ) from None
    return db


def _warn(message: str) -> None:
    print(f"sessionwarden: warning: {message}", file=sys.stderr)


def internal_error(exc: BaseException) -> str:
    """The one line a bug becomes, passed through the redactor's patterns.

    A library's message may quote what it was given: a header with a token, an argument
    with a key.
    """
    text = default_redactor.redact(f"{type(exc).__name__}: {exc}")
    return f"sessionwarden: internal error ({text}); rerun with --debug for details"


def main(argv: Sequence[str] | None = None, clock: Clock | None = None) -> int:
    """Run the CLI; returns the process exit code (and exits with it as a script).

    ``clock`` is the time the command reads "now" from (``args.clock``): tests pass the
    fake clock their daemon runs on, so a key benched "until 13:00" of that clock is
    benched for the CLI too, whatever today's date.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    umask = os.umask(UMASK)  # what the CLI creates is the user's alone (cmd/daemon/private.py)
    try:
        try:
            args.clock = clock or SystemClock()
        except ValueError as exc:  # a malformed SESSIONWARDEN_CLOCK_OFFSET
            raise ConfigError(str(exc)) from None
        db = database(args, dict(os.environ))
        args.build_parser = build_parser  # the demo parses its steps' commands
        code: int = args.run(args, db)
    except CommandError as exc:
        print(f"sessionwarden: {exc}", file=sys.stderr)
        code = exc.exit_code
    except ConfigError as exc:
        print(f"sessionwarden: {exc}", file=sys.stderr)
        code = EXIT_CONFIG
    except CorruptStore as exc:
        print(f"sessionwarden: {exc}", file=sys.stderr)
        code = EXIT_CORRUPT
    except StoreUnavailable as exc:
        print(f"sessionwarden: {exc}", file=sys.stderr)
        code = EXIT_UNAVAILABLE
    except SessionwardenError as exc:
        print(f"sessionwarden: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); silence the flush at exit too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except Exception as exc:
        if args.debug:
            raise
        print(internal_error(exc), file=sys.stderr)
        code = 70
    finally:
        os.umask(umask)
    return code


if __name__ == "__main__":
    sys.exit(main())
