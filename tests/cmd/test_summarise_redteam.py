"""The model summariser's side call as a hostile upstream and a spend cap see it (issue 21).

Item 6: the side call costs money, so under a cap it is reserved like any call before it
is sent (its worst case: the prompt's estimate and its output bound at the summary
model's price, in the session's scopes), the bound is sent as ``max_tokens``, and the
completion settles it. One that does not fit is not sent: the builtin summary stands in
and SummariserFailed says why. Before, one client call after a compaction spent $1.39
against a $0.01 session cap.

Item 12: the answer is read up to a summary-sized bound, decoded and redacted off the
event loop. Before, a 256 MiB answer was read whole into memory and decoded on the loop
(837 MiB, ``/healthz`` stalled 11-22 s). The summary provider here is a raw socket
server on 127.0.0.1 that counts the bytes it managed to send.

Through the in-process daemon; the daemon keeps serving and ``replay --verify`` stays ok.
"""

import socket
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.context.summariser import answer_max_bytes
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    ContextCompressed,
    SummariserFailed,
)

from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import agent_session, check_forwarded, upstream
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

SUMMARY = "## Goal\n- fix the failing test suite"

# "small" is cheap (a client call's worst case is ~$0.0002); "sum-model" costs $10 / $40
# a million tokens and states no output limit: its worst case is ~$0.1 of prompt plus
# 32,768 tokens of output (~$1.31).
PRICED = """
[compression]
summariser = "model"
summary_model = "{summary}"
on_summary_failure = "{on_failure}"
prepare_ahead = false
[[models]]
name = "small"
provider = "fake"
context_length = 16000
max_output_tokens = 1000
price = {{ input = "0.01", output = "0.01" }}
[[models]]
name = "sum-model"
provider = "fake"
context_length = 128000
price = {{ input = "10", output = "40" }}
"""


def make(tmp_path: Path, fake: FakeProviderServer, *, cap: str = "",
         summary: str = "sum-model", on_failure: str = "fallback", extra: str = ""
         ) -> InProcessDaemon:
    config = PRICED.format(summary=summary, on_failure=on_failure) + extra
    if cap:
        config = f'[budgets]\nsession_usd = "{cap}"\n' + config
    return InProcessDaemon(tmp_path / "events.db", fake, extra_config=config,
                           clock=FakeClock())


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(r.type, r.data)
            for r in daemon.runtime.log.read_stream(session_stream(session))]


def run_until_compressed(daemon: InProcessDaemon, session: str) -> list[list[dict[str, Any]]]:
    """Play the agent session until its first compression; the histories sent."""
    assert isinstance(daemon.clock, FakeClock)
    sent = []
    with daemon.openai(session=session) as client:
        for messages in agent_session(40):
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            daemon.clock.advance(90)
            sent.append(messages)
            if [e for e in events(daemon, session)
                    if isinstance(e, ContextCompressed | SummariserFailed)]:
                break
    return sent


def budget(daemon: InProcessDaemon, session: str) -> dict[str, Any]:
    answer = httpx.get(f"http://127.0.0.1:{daemon.port}/v1/sessions/{session}/budget",
                       headers={"Authorization": f"Bearer {daemon.token}"})
    assert answer.status_code == 200
    return dict(answer.json())


def expensive_usage() -> dict[str, Any]:
    """The summary's answer bills 30,000 output tokens: $1.20 at sum-model's price."""
    return {"reply": SUMMARY, "usage": "custom", "usage_block": {
        "prompt_tokens": 1000, "completion_tokens": 30_000, "total_tokens": 31_000}}


# ------------------------------------------------------------------------ item 6


