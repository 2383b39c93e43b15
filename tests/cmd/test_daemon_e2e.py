"""End to end: the daemon as a subprocess, the openai SDK as client, the fake as upstream.

One daemon serves the module's tests that only read their own calls back (by call id or
session) and leave every key healthy; the fake's record of requests is cleared for each.
A test that benches a key, stops the daemon or counts the whole log has its own: ``fresh``.
"""

import itertools
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import (
    MODEL,
    Daemon,
    DaemonFactory,
    chat_body,
    module_daemon,
    still_running,
)
from tests.support.fake_provider import FakeProviderServer

MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse and exact."},
    {"role": "user", "content": "Hello there, please summarise the plan."},
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, FakeProviderServer]]:
    """The module's fake upstream and daemon, stopped (SIGTERM, else SIGKILL) at the end."""
    with module_daemon(tmp_path_factory.mktemp("e2e")) as found:
        yield found


@pytest.fixture
def fake(shared: tuple[Daemon, FakeProviderServer]) -> FakeProviderServer:
    """The shared fake, with its record of requests cleared for this test."""
    shared[1].state.clear()
    return shared[1]


@pytest.fixture
def daemon(shared: tuple[Daemon, FakeProviderServer], fake: FakeProviderServer) -> Daemon:
    """The shared daemon, still running."""
    return still_running(shared)


@pytest.fixture
def fresh(daemon_factory: DaemonFactory) -> Daemon:
    """A daemon of this test's own on a fresh database (against the shared fake)."""
    return daemon_factory().start()


def _session_rows(daemon: Daemon, session: str) -> list[str]:
    """The ledger's call ids of ``session``."""
    return [c for c, row in daemon.ledger().items() if row["session_id"] == session]


def _usage_of(daemon: Daemon, call_id: str) -> dict[str, Any]:
    """The single completion of ``call_id``."""
    found = [e for e in daemon.completions() if e["call_id"] == call_id]
    assert len(found) == 1, found
    return found[0]


def _wait_for_row(daemon: Daemon, call_id: str, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = daemon.ledger().get(call_id)
        if row is not None:
            return row
        time.sleep(0.1)
    return None


def test_plain_call_returns_content_and_usage(daemon: Daemon, fake: FakeProviderServer) -> None:
    with daemon.openai(session="plain-1") as client:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
        resp = raw.parse()
    call_id = raw.headers["x-sessionwarden-call-id"]
    assert resp.choices[0].message.content == "ok: Hello there, please summarise the plan."[:44]
    assert resp.usage is not None
    cached = resp.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens

    sent = fake.state.last
    assert sent.body["messages"] == MESSAGES
    assert sent.headers["authorization"] in {f"Bearer {k}" for k in daemon.keys.values()}
    assert "x-session-id" not in sent.headers

    usage = _usage_of(daemon, call_id)
    assert usage["session_id"] == "plain-1"
    assert usage["status"] == 200
    assert usage["source"] == "provider"
    assert usage["input_tokens"] + usage["cache_read_tokens"] == resp.usage.prompt_tokens
    assert usage["cache_read_tokens"] == cached
    assert usage["output_tokens"] == resp.usage.completion_tokens
    assert usage["stream"] is False and usage["outcome"] == "ok"
    row = daemon.ledger()[call_id]
    assert (row["status"], row["source"], row["output_tokens"]) == (
        200, "provider", resp.usage.completion_tokens)


@pytest.mark.parametrize("include_usage", [False, True])
def test_streaming_relays_chunks_and_hides_injected_usage(
    daemon: Daemon, fake: FakeProviderServer, include_usage: bool
) -> None:
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    with daemon.openai(session="stream-1") as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, stream=True,
            extra_body={"fake": {"stream_chunks": 4}}, **extra,
        )
        call_id = raw.headers["x-sessionwarden-call-id"]
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "ok: Hello there, please summarise the plan."[:44]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 4
    with_usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert len(with_usage) == 1
        assert with_usage[0].choices == [] and chunks[-1] is with_usage[0]
        reported = with_usage[0].usage
    else:
        assert with_usage == []
        reported = None

    # The upstream was asked for usage either way.
    sent = fake.state.last
    assert sent.body["stream"] is True
    assert sent.body["stream_options"]["include_usage"] is True

    usage = _usage_of(daemon, call_id)
    assert usage["source"] == "provider"
    assert usage["stream"] is True and usage["outcome"] == "ok"
    assert usage["output_tokens"] > 0
    if reported is not None:
        assert usage["output_tokens"] == reported.completion_tokens
        assert usage["input_tokens"] + usage["cache_read_tokens"] == reported.prompt_tokens


