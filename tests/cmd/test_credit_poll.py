"""The balance poller through an in-process daemon: a fake OpenRouter key endpoint.

The daemon's clock is a FakeClock, so a minute passes when the test says so; the poller
wakes every few milliseconds (``TICK_S``) to see what is due. What must hold: the key is
polled at start (a seed: a key already at 92 % warns at once), then at most once a minute,
with its own key; the notice reaches the response header; failures (a 500, an oversized
answer) are logged once per key until a poll succeeds again, never with the key, and the
task keeps going.
"""

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from sessionwarden.cmd.daemon import credit_poll
from sessionwarden.config import parse_config

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

CONFIG = """
[[providers]]
name = "fake"
base_url = "{base}"
keys = ["env:FAKE_KEY_A"]
credits_url = "{base}/key"
[[models]]
name = "{model}"
provider = "fake"
context_length = 128000
"""


def answer(used: int) -> dict[str, Any]:
    """OpenRouter's key endpoint for a key with a $100 limit, ``used`` dollars spent."""
    return {"data": {"label": "sk-or-v1-abc...def", "limit": 100, "limit_remaining": 100 - used,
                     "usage": used, "is_free_tier": False, "limit_reset": "monthly"}}


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Polled:
    def __init__(self, daemon: InProcessDaemon, fake: FakeProviderServer, clock: FakeClock,
                 logs: list[str]) -> None:
        self.daemon, self.fake, self.clock, self.logs = daemon, fake, clock, logs

    @property
    def polls(self) -> int:
        return self.fake.state.counters["/v1/key"]

    def minute_later(self, expected_polls: int) -> None:
        self.clock.advance(61)
        wait_for(lambda: self.polls == expected_polls)
        time.sleep(0.05)  # the answer's effect reaches the log (an ask, an append)

    def notices(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self.daemon.rows(
            "SELECT key, message FROM view_credit_notices ORDER BY key")]


@pytest.fixture
def polled(tmp_path: Path, fake: FakeProviderServer,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Polled]:
    monkeypatch.setattr(credit_poll, "TICK_S", 0.01)
    fake.state.key_answer = answer(92)
    clock = FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    logs: list[str] = []
    sink = logger.add(lambda m: logs.append(str(m)), level="INFO", format="{message}")
    daemon = InProcessDaemon(tmp_path / "events.db", fake, clock=clock)
    daemon.config = parse_config(CONFIG.format(base=fake.base_url, model=MODEL))
    try:
        yield Polled(daemon.start(), fake, clock, logs)
    finally:
        daemon.stop()
        logger.remove(sink)


BAND_90 = "used $92.00 of the $100.00 credit cap (90%)"


def test_the_balance_is_polled_at_start_then_at_most_once_a_minute(polled: Polled) -> None:
    daemon, fake = polled.daemon, polled.fake
    wait_for(lambda: polled.polls == 1)
    request = next(r for r in fake.state.snapshot() if r.path == "/v1/key")
    assert (request.method, request.headers["authorization"]) == (
        "GET", f"Bearer {daemon.keys['FAKE_KEY_A']}")
    # The first balance of a key is a seed: already at 92 %, it warns at once.
    wait_for(lambda: polled.notices() == [("credits.usage", BAND_90)])
    with daemon.openai(session="polled") as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-sessionwarden-notice"] == f"warn credits.usage: {BAND_90}"

    time.sleep(0.2)  # some twenty ticks: nothing is due
    polled.clock.advance(30)
    time.sleep(0.2)
    assert polled.polls == 1
    polled.clock.advance(31)  # a minute after the first poll
    wait_for(lambda: polled.polls == 2)
    time.sleep(0.2)
    assert polled.polls == 2

    fake.state.key_answer = answer(10)
    polled.minute_later(3)
    wait_for(lambda: polled.notices() == [])
    types = daemon.types("credits-fake")
    assert types.count("credits.notice_raised.v1") == 1
    assert types.count("credits.notice_cleared.v1") == 1


def test_failures_are_logged_once_per_key_until_a_poll_succeeds(polled: Polled) -> None:
    key = polled.daemon.keys["FAKE_KEY_A"]
    wait_for(lambda: polled.polls == 1)

    def failures() -> list[str]:
        return [m for m in polled.logs if "could not be read" in m]

    polled.fake.state.key_status = 500
    polled.minute_later(2)
    polled.minute_later(3)
    assert len(failures()) == 1 and "(HTTP 500)" in failures()[0]

    polled.fake.state.key_status = 200
    polled.minute_later(4)
    assert any("is read again" in m for m in polled.logs)

    polled.fake.state.key_answer = {"data": {"limit": 100, "usage": 1, "pad": "x" * 70_000}}
    polled.minute_later(5)
    polled.minute_later(6)
    assert len(failures()) == 2 and "the answer is over 64 KiB" in failures()[1]

    polled.fake.state.key_answer = {"data": {"limit": None, "usage": 3}}  # no limit: no gauge
    polled.fake.state.key_status = 200
    polled.minute_later(7)
    assert polled.daemon.runtime.supervisor.ref("rateguard").is_alive()
    assert not any(key in m for m in polled.logs)
