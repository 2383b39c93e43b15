"""Spend caps attacked like a hostile client would: odd caps, odd parents, odd limits, races.

The promise under attack: bad input gets a clear short error and changes nothing; a
reservation is always settled or released (``reserved`` back to "0" once every call
ended); every call that may have cost money has its ledger row; a cap never overshoots
but by a model writing past the reserved output bound. The `openai` SDK and httpx
against an in-process daemon (``tests/cmd/test_budgets_e2e.py``'s ``priced`` model:
$2 / $8 per million input / output tokens) and the fake upstream.
"""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_budgets_e2e import PRICED
from tests.support.fake_provider import FakeProviderServer


def start(tmp_path: Path, fake: FakeProviderServer, extra: str = "") -> InProcessDaemon:
    return InProcessDaemon(tmp_path / "events.db", fake,
                           extra_config=PRICED.format(extra=extra)).start()


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = start(tmp_path, fake)
    try:
        yield d
    finally:
        d.stop()


def control(daemon: InProcessDaemon) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                        headers={"Authorization": f"Bearer {daemon.token}"}, timeout=10)


def status_of(fn: Any) -> int:
    try:
        fn()
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def test_hostile_cap_bodies_get_a_short_400_and_change_nothing(
    daemon: InProcessDaemon
) -> None:
    with control(daemon) as api:
        bad: list[Any] = [
            {"session_usd": "-1"}, {"session_usd": "-0"}, {"session_usd": "2,50"},
            {"session_usd": "NaN"}, {"session_usd": "Infinity"}, {"session_usd": "-Infinity"},
            {"session_usd": "sNaN"}, {"session_usd": "9" * 5000}, {"session_usd": ""},
            {"session_usd": "1e-1000000"}, {"session_usd": "1e-999999999999"},
            {"session_usd": "0." + "0" * 3000 + "1"}, {"session_usd": "0.00000000001"},
            {"session_usd": {"usd": "1"}}, {"session_usd": ["1"]}, {"session_usd": 1},
            {"session_usd": True}, {"session_usd": "1", "extra": 1}, {}, "1", None,
        ]
        for body in bad:
            began = time.monotonic()
            reply = api.put("/v1/sessions/victim/budget", json=body)
            assert reply.status_code == 400, body
            assert time.monotonic() - began < 2, body
            error = reply.json()["error"]
            assert len(error["message"]) < 400 and "Traceback" not in reply.text, body
        huge = api.put("/v1/sessions/victim/budget", content=b'{"session_usd": "' + b"1" * (
            1 << 20) + b'"}')
        assert huge.status_code == 413
        assert api.put("/v1/sessions/victim/budget", content=b"\xff\xfe").status_code == 400
        # Nothing of that changed the cap: the configured one stands.
        assert api.get("/v1/sessions/victim/budget").json()["cap"] == "0.015"
        good = {"1e3": "1000", " 2.5 ": "2.5", "0.0000000001": "0.0000000001",
                "2.50": "2.5"}
        for text, shown in good.items():
            reply = api.put("/v1/sessions/victim/budget", json={"session_usd": text},
                            headers={"content-type": "text/plain"})
            assert reply.status_code == 200, text
            assert reply.json()["cap"] == shown
        # Duplicate keys: the last one wins, as in every JSON decoder of ours.
        reply = api.put("/v1/sessions/victim/budget",
                        content=b'{"session_usd": "1", "session_usd": "3"}')
        assert reply.status_code == 200 and reply.json()["cap"] == "3"
        edge = "a" * 128
        assert api.put(f"/v1/sessions/{edge}/budget",
                       json={"session_usd": "1"}).json()["session_id"] == edge
        assert api.put(f"/v1/sessions/{edge}b/budget",
                       json={"session_usd": "1"}).status_code == 400
        assert api.get("/v1/sessions/a%2Fb/budget").status_code in (400, 404)