def test_stream_options_other_fields_kept(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": False, "x_extra": 7})
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    assert "data: [DONE]" in resp.text
    assert '"usage": {' not in resp.text  # the client said no
    assert fake.state.last.body["stream_options"] == {"include_usage": True, "x_extra": 7}


@pytest.mark.parametrize("stream", [False, True])
def test_missing_provider_usage_is_estimated(
    daemon: Daemon, fake: FakeProviderServer, stream: bool
) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions",
                         json=chat_body("x" * 40, stream=stream, fake={"usage": "missing"}))
    assert resp.status_code == 200
    call_id = resp.headers["x-sessionwarden-call-id"]
    usage = _usage_of(daemon, call_id)
    assert usage["source"] == "estimated"
    # The estimate counts what the model reads: the message (40 characters of prose:
    # 9 tokens, plus 4 for its framing) and the request's other fields as JSON.
    assert 13 < usage["input_tokens"] < 60
    assert usage["output_tokens"] > 0
    assert "usage_missing" in usage["flags"]
    assert daemon.ledger()[call_id]["source"] == "estimated"


def test_every_call_has_exactly_one_usage_record(fresh: Daemon) -> None:
    daemon = fresh  # its 429 benches both keys, and it counts the whole log
    ids = []
    with daemon.http() as http:
        for i, extra in enumerate([{}, {"stream": True}, {"fake": {"status": 500}},
                                   {"fake": {"status": 429}}, {"fake": {"usage": "missing"}}]):
            resp = http.post("/v1/chat/completions", json=chat_body(f"call {i}", **extra),
                             headers={"X-Session-Id": "count-1"})
            resp.read()
            ids.append(resp.headers["x-sessionwarden-call-id"])
    events = daemon.completions()
    assert sorted(e["call_id"] for e in events) == sorted(ids)
    assert set(daemon.ledger()) == set(ids)


def test_round_robin_alternates_keys(daemon: Daemon, fake: FakeProviderServer) -> None:
    ids = []
    with daemon.openai(session="rr") as client:
        for _ in range(6):
            raw = client.chat.completions.with_raw_response.create(model=MODEL,
                                                                     messages=MESSAGES)
            ids.append(raw.headers["x-sessionwarden-call-id"])
    seen = [r.headers["authorization"] for r in fake.state.snapshot()]
    assert len(seen) == 6
    expected = {f"Bearer {k}" for k in daemon.keys.values()}
    assert set(seen) == expected
    assert all(a != b for a, b in itertools.pairwise(seen)), seen
    # The ledger names the key (by fingerprint) that served each call, never the key.
    by_call = {e["call_id"]: e["credential"] for e in daemon.completions()}
    served = [by_call[i] for i in ids]
    fps = {fingerprint(s.removeprefix("Bearer ")) for s in seen}
    assert served == [fingerprint(s.removeprefix("Bearer ")) for s in seen]
    assert set(served) == fps


def test_unknown_fields_and_headers_pass_through(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = chat_body(
        temperature=0.25, x_vendor_flag={"nested": [1, 2.5, {"deep": None}], "s": "ü"},
        metadata={"trace": "abc"}, seed=7, logit_bias={"50256": -100},
    )
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=body,
                         headers={"X-Custom-Trace": "trace-123", "X-Session-Id": "pass"})
    assert resp.status_code == 200
    sent = fake.state.last
    assert sent.body == body
    assert sent.headers["x-custom-trace"] == "trace-123"
    assert sent.headers["authorization"] != f"Bearer {daemon.token}"


@pytest.mark.parametrize(("status", "error"), [(429, openai.RateLimitError),
                                                (500, openai.InternalServerError)])
