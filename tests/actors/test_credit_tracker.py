"""The rate guard's credits tracker over a real log: headers in, events out, state back.

The tracker (``actors/credits.py``) is a plain object the rate guard's thread owns, so it
is tested here directly, with a real EventLog and its real views.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from loguru import logger
from msgspec.structs import replace
from sessionwarden.actors.credits import CreditBoard, CreditTracker
from sessionwarden.domain.calls import CallOutcome
from sessionwarden.domain.keys.ratelimits import rate_limit_headers
from sessionwarden.store import EventLog
from sessionwarden.views.credit_status import active_notices
from sessionwarden.views.wiring import default_projections

NOW = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
LIMIT = 20_000_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    with EventLog(tmp_path / "events.db", projections=default_projections()) as opened:
        yield opened


def response(used: float, *, version: str = "1", paid: bool = True,
             extra: int = 0) -> dict[str, str]:
    """A response's headers: rate limits, credits (``used`` of a $20 cap) and others."""
    sub = int(LIMIT * (1 - used))
    c = "X-Nous-Credits-"  # names are case-insensitive
    return {
        "Content-Type": "application/json", "x-ratelimit-remaining-requests": "9",
        **{f"x-ratelimit-limit-b{i}": "1" for i in range(extra)},
        c + "Version": version, c + "Remaining-Micros": str(sub), c + "Remaining-Usd": "1.00",
        c + "Subscription-Micros": str(sub), c + "Subscription-Usd": "1.00",
        c + "Rollover-Micros": "0", c + "Purchased-Micros": "0", c + "Purchased-Usd": "0.00",
        c + "As-Of-Ms": "0", c + "Subscription-Limit-Micros": str(LIMIT),
        c + "Subscription-Limit-Usd": "20.00", c + "Denominator-Kind": "subscription_cap",
        c + "Paid-Access": "true" if paid else "false",
    }


def outcome(headers: dict[str, str], credential: str = "fp:a", model: str = "m") -> CallOutcome:
    return CallOutcome(call_id="c", session_id="s", outcome="ok", provider="nous",
                       credential=credential, model=model,
                       rate_limit_headers=rate_limit_headers(headers))


def test_the_credit_headers_travel_with_the_rate_limit_headers() -> None:
    kept = dict(rate_limit_headers(response(0.5, extra=200)))
    # 64 rate-limit headers at most, and the credit headers are not crowded out
    assert sum(k.startswith("x-ratelimit-") for k in kept) == 64
    assert kept["x-nous-credits-version"] == "1"
    assert "content-type" not in kept


def test_notices_are_appended_and_a_new_tracker_recovers_them(log: EventLog) -> None:
    board = CreditBoard()
    tracker = CreditTracker(board)
    assert tracker.from_outcome(outcome(response(0.1)), NOW)  # the latch: recorded
    parts = tracker.from_outcome(outcome(response(0.8)), NOW)
    assert [p.stream for p in parts] == ["credits-nous"]
    assert [e.type for e in parts[0].events] == ["credits.observed.v1",
                                                  "credits.notice_raised.v1"]
    log.append_batch(list(parts))
    header = "warn credits.usage: used $16.00 of the $20.00 credit cap (75%)"
    assert board.header("nous", "fp:a", NOW) == header.encode()
    assert board.header("nous", "fp:b", NOW) is None  # another key, another account

    again = CreditBoard()
    recovered = CreditTracker(again)
    recovered.load(log.read_connection(), NOW)
    # the same state but for when it was observed (the writer's recorded time)
    assert (replace(recovered.state("nous", "fp:a"), observed_at=None)
            == replace(tracker.state("nous", "fp:a"), observed_at=None))
    assert again.header("nous", "fp:a", NOW) == header.encode()
    assert recovered.from_outcome(outcome(response(0.8)), NOW) == ()  # no repeat
    assert [n["message"] for n in active_notices(log.read_connection(), NOW, "nous")] == [
        "used $16.00 of the $20.00 credit cap (75%)"]
    assert active_notices(log.read_connection(), NOW, "other") == []


def test_a_passing_notice_lapses_on_the_board_and_in_status(log: EventLog) -> None:
    tracker = CreditTracker()
    log.append_batch(list(tracker.from_outcome(outcome(response(0.1, paid=False)), NOW)))
    log.append_batch(list(tracker.from_outcome(outcome(response(0.1)), NOW)))
    soon, later = NOW + timedelta(seconds=1), NOW + timedelta(seconds=9)
    assert tracker.board.header("nous", "fp:a", soon) == (
        b"success credits.restored: paid credit access restored")
    assert tracker.board.header("nous", "fp:a", later) is None
    # the recorded time is the writer's clock: status judges the lifetime by it
    [row] = log.read_connection().execute("SELECT raised_at FROM view_credit_notices")
    raised_at = datetime.fromisoformat(row[0])
    conn = log.read_connection()
    assert [n["key"] for n in active_notices(conn, raised_at + timedelta(seconds=1))] == [
        "credits.restored"]
    assert active_notices(conn, raised_at + timedelta(seconds=9)) == []


def test_a_free_model_is_asked_about_and_suppresses_depleted(log: EventLog) -> None:
    asked: list[tuple[str, str]] = []

    def is_free(provider: str, model: str) -> bool:
        asked.append((provider, model))
        return model.endswith(":free")

    tracker = CreditTracker(is_free=is_free)
    assert tracker.from_outcome(outcome(response(0.1, paid=False), model="x:free"), NOW)
    assert asked == [("nous", "x:free")]
    assert not tracker.state("nous", "fp:a").depleted_shown


def test_nothing_without_headers_or_a_key_and_a_newer_version_warns_once() -> None:
    tracker = CreditTracker()
    assert tracker.from_outcome(outcome({"x-ratelimit-remaining-requests": "3"}), NOW) == ()
    assert tracker.from_outcome(outcome(response(0.9), credential=""), NOW) == ()
    logs: list[str] = []
    sink = logger.add(lambda m: logs.append(str(m)), level="WARNING", format="{message}")
    try:
        for _ in range(3):
            assert tracker.from_outcome(outcome(response(0.9, version="2")), NOW) == ()
    finally:
        logger.remove(sink)
    assert len(logs) == 1 and "version 2" in logs[0]


def test_a_reloading_tracker_forgets_what_never_reached_the_log(log: EventLog) -> None:
    board = CreditBoard()
    tracker = CreditTracker(board)
    tracker.from_outcome(outcome(response(0.1)), NOW)
    tracker.from_outcome(outcome(response(0.95)), NOW)  # published, but never appended
    assert board.header("nous", "fp:a", NOW) is not None
    CreditTracker(board).load(log.read_connection(), NOW)  # what a restarted guard does
    assert board.header("nous", "fp:a", NOW) is None
