"""The tests' clock: it stands still until a test moves it (``advance``, ``set``)."""

import asyncio
from datetime import UTC, datetime, timedelta

__all__ = ["FakeClock"]


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

    async def sleep(self, seconds: float) -> None:
        """Move the clock by ``seconds`` at once, then yield to the event loop.

        A wait the policy decides (a retry's backoff) passes in no real time, as the
        clock says it did: tests of retries cost nothing and see the time it took.
        """
        self.advance(seconds)
        await asyncio.sleep(0)

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
