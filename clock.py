"""The one source of time: a :class:`Clock` is injected wherever a decision needs "now".

The domain layer never reads the wall clock itself, so its decisions are deterministic and
replayable: actors pass ``clock.now()`` (or ``clock.monotonic()`` for durations) into it.
The daemon uses :class:`SystemClock`; tests use :class:`FakeClock`, which only moves when
told to.
"""

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """What the domain and the actors ask of time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for durations and deadlines)."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now(self) -> datetime:
        """The wall clock, UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()


class FakeClock:
    """A clock that stands still until :meth:`advance` or :meth:`set` moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        """Start at ``start`` (UTC; default 2026-01-01T00:00:00Z)."""
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._mono = 1000.0

    def now(self) -> datetime:
        """The fake wall clock."""
        return self._now

    def monotonic(self) -> float:
        """The fake monotonic clock (moves with :meth:`advance`)."""
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, moment: datetime) -> None:
        """Move the wall clock to ``moment`` (it may jump either way, as wall clocks do)."""
        if moment.tzinfo is None:
            raise ValueError("FakeClock needs timezone-aware times")
        self._now = moment