def test_upstream_errors_keep_their_status(
    fresh: Daemon, fake: FakeProviderServer, status: int, error: type[openai.APIStatusError]
) -> None:
    daemon = fresh  # the errors cool (429) or count against (500) the keys
    with daemon.openai() as client, pytest.raises(error) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES,
                                       extra_body={"fake": {"status": status}})
    assert info.value.status_code == status
    assert f"fake provider error {status}" in info.value.message
    call_id = info.value.response.headers["x-sessionwarden-call-id"]
    assert daemon.ledger()[call_id]["status"] == status
    if status == 500:  # still serving
        with daemon.openai() as client:
            assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices
        return
    # The 429 went to both keys (a failover), was relayed, and cooled both keys until
    # the reset the upstream gave (20 s): the next call fails fast, unsent. The relayed
    # Retry-After is when a key is back (issue 21 §3), not the upstream's own "1".
    assert 10 <= int(info.value.response.headers["retry-after"]) <= 20
    sent = len(fake.state.snapshot())
    with daemon.openai() as client, pytest.raises(openai.RateLimitError) as fast:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert fast.value.body["code"] == "keys_benched"  # type: ignore[index]
    assert 1 <= int(fast.value.response.headers["retry-after"]) <= 20
    assert len(fake.state.snapshot()) == sent


def test_models_healthz_and_unknown_model(daemon: Daemon) -> None:
    with daemon.openai() as client:
        models = client.models.list()
        assert MODEL in [m.id for m in models.data]
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert info.value.status_code == 404
    resp = httpx.get(daemon.url("/healthz"))
    assert resp.status_code == 200
    assert resp.json()["ok"] is True


def test_concurrent_calls_overlap(daemon: Daemon, fake: FakeProviderServer) -> None:
    with daemon.openai(session="conc") as client:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)  # warm up

        def call(i: int) -> str:
            resp = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"call {i}"}],
                extra_body={"fake": {"delay_ms": 300}},
            )
            return resp.choices[0].message.content or ""

        with ThreadPoolExecutor(16) as pool:
            started = time.perf_counter()
            results = list(pool.map(call, range(16)))
            elapsed = time.perf_counter() - started
    assert results == [f"ok: call {i}" for i in range(16)]
    assert elapsed < 2.5, f"16 calls of 300 ms took {elapsed:.2f} s"
    assert len(_session_rows(daemon, "conc")) == 17


def test_client_disconnect_mid_stream_still_recorded(daemon: Daemon) -> None:
    body = chat_body("a longer prompt for the stream", stream=True,
                     fake={"stream_chunks": 20, "chunk_delay_ms": 100})
    with daemon.http() as http, http.stream("POST", "/v1/chat/completions", json=body,
                                            headers={"X-Session-Id": "gone"}) as resp:
        assert resp.status_code == 200
        call_id = resp.headers["x-sessionwarden-call-id"]
        next(resp.iter_raw())
    # The stream is closed after one chunk; the daemon drains the upstream for usage.
    row = _wait_for_row(daemon, call_id, timeout=15)
    assert row is not None, daemon.stderr()
    assert row["outcome"] == "client_disconnected"
    assert row["status"] == 200
    assert row["source"] == "provider"
    assert len([e for e in daemon.completions() if e["call_id"] == call_id]) == 1
    with daemon.openai() as client:  # still serving
        assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices


def test_client_disconnect_from_hung_stream_recorded_within_drain_bound(
    daemon_factory: DaemonFactory,
) -> None:
    # The bound is configurable ([daemon] drain_timeout_s, default 30 s); a short one
    # keeps this test fast and proves the daemon honours what it is given.
    daemon = daemon_factory(extra_config="[daemon]\ndrain_timeout_s = 1.0\n").start()
    body = chat_body(stream=True, fake={"hang_after_chunks": 2})
    try:
        with daemon.http() as http, http.stream("POST", "/v1/chat/completions",
                                                json=body) as resp:
            assert resp.status_code == 200
            call_id = resp.headers["x-sessionwarden-call-id"]
            next(resp.iter_raw())
        gone = time.monotonic()
        row = _wait_for_row(daemon, call_id, timeout=10)
        waited = time.monotonic() - gone
        assert row is not None
        assert row["outcome"] == "client_disconnected"
        assert 0.8 <= waited < 6.0, waited  # drained for the bound, not more
    finally:
        daemon.kill()  # a SIGTERM would wait out the 30 s grace for the hung call


