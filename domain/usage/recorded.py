"""Reading recorded costs back: one rule for every reader (``usage``, ``status``, the rollup).

A cost in the log is a decimal string the daemon wrote, or None when the call had no
price. A reader must never trust it blindly: an altered or foreign log may hold junk
(``"abc"``, ``"NaN"``, ``"1e300"``). :func:`read_cost` says which recorded costs count,
:func:`exact_sum` adds them exactly, and :func:`combined_status` gives a group of calls
its one cost status. ``usage`` and ``status --session`` both read through here, so they
agree on any log.
"""

import decimal
from collections.abc import Iterable
from decimal import Decimal

__all__ = ["EXACT", "MAX_COST", "combined_status", "exact_sum", "read_cost"]

#: Sums of costs are exact: the default context keeps 28 digits, and a total of a large
#: and a tiny cost would be rounded silently.
EXACT = decimal.Context(prec=200, traps=[decimal.InvalidOperation, decimal.Overflow])
#: A recorded cost beyond these is junk (an altered log's), counted as unknown: above a
#: trillion dollars a sum could overflow, and below 1e-150 it could not stay exact in
#: 200 digits. The daemon's own costs (capped prices times token counts) are far inside.
MAX_COST = Decimal(10) ** 12
_MIN_EXPONENT = -150


def read_cost(text: str | None) -> Decimal | None:
    """A recorded cost as a Decimal; None when absent or junk (not a sane finite number)."""
    if text is None:
        return None
    try:
        value = Decimal(text)
    except decimal.InvalidOperation:
        return None
    if not value.is_finite() or abs(value) > MAX_COST or (
            value and value.adjusted() < _MIN_EXPONENT):
        return None
    return value


def exact_sum(costs: Iterable[str | None]) -> tuple[Decimal, int]:
    """The exact sum of the costs that count, and how many did not (None or junk)."""
    total, bad = Decimal(0), 0
    for text in costs:
        value = read_cost(text)
        if value is None:
            bad += 1
        else:
            total = EXACT.add(total, value)
    return total, bad


def combined_status(statuses: Iterable[str]) -> str:
    """The cost status of a group of calls with these statuses.

    ``unknown`` when any call is unknown (or there is none: nothing is known yet), the
    calls' common status when they share one, else ``partial``.
    """
    found = set(statuses)
    if not found or "unknown" in found:
        return "unknown"
    return next(iter(found)) if len(found) == 1 else "partial"
