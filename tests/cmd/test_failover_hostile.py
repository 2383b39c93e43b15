"""The failover path against a broken or hostile upstream, through the real daemon.

Each test plays an upstream that misbehaves — in its headers, its error bodies, its
streams, its timing — while calls keep coming, and checks the daemon's promise: every
client call gets one clear answer (never a traceback, never a dropped connection), the
ledger has exactly one row per call, no lease stays taken, and no key reaches a client
or a log. The fake provider (steered per key) plays what HTTP can say;
:class:`RawUpstream` plays what a well-behaved HTTP server would refuse to send (control
characters in a header, a body shorter than its Content-Length, a chunk cut off).
"""

import concurrent.futures
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.config import parse_config
from sessionwarden.events import CODEC, KeyStateChanged
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL, config_text
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import GENUINE, HI, REVOKED, TRANSIENT, Daemons


def http(daemon: InProcessDaemon, session: str = "s") -> httpx.Client:
    """A raw client on the daemon: it shows the bytes an SDK would parse away."""
    return httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=20,
                        headers={"authorization": f"Bearer {daemon.token}",
                                 "x-session-id": session})


def post(daemon: InProcessDaemon, session: str = "s", **extra: Any) -> httpx.Response:
    with http(daemon, session) as client:
        return client.post("/v1/chat/completions",
                           json={"model": MODEL, "messages": HI, **extra})


def ledger(daemon: InProcessDaemon) -> dict[str, tuple[str, int]]:
    """``{call_id: (outcome, status)}`` of every row of the ledger."""
    return {call_id: (outcome, status) for call_id, outcome, status in daemon.rows(
        "SELECT call_id, outcome, status FROM view_ledger")}


def benches(daemon: InProcessDaemon) -> list[KeyStateChanged]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream("credentials-fake")]
    return [e for e in events if isinstance(e, KeyStateChanged)]


def in_flight(daemon: InProcessDaemon) -> list[int]:
    with http(daemon) as client:
        return [k["in_flight"] for k in client.get("/v1/keys").json()["keys"]]


def clean_error(resp: httpx.Response) -> str:
    """The message of an OpenAI-style JSON error (asserting it is one, and short)."""
    error = resp.json()["error"]
    assert isinstance(error["message"], str) and len(error["message"]) < 400
    assert "Traceback" not in resp.text
    return str(error["message"])


# -- many calls while keys get benched ---------------------------------------------------


def test_twenty_parallel_calls_while_keys_are_benched_mid_flight(daemons: Daemons) -> None:
    daemons.keys = {"FAKE_KEY_A": "sk-test-a-" + "1" * 16, "FAKE_KEY_B": "sk-test-b-" + "2" * 16,
                    "FAKE_KEY_C": "sk-test-c-" + "3" * 16}
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {**GENUINE, "delay_ms": 40})
    daemons.steer("FAKE_KEY_B", {**TRANSIENT, "delay_ms": 20})
    daemons.steer("FAKE_KEY_C", {"delay_ms": 30})

    def one(i: int) -> tuple[int, str, str]:
        with daemon.openai(session=f"s{i % 4}", timeout=20) as client:
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=HI)  # type: ignore[arg-type]
                resp = raw.http_response
            except Exception as exc:  # an SDK error carries the answer it got
                resp = exc.response  # type: ignore[attr-defined]
        return resp.status_code, resp.headers["x-sessionwarden-call-id"], resp.text

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    for status, _, text in answers:
        assert status in (200, 429, 503), text
        if status != 200:
            assert "message" in json.loads(text)["error"]
    # One row per client call, each for the call the client was told about.
    rows = ledger(daemon)
    assert sorted(rows) == sorted(call_id for _, call_id, _ in answers)
    assert in_flight(daemon) == [0, 0, 0]
    # A is out for hours: once benched, nothing more goes to it.
    used = daemons.used()
    assert used.count("FAKE_KEY_C") == sum(1 for s, _, _ in answers if s == 200)
    post(daemon)
    assert daemons.used()[-1] == "FAKE_KEY_C"
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


# -- hostile headers -------------------------------------------------------------------


