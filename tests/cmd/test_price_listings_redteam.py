"""A hostile price listing through the daemon: bounded in size and in how often it is recorded.

Issue 21, item 13: a listing that changed at every fetch appended a 1.1 MiB event each
time (66 in 6 s at a short refresh). Here the listing's own server (a thread on
127.0.0.1) answers each fetch with other prices; the daemon refreshes every 0.05 s. At
most ``RECORD_BURST`` listings are recorded per ``RECORD_WINDOW_S`` (the daemon's clock
is a FakeClock, so the window passes when the test says), and a listing whose prices are
too big to record is refused, logged, and the prices in effect kept. The daemon serves
calls throughout and ``replay --verify`` stays ok.
"""

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from loguru import logger
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.cost.price_listing import (
    MAX_RECORDED_BYTES,
    RECORD_BURST,
    RECORD_WINDOW_S,
)
from sessionwarden.events import CODEC, CallCompleted, PriceListingPublished

from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

STREAM = "prices-listed"


class _Listing(http.server.BaseHTTPRequestHandler):
    """Every GET answers ``make(n)`` for the n-th fetch (from 0)."""

    make: Callable[[int], bytes] = staticmethod(lambda n: b"")
    fetched = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        with self.lock:
            n = _Listing.fetched
            _Listing.fetched += 1
        data = _Listing.make(n)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def changing(n: int) -> bytes:
    """A listing whose price of ``acme/house-7b`` is different at every fetch."""
    return json.dumps({"data": [{"id": "acme/house-7b", "pricing": {
        "prompt": f"0.000001{n:04d}", "completion": "0.000002"}}]}).encode()


@pytest.fixture
def server() -> Iterator[str]:
    _Listing.fetched = 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/models"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer, server: str
           ) -> Iterator[InProcessDaemon]:
    extra = ("[[providers]]\n"
             'name = "listed"\n'
             f'base_url = "{fake.base_url}"\n'
             'keys = ["env:FAKE_KEY_A"]\n'
             f'pricing_url = "{server}"\n'
             "pricing_refresh_s = 0.05\n")
    d = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra, clock=FakeClock())
    try:
        yield d
    finally:
        d.stop()


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def listings(daemon: InProcessDaemon) -> list[PriceListingPublished]:
    events = [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream(STREAM)]
    return [e for e in events if isinstance(e, PriceListingPublished)]


def call(daemon: InProcessDaemon, session: str) -> CallCompleted:
    with daemon.openai(session=session) as client:
        client.chat.completions.create(model="listed/acme/house-7b",
                                       messages=[{"role": "user", "content": "price me"}])
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, CallCompleted)][-1]


def test_a_listing_that_changes_at_every_fetch_is_recorded_a_bounded_number_of_times(
    daemon: InProcessDaemon
) -> None:
    _Listing.make = staticmethod(changing)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        daemon.start()
        wait_for(lambda: _Listing.fetched >= 20, "twenty fetches")
        recorded = listings(daemon)
        # Before the fix: one event per fetch (each one the whole listing).
        assert len(recorded) == RECORD_BURST
        assert len({e.version for e in recorded}) == RECORD_BURST
        held = [w for w in warnings if "price listing of provider listed changed again" in w]
        assert len(held) == 1  # said once, not at every refresh
        assert f"keeping listing {recorded[-1].version}" in held[0]
        # The prices in effect are the last recorded: a call is priced with them.
        completed = call(daemon, "during")
        assert completed.cost_version == recorded[-1].version
        # Once the window has passed, the listing as it is now is recorded again: at most
        # RECORD_BURST more in the new window.
        assert isinstance(daemon.clock, FakeClock)
        daemon.clock.advance(RECORD_WINDOW_S + 1)
        wait_for(lambda: len(listings(daemon)) > RECORD_BURST, "the next recording")
        seen = _Listing.fetched
        wait_for(lambda: _Listing.fetched >= seen + 10, "ten more fetches")
        assert len(listings(daemon)) == 2 * RECORD_BURST
    finally:
        logger.remove(sink)
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


def test_a_listing_too_big_to_record_is_refused_and_the_prices_kept(
    daemon: InProcessDaemon
) -> None:
    # ~300 KiB of prices once normalised: 2,000 models with 150-character ids.
    big = json.dumps({"data": [
        {"id": f"acme/{'x' * 140}-{i:05d}", "pricing": {"prompt": "0.000001",
                                                        "completion": "0.000002"}}
        for i in range(2_000)]}).encode()
    _Listing.make = staticmethod(lambda n: changing(0) if n == 0 else big)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")
    try:
        daemon.start()
        wait_for(lambda: _Listing.fetched >= 5, "five fetches")
        completed = call(daemon, "kept")
    finally:
        logger.remove(sink)
    [kept] = listings(daemon)  # only the first, small listing
    assert [m.model for m in kept.models] == ["acme/house-7b"]
    assert completed.cost_version == kept.version
    assert Decimal(completed.cost or "x") > 0
    reason = f"the listing's prices take more than {MAX_RECORDED_BYTES >> 10} KiB"
    mine = [w for w in warnings if "price listing of provider listed not refreshed" in w]
    assert mine and all(reason in w and f"keeping listing {kept.version}" in w for w in mine)
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