def test_sigterm_exits_zero_and_restart_keeps_ledger(
    daemon_factory: DaemonFactory, fake: FakeProviderServer
) -> None:
    first = daemon_factory().start()
    with first.openai(session="restart") as client:
        for i in range(3):
            client.chat.completions.create(model=MODEL, messages=MESSAGES,
                                           extra_body={"fake": {"delay_ms": i}})
        for _chunk in client.chat.completions.create(model=MODEL, messages=MESSAGES,
                                                     stream=True):
            pass
    with first.http() as http:
        # A failed call in the ledger (a 400: relayed at once, where a 500 is retried
        # with real backoff; the retries have tests of their own).
        failed = http.post("/v1/chat/completions", json=chat_body(fake={"status": 400}))
    assert failed.status_code == 400
    derived = failed.headers["x-sessionwarden-session-id"]  # no X-Session-Id: derived
    assert derived.startswith("auto-")
    before = first.ledger()
    assert len(before) == 5
    # The CLI reads while the daemon runs (read-only, never blocking it).
    usage_running = json.loads(first.cli("usage", "--json").stdout)
    requests = [(r["session"], r["requests"]) for r in usage_running]
    assert requests == [("restart", 4), (derived, 1)]
    assert all(r["cost"] is None and r["cost_status"] == "unknown" for r in usage_running)
    status = json.loads(first.cli("status", "--json").stdout)
    assert {s["session_id"] for s in status["sessions"]} == {"restart", derived}

    started = time.monotonic()
    assert first.stop(timeout=10) == 0
    assert time.monotonic() - started < 5
    assert "stopped cleanly" in first.stderr()
    assert "Traceback" not in first.stderr()

    second = daemon_factory(db=first.db, name="again").start()
    assert second.ledger() == before
    assert json.loads(second.cli("usage", "--json").stdout) == usage_running
    second.replay_verify()
    with second.openai() as client:
        assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices
    after = second.ledger()
    assert len(after) == 6 and {k: after[k] for k in before} == before
    assert second.stop() == 0
    second.replay_verify()


def test_sigterm_lets_in_flight_call_finish(fresh: Daemon) -> None:
    daemon = fresh
    result: dict[str, Any] = {}

    def slow() -> None:
        with daemon.http() as http:
            resp = http.post("/v1/chat/completions", json=chat_body(fake={"delay_ms": 800}))
            result["status"] = resp.status_code
            result["call_id"] = resp.headers.get("x-sessionwarden-call-id")

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.3)
    assert daemon.stop(timeout=10) == 0
    thread.join(10)
    assert result.get("status") == 200
    assert result["call_id"] in daemon.ledger()


def test_second_daemon_on_same_db_refused(daemon_factory: DaemonFactory) -> None:
    first = daemon_factory().start()
    second = daemon_factory(db=first.db, name="second")
    started = time.monotonic()
    proc = second.spawn()
    rc = proc.wait(10)
    assert time.monotonic() - started < 5
    assert rc != 0
    err = second.stderr()
    assert "in use" in err
    assert "Traceback" not in err
    with first.openai() as client:
        assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices
    assert len(first.ledger()) == 1
    assert first.stop() == 0


def test_events_cli_lists_the_calls(daemon: Daemon) -> None:
    with daemon.openai(session="cli") as client:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    out = daemon.cli("events", "--json").stdout
    events = [json.loads(line) for line in out.splitlines()]
    mine = [e["type"] for e in events if e["stream"] == "session-cli"]
    assert mine.count("session.call_completed.v4") == 1
    daemon.replay_verify()


def test_replay_verify_and_usage_while_the_daemon_is_busy(daemon: Daemon) -> None:
    """The CLI reads a live log (read-only) and neither blocks nor is fooled by writes."""
    stop = threading.Event()
    done: list[int] = []

    def burst() -> None:
        with daemon.openai(session="busy") as client:
            while not stop.is_set():
                client.chat.completions.create(model=MODEL, messages=MESSAGES)
                done.append(1)

    workers = [threading.Thread(target=burst) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        time.sleep(0.3)
        for _ in range(3):
            report = daemon.replay_verify()  # asserts ok while appends keep landing
            assert report["events"] > 0
            assert json.loads(daemon.cli("usage", "--json").stdout)
        before = len(done)
        time.sleep(0.3)
        assert len(done) > before  # the daemon kept serving throughout
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    assert len(_session_rows(daemon, "busy")) == len(done)