def test_hostile_retry_after_values_only_cool_the_key_briefly(daemons: Daemons) -> None:
    daemon = daemons.start()
    for value in ("inf", "nan", "-5", "1e309", "9" * 200, "Fri, 31 Dec 9999 23:59:59 GMT",
                  "  ", "1" * 13):
        daemons.steer("FAKE_KEY_A", {"status": 429, "headers": {
            "retry-after": value, "retry-after-ms": value, "x-ratelimit-reset-requests": value,
            "x-ratelimit-remaining-requests": "3"}})
        resp = post(daemon)
        assert resp.status_code == 200, (value, resp.text)  # B answered
        bench = benches(daemon)[-1]
        assert bench.state == "cooling" and bench.until is not None
        rest = datetime.fromisoformat(bench.until) - datetime.fromisoformat(bench.at)
        assert rest.total_seconds() <= 60, value
        daemons.clock.advance(61)
    assert len(ledger(daemon)) == 8


def test_answer_headers_outside_latin1_are_relayed_as_sent(daemons: Daemons) -> None:
    # What the fake sends as "â\x82¬" leaves it as the UTF-8 bytes of "€"; "\xe9" alone
    # is not UTF-8 at all. Both used to be a 500 (and a stream's call went unrecorded).
    daemon = daemons.start()
    for value, sent in (("\u00e2\u0082\u00ac", "€".encode()), ("caf\u00e9", b"caf\xe9")):
        daemons.steer("FAKE_KEY_A", {"headers": {"x-odd": value}})
        plain = post(daemon)
        streamed = post(daemon, stream=True)
        daemons.steer("FAKE_KEY_A", {"status": 400, "headers": {"x-odd": value}})
        failed = post(daemon)
        for resp, status in ((plain, 200), (streamed, 200), (failed, 400)):
            assert resp.status_code == status
            assert dict(resp.headers.raw)[b"x-odd"] == sent
        assert streamed.text.endswith("data: [DONE]\n\n")
    outcomes = sorted(ledger(daemon).values())
    assert outcomes == [("ok", 200)] * 4 + [("upstream_error", 400)] * 2


def test_an_upstream_cannot_forge_the_daemons_own_headers(daemons: Daemons) -> None:
    daemon = daemons.start()
    forged = {"x-sessionwarden-error-class": "forged", "x-sessionwarden-call-id": "forged",
              "x-sessionwarden-anything": "forged"}
    daemons.steer("FAKE_KEY_A", {"status": 400, "headers": forged})
    failed = post(daemon)
    daemons.steer("FAKE_KEY_A", {"headers": forged})
    for resp in (failed, post(daemon), post(daemon, stream=True)):
        assert b"forged" not in b"".join(v for _, v in resp.headers.raw)
    assert failed.headers.get_list("x-sessionwarden-error-class") == ["format_error"]


# -- hostile error bodies ----------------------------------------------------------------


def test_a_huge_error_body_is_read_bounded_and_answered_with_a_short_error(
    daemons: Daemons
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"status": 400, "error_message": "x" * (3 << 20)})
    resp = post(daemon)
    assert resp.status_code == 400 and len(resp.content) < 1000
    assert resp.json()["error"]["code"] == "upstream_error_too_large"
    assert "over 1024 KiB" in clean_error(resp)
    assert resp.headers["x-sessionwarden-error-class"] == "format_error"
    assert list(ledger(daemon).values()) == [("upstream_error", 400)]
    assert post(daemon, stream=True).status_code == 400  # a stream's error too


def test_an_endless_answer_is_not_held_in_memory(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionwarden.cmd.daemon.proxy import relay as proxy

    monkeypatch.setattr(proxy, "MAX_ANSWER_BYTES", 1 << 20)  # 64 MiB would be slow here
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"reply": "x" * (2 << 20)})
    resp = post(daemon)
    assert resp.status_code == 502 and "exceeded 1 MiB" in clean_error(resp)
    assert list(ledger(daemon).values()) == [("truncated", 200)]
    assert in_flight(daemon) == [0, 0]


