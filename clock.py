"""The one source of time: a :class:`Clock` is injected wherever a decision needs "now".

The domain layer never reads the wall clock itself, so its decisions are deterministic and
replayable: actors pass ``clock.now()`` (or ``clock.monotonic()`` for durations) into it.
The daemon uses :class:`SystemClock`; tests use their own clock that only moves when told
to (``tests/support/clock.py``).

``SESSIONWARDEN_CLOCK_OFFSET`` (``400d``, ``-2h``, ``90s``) shifts every :class:`SystemClock`
of a process, and of the processes it starts, by that much: the wall clock a year ahead
without libfaketime, whose patched timed waits hang a daemon. The test suite is run under
it once a year ahead to show it depends on no date (README, the test command).
"""

import asyncio
import os
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["OFFSET_ENV", "Clock", "SystemClock", "clock_offset"]

#: The environment variable that shifts the wall clock of a process (see above).
OFFSET_ENV = "SESSIONWARDEN_CLOCK_OFFSET"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_OFFSET = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([smhd]?)\s*")


def clock_offset(environ: Mapping[str, str] | None = None) -> timedelta:
    """The shift ``SESSIONWARDEN_CLOCK_OFFSET`` asks for (zero when unset).

    Raises:
        ValueError: the value is not a number with an optional unit ``s m h d``.
    """
    raw = (os.environ if environ is None else environ).get(OFFSET_ENV, "")
    if not raw.strip():
        return timedelta(0)
    found = _OFFSET.fullmatch(raw)
    if found is None:
        raise ValueError(f"{OFFSET_ENV}={raw!r}: expected a number of s, m, h or d (400d)")
    return timedelta(seconds=float(found[1]) * _UNITS[found[2] or "s"])


class Clock(Protocol):
    """What the domain and the actors ask of time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for durations and deadlines)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock (a policy's wait, such as a retry's backoff)."""
        ...


class SystemClock:
    """The machine's clocks (the wall clock shifted by ``SESSIONWARDEN_CLOCK_OFFSET``)."""

    def __init__(self, offset: timedelta | None = None) -> None:
        """Shift the wall clock by ``offset`` (default: what the environment asks for)."""
        self._offset = clock_offset() if offset is None else offset

    def now(self) -> datetime:
        """The wall clock, UTC."""
        if self._offset:
            return datetime.now(UTC) + self._offset
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(seconds)