def test_a_summary_over_the_session_cap_is_not_sent_and_the_builtin_stands_in(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    # "abort" is configured: a cap is no model failure, the builtin summary stands in.
    daemon = make(tmp_path, fake, cap="0.05", on_failure="abort").start()
    try:
        fake.state.by_model["sum-model"] = expensive_usage()
        histories = run_until_compressed(daemon, "capped")
        # Nothing went to the summary model: its worst case (~$1.4) cannot fit $0.05.
        assert [r for r in upstream(fake) if r.body["model"] == "sum-model"] == []
        [failed] = [e for e in events(daemon, "capped") if isinstance(e, SummariserFailed)]
        assert failed.reason.startswith("spend cap (request_exceeds_cap): ")
        assert "session cap of session capped ($0.05)" in failed.reason
        assert (failed.action, failed.cooldown_s) == ("fallback", 0.0)
        [compressed] = [e for e in events(daemon, "capped")
                        if isinstance(e, ContextCompressed)]
        assert compressed.summariser == "builtin-fallback" and compressed.summarised > 0
        assert not [e for e in events(daemon, "capped")
                    if isinstance(e, CallAdmitted) and e.purpose]  # no side call at all
        sent = upstream(fake)[-1].body["messages"]
        check_forwarded(sent)
        assert sent[-1] == histories[-1][-1]
        figures = budget(daemon, "capped")
        assert Decimal(figures["spent"]) <= Decimal("0.05")
        assert Decimal(figures["reserved"]) == 0
        # The daemon keeps serving the session.
        with daemon.openai(session="capped") as client:
            client.chat.completions.create(model="small", messages=histories[-1])  # type: ignore[arg-type]
    finally:
        daemon.stop()
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


def test_a_summary_that_fits_is_reserved_before_it_is_sent_and_settled(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = make(tmp_path, fake, cap="5").start()
    seen: list[Decimal] = []
    stop = threading.Event()

    def watch() -> None:  # what the session holds while its calls are in flight
        while not stop.is_set():
            seen.append(Decimal(budget(daemon, "fits")["reserved"]))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        fake.state.by_model["sum-model"] = {**expensive_usage(), "delay_ms": 1500}
        watcher.start()
        run_until_compressed(daemon, "fits")
        stop.set()
        watcher.join(5)
        [summary_call] = [r for r in upstream(fake) if r.body["model"] == "sum-model"]
        # The output bound reserved is the bound sent: the upstream bills no more.
        assert summary_call.body["max_tokens"] == 32_768
        # While the summary was in flight its worst case (~$1.4) was held.
        assert max(seen) > Decimal("1.3")
        [(side, completed)] = [
            (e, c) for e in events(daemon, "fits") if isinstance(e, CallAdmitted) and e.purpose
            for c in events(daemon, "fits")
            if isinstance(c, CallCompleted) and c.call_id == e.call_id]
        assert side.purpose == "summary" and completed.outcome == "ok"
        assert Decimal(completed.cost or "x") == Decimal("1.21")  # 1,000 in, 30,000 out
        # Settled at its actual cost into the session: nothing stays held.
        costs = [Decimal(e.cost) for e in events(daemon, "fits")
                 if isinstance(e, CallCompleted) and e.cost is not None]
        figures = budget(daemon, "fits")
        assert Decimal(figures["reserved"]) == 0
        assert Decimal(figures["spent"]) == sum(costs)
        [compressed] = [e for e in events(daemon, "fits") if isinstance(e, ContextCompressed)]
        assert compressed.summariser == "model"
    finally:
        stop.set()
        daemon.stop()
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


# ------------------------------------------------------------------------ item 12


class HugeAnswer:
    """A provider answering every request 200 with a JSON body of ``total`` bytes.

    No Content-Length, ``Connection: close``: the body ends when the server closes, so
    only the reader decides how much is read. ``sent`` counts the bytes the kernel took.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0
        self.requests = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
            head = b""
            while b"\r\n\r\n" not in head:
                more = conn.recv(65536)
                if not more:
                    return
                head += more
            header, _, body = head.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests += 1
            opening = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                       b'Connection: close\r\n\r\n'
                       b'{"choices":[{"message":{"role":"assistant","content":"')
            chunk = b"A" * (1 << 20)
            try:
                conn.sendall(opening)
                while self.sent < self.total:
                    conn.sendall(chunk)
                    self.sent += len(chunk)
                conn.sendall(b'"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}')
            except OSError:
                return  # the reader hung up: what it took is counted

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def huge() -> Iterator[HugeAnswer]:
    server = HugeAnswer(96 << 20)
    try:
        yield server
    finally:
        server.close()


def test_a_huge_summary_answer_is_read_no_further_than_its_bound(
    tmp_path: Path, fake: FakeProviderServer, huge: HugeAnswer
) -> None:
    extra = (f'[[providers]]\nname = "huge"\nbase_url = "http://127.0.0.1:{huge.port}/v1"\n'
             'keys = ["env:FAKE_KEY_A"]\n')
    daemon = make(tmp_path, fake, summary="huge/sum-model", extra=extra).start()
    probes: list[float] = []
    stop = threading.Event()

    def probe() -> None:  # /healthz, answered by the event loop, all along
        with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}") as client:
            while not stop.is_set():
                started = time.monotonic()
                assert client.get("/healthz", timeout=60).status_code == 200
                probes.append(time.monotonic() - started)
                time.sleep(0.01)

    prober = threading.Thread(target=probe, daemon=True)
    try:
        prober.start()
        histories = run_until_compressed(daemon, "huge")
        stop.set()
        prober.join(60)
        assert huge.requests == 1
        # The kernel's buffers take a few MiB past what was read; not the 96 MiB sent.
        assert huge.sent < 16 << 20
        bound = answer_max_bytes(40_000)
        [failed] = [e for e in events(daemon, "huge") if isinstance(e, SummariserFailed)]
        assert failed.reason.startswith("answer over ") and failed.action == "fallback"
        [compressed] = [e for e in events(daemon, "huge") if isinstance(e, ContextCompressed)]
        assert compressed.summariser == "builtin-fallback"
        # The side call answered, so it may have billed: recorded, with an estimate.
        [side] = [e for e in events(daemon, "huge") if isinstance(e, CallAdmitted) and e.purpose]
        [completed] = [e for e in events(daemon, "huge")
                       if isinstance(e, CallCompleted) and e.call_id == side.call_id]
        assert completed.outcome == "ok" and "not read further" in completed.error
        assert 0 < completed.output_tokens <= bound // 4 + 1
        # The loop kept answering: no probe waited anywhere near the seconds it took.
        assert probes and max(probes) < 2.0
        sent = upstream(fake)[-1].body["messages"]
        check_forwarded(sent)
        assert sent[-1] == histories[-1][-1]
    finally:
        stop.set()
        daemon.stop()
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
