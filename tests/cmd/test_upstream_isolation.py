"""A client that gives up ends its upstream request, and a hung provider holds no more
than its own share of connections.

Before, a non-streamed call whose client left went on waiting for the upstream (600 s
read timeout), holding one of the pool's connections: enough abandoned calls to a hung
provider and nothing else could be sent there, or (with one shared pool) anywhere. Here
the provider ``slow`` (the same fake upstream, asked to take 8 s) has a pool of two
connections; clients abandon six calls to it, and at once a fast call to it succeeds —
the abandoned calls' connections were closed — as does a call to the healthy provider.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.cmd.daemon_fixtures import MODEL, DaemonMaker, chat_body
from tests.support.fake_provider import FakeProviderServer


def _slow_provider(fake: FakeProviderServer) -> str:
    return ("[[providers]]\n"
            'name = "slow"\n'
            f'base_url = "{fake.base_url}"\n'
            'keys = ["env:FAKE_KEY_A"]\n'
            "max_concurrent_leases = 100\n"
            "max_connections = 2\n"
            "connect_timeout_s = 3\n")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_abandoned_calls_end_their_upstream_requests(
    daemon_factory: DaemonMaker, fake: FakeProviderServer, stream: bool
) -> None:
    daemon = daemon_factory(extra_config=_slow_provider(fake)).start()
    hung = {**chat_body("hang", stream=stream, fake={"delay_ms": 8_000}), "model": "slow/m"}

    def abandon(i: int) -> None:
        with daemon.http(timeout=0.5) as http, pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=hung,
                      headers={"X-Session-Id": f"gone-{i}"})

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(abandon, range(6)))
    started = time.monotonic()
    with daemon.http(timeout=10) as http:
        fast = http.post("/v1/chat/completions", json={**chat_body("fast"), "model": "slow/m"})
        healthy = http.post("/v1/chat/completions", json=chat_body("healthy"))
    assert fast.status_code == 200, fast.text
    assert healthy.status_code == 200 and healthy.json()["model"] == MODEL
    assert time.monotonic() - started < 2.5  # neither waited for a connection

    # Each abandoned call is recorded as such, promptly, not when the upstream answers.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = daemon.query("SELECT outcome FROM view_ledger WHERE session_id LIKE 'gone-%'")
        if len(rows) == 6:
            break
        time.sleep(0.05)
    assert rows == [("client_disconnected",)] * 6
