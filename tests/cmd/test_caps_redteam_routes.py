"""Caps a fallback route and an overlong stream could escape (issue 21, items 5 and 8).

What the red team saw: a call reserved for its own provider's model was sent to its
model's fallback route without a new reservation (10 calls spent 5x the fallback
provider's daily cap; 20 parallel calls 8x a session cap); and a stream that ran past
its ``max_tokens`` while the daemon drained it for usage (the client gone) was charged
4x a session cap. Now the route's worst case is reserved against the route's scopes
before anything is sent there, and refused with the admission's 402 when it does not
fit; a stream is read no further than the output bound reserved for it, and charged no
more than its reservation.

In-process daemons on a fake clock against the fake upstream, which answers whatever
``max_tokens`` says when told to (``reply``, ``usage: custom``).
"""

import secrets
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from sessionwarden.events import CODEC, CallCompleted, CallResent

from tests.cmd.inprocess import InProcessDaemon, nothing_open, start_made
from tests.cmd.key_fixtures import GENUINE
from tests.cmd.test_unreachable_provider import closed_port
from tests.support.fake_provider import FakeProviderServer

PRICE = 'price = { input = "2.00", output = "8.00" }'
HI = [{"role": "user", "content": "hi"}]


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """The fake reports this usage: the call costs 2 * prompt + 8 * completion µ$."""
    return {"usage": "custom", "usage_block": {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion}}


def post(daemon: InProcessDaemon, session: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{daemon.port}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {daemon.token}",
                               "X-Session-Id": session}, timeout=30)


def budget(daemon: InProcessDaemon, session: str) -> dict[str, Any]:
    reply = httpx.get(f"http://127.0.0.1:{daemon.port}/v1/sessions/{session}/budget",
                      headers={"Authorization": f"Bearer {daemon.token}"}, timeout=10)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def spent_by(daemon: InProcessDaemon, provider: str) -> Decimal:
    rows = daemon.rows("SELECT cost FROM view_ledger WHERE provider = ?", (provider,))
    return sum((Decimal(c) for (c,) in rows if c is not None), Decimal(0))


def settled(daemon: InProcessDaemon, session: str) -> None:
    """Wait until the ledger holds nothing in flight for ``session`` (its Settle is a tell)."""
    deadline = time.monotonic() + 10
    while budget(daemon, session)["reserved"] != "0":
        assert time.monotonic() < deadline, budget(daemon, session)
        time.sleep(0.02)


def with_backup_route(made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
                      daily_usd: str) -> InProcessDaemon:
    """A daemon whose model "main" (provider fake) falls back to "pricey" on provider
    "backup" (its own key, a daily cap of ``daily_usd``), with fake's keys run out."""
    extra = f"""
[[providers]]
name = "backup"
base_url = "{fake.base_url}"
keys = ["env:BACKUP_KEY"]
daily_usd = "{daily_usd}"
[[models]]
name = "pricey"
provider = "backup"
context_length = 128000
{PRICE}
[[models]]
name = "main"
provider = "fake"
context_length = 128000
fallback = "pricey"
"""
    daemon = start_made(made, tmp_path, fake, extra,
                        BACKUP_KEY="sk-test-bk-" + secrets.token_hex(8))
    for name in ("FAKE_KEY_A", "FAKE_KEY_B"):  # the main provider's keys run out (2 h)
        fake.state.by_key[daemon.keys[name]] = GENUINE
    return daemon


# -- item 5: the fallback route ---------------------------------------------------------


