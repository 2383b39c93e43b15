"""clock.py: the real clock is UTC and monotonic; the fake one moves only when told."""

from datetime import UTC, datetime, timedelta

import pytest
from sessionwarden.clock import OFFSET_ENV, SystemClock, clock_offset

from tests.support.clock import FakeClock


def test_system_clock_is_aware_utc_and_monotonic() -> None:
    clock = SystemClock(timedelta(0))
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


def test_the_offset_shifts_the_wall_clock_only() -> None:
    ahead = SystemClock(timedelta(days=400))
    assert abs((ahead.now() - datetime.now(UTC)) - timedelta(days=400)) < timedelta(seconds=5)
    assert abs(ahead.monotonic() - SystemClock(timedelta(0)).monotonic()) < 5


@pytest.mark.parametrize(("raw", "seconds"), [
    ("", 0), ("  ", 0), ("90", 90), ("90s", 90), ("-2h", -7200), ("400d", 400 * 86400),
    ("1.5m", 90), (" +3d ", 3 * 86400),
])
def test_the_offset_is_read_from_the_environment(raw: str, seconds: float) -> None:
    assert clock_offset({OFFSET_ENV: raw}) == timedelta(seconds=seconds)


@pytest.mark.parametrize("raw", ["tomorrow", "3w", "d", "1e9", "--1"])
def test_a_malformed_offset_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ValueError, match=OFFSET_ENV):
        clock_offset({OFFSET_ENV: raw})
