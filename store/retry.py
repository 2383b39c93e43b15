"""Application-level retry of write transactions when SQLite reports the database busy.

SQLite's own busy handler waits in lock-step, and under ``synchronous=FULL`` writers from
several processes convoy behind it (one append waited over a second in our measurements).
So the busy timeout is short and this loop retries the whole transaction after a random
20–150 ms pause, until a time budget runs out and :class:`StoreBusy` reaches the caller.
"""

import random
import time
from collections.abc import Callable
from typing import TypeVar

import apsw
from sessionwarden.store.errors import StoreBusy

__all__ = ["DEFAULT_BUDGET_S", "JITTER_S", "retry_busy"]

T = TypeVar("T")

DEFAULT_BUDGET_S = 30.0
JITTER_S = (0.020, 0.150)


def retry_busy(
    attempt: Callable[[], T],
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``attempt`` until it does not raise ``apsw.BusyError`` or the budget is spent.

    ``attempt`` must leave no transaction open when it raises: it is run again from the
    start.

    Raises:
        StoreBusy: the database stayed busy for the whole budget.
    """
    deadline = clock() + budget_s
    tries = 0
    while True:
        tries += 1
        try:
            return attempt()
        except apsw.BusyError:
            if clock() >= deadline:
                raise StoreBusy(
                    f"the database stayed locked for {budget_s:.0f} s ({tries} attempts)"
                ) from None
            sleep(random.uniform(*JITTER_S))