def test_a_429_whose_body_cannot_be_decoded_still_fails_over(daemons: Daemons) -> None:
    # Content-Encoding: gzip on a plain body: the status and headers came whole.
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {**GENUINE, "headers": {
        **GENUINE["headers"], "content-encoding": "gzip"}})  # type: ignore[dict-item]
    resp = post(daemon)
    assert resp.status_code == 200
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    assert [(b.state, b.reason) for b in benches(daemon)] == [("exhausted", "genuine_limit")]


# -- a 200 stream that is an error -------------------------------------------------------


def test_a_stream_that_opens_with_an_error_event_fails_over(daemons: Daemons) -> None:
    # OpenRouter's way: keep-alive comments, then the error as the first data event.
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"stream_error_at": 0, "error_message": "Rate limit exceeded",
                                 "error_code": "rate_limit_exceeded", "stream_comments": 2})
    resp = post(daemon, stream=True)
    assert resp.status_code == 200 and resp.text.endswith("data: [DONE]\n\n")
    assert "error" not in resp.text and "PROCESSING" not in resp.text
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    [done] = ledger(daemon).values()
    assert done == ("ok", 200)
    assert [(b.state, b.reason) for b in benches(daemon)] == [("cooling", "transient_limit")]


def test_a_stream_that_errors_after_bytes_went_out_is_recorded_not_failed_over(
    daemons: Daemons
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"stream_error_at": 2, "error_message": "Rate limit exceeded",
                                 "error_code": "rate_limit_exceeded"})
    resp = post(daemon, stream=True)
    assert resp.status_code == 200 and '"content": "ok' in resp.text
    assert resp.text.endswith('"code":"stream_truncated"}}\n\n')  # not taken for whole
    assert daemons.used() == ["FAKE_KEY_A"]
    assert list(ledger(daemon).values()) == [("truncated", 200)]


def test_a_stream_that_breaks_before_its_first_event_is_sent_again(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"break_after_chunks": 0, "fail_first": 1})
    resp = post(daemon, stream=True)
    assert resp.status_code == 200 and resp.text.endswith("data: [DONE]\n\n")
    assert "error" not in resp.text
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_A"]  # a break is not the key's
    assert list(ledger(daemon).values()) == [("ok", 200)]


def test_keep_alive_comments_are_held_only_so_long(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow model behind comments: they reach the client once the patience is out.
    from sessionwarden.upstream import client as upstream_client

    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"stream_comments": 3, "chunk_delay_ms": 60})
    monkeypatch.setattr(upstream_client, "FIRST_EVENT_PATIENCE_S", 0.03)
    with http(daemon) as client, client.stream("POST", "/v1/chat/completions", json={
            "model": MODEL, "messages": HI, "stream": True}) as resp:
        raw = resp.iter_raw()
        first = next(raw)
        rest = b"".join(raw)
    assert first.startswith(b": PROCESSING\n\n") and b"data:" not in first
    assert rest.endswith(b"data: [DONE]\n\n")


def test_a_client_that_leaves_while_the_first_event_is_awaited_is_recorded_at_once(
    daemons: Daemons
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"stream_comments": 1, "chunk_delay_ms": 3000})
    with pytest.raises(httpx.ReadTimeout), http(daemon) as client:
        client.post("/v1/chat/completions", timeout=0.3,
                    json={"model": MODEL, "messages": HI, "stream": True})
    deadline = time.monotonic() + 2
    while not ledger(daemon):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert list(ledger(daemon).values()) == [("client_disconnected", 200)]
    assert in_flight(daemon) == [0, 0]


# -- keys that cannot serve --------------------------------------------------------------