def test_a_fallback_route_holds_its_provider_s_daily_cap(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = with_backup_route(made, tmp_path, fake, "0.01")
    # Each call may cost 250 output tokens ($0.002) and costs $0.00202: four fit in the
    # backup's $0.01 a day. The first call fails over from key to key, then goes to the
    # route; the later ones find every key benched at their start.
    answers = [post(daemon, "s", {"model": "main", "messages": HI, "max_tokens": 250,
                                  "fake": usage(10, 250)}) for _ in range(10)]
    statuses = [a.status_code for a in answers]
    assert statuses == [200] * 4 + [402] * 6, statuses
    assert spent_by(daemon, "backup") <= Decimal("0.01")
    for answer in answers[4:]:
        error = answer.json()["error"]
        assert error["code"] == "cap_exhausted" and error["type"] == "insufficient_quota"
        message = error["message"]
        assert "daily cap of provider backup for 2026-12-02 (UTC)" in message
        assert "fallback route backup/pricey" in message and "may cost up to" in message
        assert answer.headers["retry-after"]  # the day ends: waiting helps
        assert answer.headers["x-sessionwarden-call-id"]
    sent = [r for r in fake.state.snapshot() if r.headers.get("authorization", "")
            .endswith(daemon.keys["BACKUP_KEY"])]
    assert len(sent) == 4
    # Every refused call is recorded, as its own provider's failure, with the route's
    # refusal said; none was moved to the route.
    recorded = {e.call_id: e for e in events(daemon, "s") if isinstance(e, CallCompleted)}
    moved = {e.call_id for e in events(daemon, "s") if isinstance(e, CallResent)}
    for answer in answers[4:]:
        call_id = answer.headers["x-sessionwarden-call-id"]
        done = recorded[call_id]
        assert done.outcome == "no_credential" and "backup/pricey" in done.error
        assert call_id not in moved
    assert len(recorded) == 10 and len(moved) == 4
    nothing_open(daemon)
    # The daemon keeps serving: once the main provider's keys are back, "main" is its own.
    fake.state.by_key.clear()
    daemon.runtime.clock.advance(3 * 3600)  # type: ignore[attr-defined]
    assert post(daemon, "s", {"model": "main", "messages": HI,
                              "max_tokens": 250}).status_code == 200


def test_a_route_its_call_alone_exceeds_is_refused_after_the_last_key_failed(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = with_backup_route(made, tmp_path, fake, "0.001")
    answer = post(daemon, "s", {"model": "main", "messages": HI, "max_tokens": 250})
    assert answer.status_code == 402
    error = answer.json()["error"]
    assert error["code"] == "request_exceeds_cap" and "retrying cannot help" in error["message"]
    assert "provider fake cannot take this call (no_usable_key)" in error["message"]
    assert "retry-after" not in answer.headers  # waiting cannot help
    assert answer.headers["x-sessionwarden-error-class"]  # the provider's failure
    assert len(fake.state.snapshot()) == 2  # each key once; nothing reached the route
    [done] = [e for e in events(daemon, "s") if isinstance(e, CallCompleted)]
    # The provider's own failure stays recorded: its keys' attempts, its last answer.
    assert (done.outcome, done.status) == ("upstream_error", 429)
    assert len(done.attempts) == 1 and "backup/pricey" in done.error
    assert not [e for e in events(daemon, "s") if isinstance(e, CallResent)]
    nothing_open(daemon)


def test_parallel_calls_on_a_fallback_route_hold_the_session_cap(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    port = closed_port()
    extra = f"""
[budgets]
session_usd = "0.015"
[[providers]]
name = "dead"
base_url = "http://127.0.0.1:{port}/v1"
keys = ["env:DEAD_KEY"]
[[models]]
name = "cheap"
provider = "dead"
context_length = 128000
price = {{ input = "0.01", output = "0.01" }}
fallback = "pricey"
[[models]]
name = "pricey"
provider = "fake"
context_length = 128000
{PRICE}
"""
    daemon = start_made(made, tmp_path, fake, extra, DEAD_KEY="sk-test-dead-" + "7" * 16)
    # "cheap" reserves next to nothing; its unreachable provider sends every call to
    # "pricey", where each may cost $0.002: seven fit in the $0.015 session cap.
    statuses: list[int] = []
    bodies: list[Any] = []
    lock = threading.Lock()

    def one() -> None:
        answer = post(daemon, "swarm", {"model": "cheap", "messages": HI, "max_tokens": 250,
                                        "fake": {**usage(10, 250), "delay_ms": 100}})
        with lock:
            statuses.append(answer.status_code)
            bodies.append(answer.json())

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(statuses) == 20 and set(statuses) <= {200, 402}, statuses
    served = statuses.count(200)
    assert 1 <= served <= 7, statuses
    assert len(fake.state.snapshot()) == served  # a refused call never reached the route
    settled(daemon, "swarm")
    figures = budget(daemon, "swarm")
    assert Decimal(figures["spent"]) <= Decimal("0.015"), figures
    for body in bodies:
        if "error" in body:
            assert body["error"]["code"] == "cap_exhausted"
            message = body["error"]["message"]
            assert "session cap of session swarm" in message and "$0.015" in message
    done = [e for e in events(daemon, "swarm") if isinstance(e, CallCompleted)]
    assert len(done) == 20
    assert sorted(d.outcome for d in done) == ["ok"] * served + ["unreachable"] * (20 - served)
    nothing_open(daemon)


# -- item 8: a stream past its bound ------------------------------------------------------

CAPPED = f"""
[budgets]
session_usd = "0.015"
[[models]]
name = "priced"
provider = "fake"
context_length = 128000
{PRICE}
"""
#: An upstream that ignores max_tokens: 40,000 characters (10,000 tokens) in 400 events,
#: then a usage block that bills 50,000 output tokens ($0.40, 26x the session cap).
OVERRUN = {"reply": "x" * 40_000, "stream_chunks": 400, "chunk_delay_ms": 1,
           **usage(10, 50_000)}
#: The reservation of a call of "hi" with max_tokens 100: ~1 input token at $2 and 100
#: output tokens at $8 a million.
RESERVED = Decimal("0.000802")


def recorded(daemon: InProcessDaemon, session: str, call_id: str) -> CallCompleted:
    deadline = time.monotonic() + 30
    while True:
        for event in events(daemon, session):
            if isinstance(event, CallCompleted) and event.call_id == call_id:
                return event
        assert time.monotonic() < deadline, "the call was never recorded"
        time.sleep(0.05)


def test_a_stream_drained_past_its_bound_is_charged_no_more_than_its_reservation(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    fake.state.by_model["priced"] = OVERRUN
    body = {"model": "priced", "messages": HI, "max_tokens": 100, "stream": True}
    with httpx.stream("POST", f"http://127.0.0.1:{daemon.port}/v1/chat/completions",
                      json=body, headers={"Authorization": f"Bearer {daemon.token}",
                                          "X-Session-Id": "gone"}, timeout=30) as resp:
        assert resp.status_code == 200
        call_id = resp.headers["x-sessionwarden-call-id"]
        next(resp.iter_raw())  # one chunk, then the client leaves
    done = recorded(daemon, "gone", call_id)
    # Recorded truthfully: our estimate (the usage never came), the output at the bound;
    # its input is governance's estimate, a few tokens above the reservation's.
    assert done.outcome == "client_disconnected" and done.output_tokens <= 100
    assert done.source == "estimated" and "usage_missing" in done.flags
    assert "past the 100 output tokens reserved" in done.error
    assert done.cost is not None and Decimal(done.cost) < Decimal("0.001"), done
    settled(daemon, "gone")
    assert Decimal(budget(daemon, "gone")["spent"]) <= RESERVED  # charged no more
    nothing_open(daemon)
    # The daemon keeps serving, the same session too.
    fake.state.by_model.clear()
    assert post(daemon, "gone", {"model": "priced", "messages": HI,
                                 "max_tokens": 100}).status_code == 200


def test_a_connected_stream_past_its_bound_is_cut_there(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    fake.state.by_model["priced"] = OVERRUN
    body = {"model": "priced", "messages": HI, "max_tokens": 100, "stream": True}
    with httpx.stream("POST", f"http://127.0.0.1:{daemon.port}/v1/chat/completions",
                      json=body, headers={"Authorization": f"Bearer {daemon.token}",
                                          "X-Session-Id": "here"}, timeout=30) as resp:
        assert resp.status_code == 200
        call_id = resp.headers["x-sessionwarden-call-id"]
        text = resp.read().decode()
    # The client is told the answer was cut, and why; it never sees [DONE].
    assert "output_bound_exceeded" in text and "[DONE]" not in text
    assert text.count("x") < 2_000  # a few events past the bound at most, not 40,000
    done = recorded(daemon, "here", call_id)
    assert done.outcome == "truncated" and done.output_tokens <= 100
    assert done.cost is not None and Decimal(done.cost) < Decimal("0.001"), done
    settled(daemon, "here")
    assert Decimal(budget(daemon, "here")["spent"]) <= RESERVED
    nothing_open(daemon)


def test_an_honest_stream_that_ends_at_its_limit_is_relayed_whole(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    # 100 tokens of 5 characters, one an event: more than 100 tokens by characters / 4,
    # but an answer that stopped at its max_tokens, as its usage says.
    fake.state.by_model["priced"] = {"reply": "word " * 100, "stream_chunks": 100,
                                     **usage(10, 100)}
    body = {"model": "priced", "messages": HI, "max_tokens": 100, "stream": True}
    with httpx.stream("POST", f"http://127.0.0.1:{daemon.port}/v1/chat/completions",
                      json=body, headers={"Authorization": f"Bearer {daemon.token}",
                                          "X-Session-Id": "honest"}, timeout=30) as resp:
        call_id = resp.headers["x-sessionwarden-call-id"]
        text = resp.read().decode()
    assert text.endswith("data: [DONE]\n\n") and text.count("word") == 100
    done = recorded(daemon, "honest", call_id)
    assert (done.outcome, done.source, done.output_tokens) == ("ok", "provider", 100)
    assert done.cost == "0.00082000"
    nothing_open(daemon)
