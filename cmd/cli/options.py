"""The options every command shares (``--db``, ``--config``, ``--debug``…).

Its own module so that the command groups that build a parser of their own (the demo's
``--db``) take the same options as ``main`` without importing it.
"""

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from sessionwarden.cmd.errors import UsageError
from sessionwarden.redact import default_redactor

__all__ = ["Parser", "common_options"]


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's one exit code for bad usage: 64 (EX_USAGE), not 2.

    The commands' own usage errors (:class:`UsageError`) exit 64, and a script should not
    have to tell argparse's findings from theirs. Subparsers are made of this class too
    (``add_subparsers`` defaults ``parser_class`` to the main parser's type).
    """

    def error(self, message: str) -> NoReturn:
        """Print the usage line and ``message`` to stderr, and exit 64.

        argparse quotes the arguments it refuses, and a user may have pasted a key among
        them: the message passes the redactor's patterns first.
        """
        self.print_usage(sys.stderr)
        self.exit(UsageError.exit_code,
                  f"{self.prog}: error: {default_redactor.redact(message)}\n")


def common_options(default_db: object, default_debug: object) -> argparse.ArgumentParser:
    """``--db`` and ``--debug``, for the main parser and (as a parent) every subparser."""
    common = Parser(add_help=False)
    common.add_argument(
        "--db", type=Path, default=default_db,
        help="event log (default: $SESSIONWARDEN_DB, else the user's state directory)",
    )
    common.add_argument(
        "--debug", action="store_true", default=default_debug,
        help="on an internal error, print its traceback (for a bug report)",
    )
    return common

