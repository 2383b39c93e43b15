"""clock.py: the real clock is UTC and monotonic; the fake one moves only when told."""

from datetime import UTC, datetime, timedelta

import pytest
from sessionwarden.clock import FakeClock, SystemClock


def test_system_clock_is_aware_utc_and_monotonic() -> None:
    clock = SystemClock()
    now = clock.now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert abs((datetime.now(UTC) - now).total_seconds()) < 5
    assert clock.monotonic() <= clock.monotonic()


def test_fake_clock_moves_only_when_told() -> None:
    start = datetime(2026, 12, 1, tzinfo=UTC)
    clock = FakeClock(start)
    assert clock.now() == start and clock.now() == start
    mono = clock.monotonic()
    clock.advance(1.5)
    assert clock.now() == start + timedelta(seconds=1.5)
    assert clock.monotonic() == mono + 1.5
    clock.set(start - timedelta(days=1))  # wall clocks may jump back ...
    assert clock.now() == start - timedelta(days=1)
    assert clock.monotonic() == mono + 1.5  # ... monotonic ones never do
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        FakeClock(datetime(2026, 1, 1))