def test_every_key_dead_refuses_at_once_naming_the_provider(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", REVOKED)
    daemons.steer("FAKE_KEY_B", REVOKED)
    assert post(daemon).status_code == 401  # both tried, the last answer relayed
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    for _ in range(5):
        started = time.perf_counter()
        resp = post(daemon)
        assert time.perf_counter() - started < 1.0
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_usable_key"
        assert clean_error(resp).startswith("provider 'fake' cannot take calls now: every "
                                            "key is revoked; none will return")
    assert len(daemons.used()) == 2  # nothing more reached the upstream
    assert len(ledger(daemon)) == 6


def test_a_key_echoed_by_a_failed_attempt_reaches_no_client_and_no_log(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start()
    a, b = daemons.key("FAKE_KEY_A"), daemons.key("FAKE_KEY_B")
    daemons.steer("FAKE_KEY_A", {"status": 429, "echo_key": True, "echo_key_header": True,
                                 "headers": {"x-key": a, "x-auth": f"Bearer {a}"}})
    daemons.steer("FAKE_KEY_B", {"status": 403, "echo_key": True,
                                 "headers": {"x-key": b}, "error_message": f"key {b} is bad"})
    resp = post(daemon)  # A fails over to B, whose 403 is relayed
    streamed = post(daemon, "t", stream=True)  # A benched; B's 403 benches nothing
    seen = [b"".join(k + b": " + v for k, v in r.headers.raw) + r.content
            for r in (resp, streamed)]
    captured = capsys.readouterr()
    seen += [captured.out.encode(), captured.err.encode()]
    assert resp.status_code == streamed.status_code == 403 and fingerprint(b) in resp.text
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_B"]
    assert b"failing over" in seen[-1]  # the log was captured
    for key in (a, b):
        assert not [s for s in seen if key.encode() in s or key[-16:].encode() in s]


# -- the breaker's probe -----------------------------------------------------------------


def half_open_with_a_hanging_probe(daemons: Daemons, delay_ms: int) -> InProcessDaemon:
    """A daemon whose breaker opened (both keys cooling) and half-opens now; the next
    call, its probe, waits ``delay_ms`` at the upstream."""
    daemon = daemons.with_breaker_open()
    daemons.fake.state.by_model[MODEL] = {"delay_ms": delay_ms}
    daemons.clock.advance(3)
    return daemon


def test_a_half_open_probe_that_hangs_frees_its_slot_after_the_probe_timeout(
    daemons: Daemons
) -> None:
    daemon = half_open_with_a_hanging_probe(daemons, 800)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        probe = pool.submit(post, daemon)
        deadline = time.monotonic() + 5
        while len(daemons.used()) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        held = post(daemon)
        assert held.status_code == 429 and "probing" in clean_error(held)
        daemons.clock.advance(31)  # PROBE_TIMEOUT_SECONDS passed: another may probe
        daemons.fake.state.by_model.clear()
        assert post(daemon).status_code == 200
        assert probe.result().status_code == 200
    assert in_flight(daemon) == [0, 0]
    assert len(ledger(daemon)) == 4


def test_a_probe_whose_client_leaves_frees_its_slot_at_once(daemons: Daemons) -> None:
    # Its key came back unanswered: waiting out the probe timeout refused every call of
    # the provider for 30 s with nothing in flight.
    daemon = half_open_with_a_hanging_probe(daemons, 3000)
    with http(daemon) as client, pytest.raises(httpx.ReadTimeout):  # …and its client leaves
        client.post("/v1/chat/completions", json={"model": MODEL, "messages": HI},
                    timeout=0.5)
    daemons.fake.state.by_model.clear()
    deadline = time.monotonic() + 5
    while (answer := post(daemon)).status_code != 200:  # the daemon sees the client go
        assert "probing" in clean_error(answer) and time.monotonic() < deadline
        time.sleep(0.05)
    assert in_flight(daemon) == [0, 0]


# -- what a well-behaved server would not send ------------------------------------------


class RawUpstream:
    """An upstream at the byte level: per key, the raw bytes of its answer, then it hangs up.

    Keys without a scripted answer get a small 200 chat completion.
    """

    def __init__(self) -> None:
        self.answers: dict[str, bytes] = {}
        #: Keys whose answer is followed by silence, the connection open.
        self.hang: set[str] = set()
        self.seen: list[str] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self._answer(conn) in self.hang:
                self._stop.wait(10)  # the connection stays open, silent

    def _answer(self, conn: socket.socket) -> str:
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return ""
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        fields = (line.partition(":") for line in head.decode("latin-1").split("\r\n")[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        while len(body) < int(headers.get("content-length", "0")):
            body += conn.recv(65536)
        key = headers.get("authorization", "").removeprefix("Bearer ")
        self.seen.append(key)
        answer = self.answers.get(key)
        if answer is None:
            ok = (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,'
                  b'"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}],'
                  b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}')
            answer = raw_answer(200, b"content-type: application/json",
                                b"content-length: %d" % len(ok)) + ok
        conn.sendall(answer)
        return key

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def raw_answer(status: int, *headers: bytes) -> bytes:
    """A status line and ``headers`` (the connection closes after the answer)."""
    return (b"HTTP/1.1 %d X\r\n" % status + b"".join(h + b"\r\n" for h in headers)
            + b"connection: close\r\n\r\n")


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[tuple[InProcessDaemon, RawUpstream]]:
    """A daemon (keys A then B, fill_first) in front of a :class:`RawUpstream`."""
    upstream = RawUpstream()
    daemon = InProcessDaemon(tmp_path / "events.db", upstream)  # type: ignore[arg-type]
    daemon.config = parse_config(config_text(upstream.base_url, list(daemon.keys)).replace(
        'strategy = "round_robin"\n', 'strategy = "fill_first"\n'))
    try:
        yield daemon.start(), upstream
    finally:
        daemon.stop()
        upstream.stop()


_JSON = b"content-type: application/json"
#: 429s whose status and headers arrive whole, then the body does not.
_BROKEN_429 = {
    "body shorter than its content-length": raw_answer(
        429, _JSON, b"retry-after: 3", b"content-length: 1000") + b'{"error": {"mess',
    "chunked body cut off": raw_answer(
        429, _JSON, b"transfer-encoding: chunked") + b'40\r\n{"error": {',
    "control characters in retry-after": raw_answer(
        429, _JSON, b"retry-after: 3\x01\x02", b"content-length: 2") + b"{}",
}


@pytest.mark.parametrize("case", list(_BROKEN_429))
def test_a_429_that_breaks_off_still_fails_over(
    raw: tuple[InProcessDaemon, RawUpstream], case: str
) -> None:
    daemon, upstream = raw
    upstream.answers[daemon.keys["FAKE_KEY_A"]] = _BROKEN_429[case]
    resp = post(daemon)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "fine"
    assert upstream.seen == [daemon.keys["FAKE_KEY_A"], daemon.keys["FAKE_KEY_B"]]
    assert list(ledger(daemon).values()) == [("ok", 200)]


def test_a_429_whose_body_never_comes_fails_over_without_waiting_the_read_timeout(
    raw: tuple[InProcessDaemon, RawUpstream], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionwarden.cmd.daemon.proxy import relay as proxy

    monkeypatch.setattr(proxy, "ERROR_BODY_TIMEOUT_S", 0.3)  # 10 s would be slow here
    daemon, upstream = raw
    a = daemon.keys["FAKE_KEY_A"]
    upstream.answers[a] = raw_answer(429, _JSON, b"retry-after: 3",
                                     b"content-length: 100") + b'{"error":'
    upstream.hang.add(a)
    started = time.monotonic()
    resp = post(daemon)
    assert resp.status_code == 200 and time.monotonic() - started < 3
    assert upstream.seen == [a, daemon.keys["FAKE_KEY_B"]]


def test_broken_error_answers_that_cannot_fail_over_get_a_clean_error(
    raw: tuple[InProcessDaemon, RawUpstream]
) -> None:
    daemon, upstream = raw
    a = daemon.keys["FAKE_KEY_A"]
    # A 400 cut short: there is no answer to relay, and no other key would do better.
    upstream.answers[a] = raw_answer(400, _JSON, b"content-length: 1000") + b'{"err'
    cut = post(daemon)
    assert cut.status_code == 502 and "400 answer broke off" in clean_error(cut)
    # A header no server may send on is left out; the answer itself is relayed.
    upstream.answers[a] = raw_answer(400, _JSON, b"x-odd: a\x01b", b"content-length: 2") + b"{}"
    odd = post(daemon)
    assert odd.status_code == 400 and odd.content == b"{}" and "x-odd" not in odd.headers
    # An error body that is not UTF-8 is relayed as it came.
    body = b'{"error": {"message": "\xff\xfe bad"}}'
    upstream.answers[a] = raw_answer(400, _JSON, b"content-length: %d" % len(body)) + body
    assert post(daemon).content == body
    assert sorted(ledger(daemon).values()) == [("truncated", 400)] + [
        ("upstream_error", 400)] * 2
    assert in_flight(daemon) == [0, 0]
