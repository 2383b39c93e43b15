"""How ``usage`` and ``reprice`` print their rows as ``--json`` or ``--csv``."""

import argparse
import csv
import json
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["csv_cell", "print_listing"]


def print_listing(args: argparse.Namespace, rows: list[dict[str, Any]], total: dict[str, Any],
                  as_csv: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> bool:
    """Print ``rows`` as ``--json`` or ``--csv`` asks (True), else nothing (False).

    ``--json`` stays a list of one object per group (scripts rely on it); the totals,
    when asked for, are one more object whose group is null and "total" true. ``--csv``
    has the fields of the totals' first flat row as its header; ``as_csv`` makes each
    object flat rows (a session's side calls become rows of their own).
    """
    if args.json:
        out = [*rows, *([total | {args.by: None, "total": True}] if args.totals else [])]
        print(json.dumps(out, indent=2))
        return True
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        fields = list(as_csv(total)[0])
        writer.writerow(fields)
        for row in [*rows, *([total] if args.totals else [])]:
            for record in as_csv(row):
                writer.writerow([csv_cell(f, record[f]) for f in fields])
        return True
    return False


#: The first characters that make a spreadsheet read a cell as a formula (OWASP's
#: "CSV injection" list): a session id may start with ``-`` or ``@``, and a model name
#: after ``<provider>/`` is any text a client sends.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: The CSV fields that hold our own exact amounts (a difference may be negative).
_AMOUNT_FIELDS = frozenset({"cost", "repriced_cost", "difference"})


def csv_cell(name: str, value: object) -> object:
    """``value`` as the CSV cell of field ``name``: None empty, text defused.

    A text cell that a spreadsheet would run as a formula gets a ``'`` in front (the
    standard defence: shown as text, the rest unchanged); an amount field is a decimal
    we wrote (``-0.5`` is a number, not a formula) and stays exact.
    """
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and (
            name not in _AMOUNT_FIELDS or not _is_decimal(value)):
        return "'" + value
    return value


def _is_decimal(text: str) -> bool:
    try:
        return Decimal(text).is_finite()
    except InvalidOperation:
        return False
