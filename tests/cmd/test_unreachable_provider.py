"""A provider that cannot be reached, or times out, through the daemon (issue 20 §6).

What a new user hit: a provider with nothing listening on its port got two 502s saying
only "unreachable (ClientConnectorError)", then 429 ``keys_benched`` "the breaker is open"
on every call while ``keys list`` said both keys were ``ok``, and the log called the
refused connection a "timeout". Now: each call names the provider and the cause
(``connection refused at HOST:PORT``), a dead host benches no key and opens no breaker
(the next call tries again, so a server that is back serves at once), a real timeout
is called one and does open the breaker, whose 503 says why and until when as ``breaker
list`` does; and every error answer carries the call's id, so ``replay`` finds the call.

In-process daemons on a fake clock; "nothing listening" is a port bound then closed
(or bound and not listening, when the test later serves the fake provider on it).
"""

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn
from sessionwarden.clock import Clock
from sessionwarden.cmd.cli.main import main
from sessionwarden.config import parse_config
from sessionwarden.events import CODEC, BreakerChanged, CallCompleted, CallResent, KeyStateChanged

from tests.cmd.daemon_fixtures import MODEL, config_text
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import HI, Daemons
from tests.support.fake_provider import FakeProviderServer, FakeProviderState, QuickServer, make_app

CALL_ID = "x-sessionwarden-call-id"


def closed_port() -> int:
    """A loopback port nothing listens on: bound, its number taken, closed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def dead_daemon(daemons: Daemons, port: int, extra: str = "") -> InProcessDaemon:
    """A daemon on the fake clock whose provider ``fake`` is at 127.0.0.1:``port``."""
    daemon = InProcessDaemon(daemons.tmp_path / "events.db", daemons.fake, clock=daemons.clock)
    daemon.config = parse_config(config_text(f"http://127.0.0.1:{port}/v1", list(daemon.keys),
                                             extra=extra))
    daemons.made.append(daemon)
    return daemon.start()


def failed(daemon: InProcessDaemon, session: str = "s", model: str = MODEL) -> Any:
    """The daemon's error answer to one call (the SDK's exception)."""
    with daemon.openai(session=session) as client, \
            pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=HI)  # type: ignore[arg-type]
    return caught.value


def cli(capsys: pytest.CaptureFixture[str], clock: Clock, *argv: str) -> tuple[int, str]:
    code = main(list(argv), clock=clock)
    out, _ = capsys.readouterr()
    return code, out


def session_events(daemon: InProcessDaemon, session: str = "s") -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def health_events(daemon: InProcessDaemon) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for stream in ("credentials-fake", "ratelimits-fake")
            for e in daemon.runtime.log.read_stream(stream)]


def test_a_refused_connection_names_the_provider_and_benches_nothing(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    daemon = dead_daemon(daemons, port)
    db = str(daemon.db)
    answers = [failed(daemon) for _ in range(2)]  # 6 failed attempts: the old breaker opened
    for answer in answers:
        assert answer.status_code == 502
        body = answer.body
        assert body["code"] == "provider_unreachable" and body["type"] == "upstream_error"
        assert body["message"] == (f"provider fake unreachable: connection refused at "
                                   f"127.0.0.1:{port} (tried 3 times; nothing reached it)")
        headers = answer.response.headers
        assert headers["x-sessionwarden-error-class"] == "unreachable"
        assert headers["retry-after"] == "1"
        assert headers["x-sessionwarden-session-id"] == "s"
        # replay finds the call by the id the client was given
        code, out = cli(capsys, daemons.clock, "replay", "--db", db, "--session", "s",
                        "--call", headers[CALL_ID], "--json")
        assert code == 0 and json.loads(out)["request"]["messages"] == HI
    done = [e for e in session_events(daemon) if isinstance(e, CallCompleted)]
    assert [d.call_id for d in done] == [a.response.headers[CALL_ID] for a in answers]
    for record in done:
        assert (record.outcome, record.error_class) == ("unreachable", "unreachable")
        assert [t.error_class for t in record.attempts] == ["unreachable", "unreachable"]
        assert "timeout" not in record.error and f"127.0.0.1:{port}" in record.error
    # The keys are not at fault for a dead host, and no breaker opened on a "limit".
    assert not [e for e in health_events(daemon)
                if isinstance(e, KeyStateChanged | BreakerChanged)]
    code, out = cli(capsys, daemons.clock, "keys", "list", "--json", "--db", db)
    assert code == 0 and {r["state"] for r in json.loads(out)} == {"ok"}
    code, out = cli(capsys, daemons.clock, "breaker", "list", "--db", db)
    assert (code, out) == (0, "fake: closed\n")
    # Still the same answer, never a fail-fast 429, and the daemon keeps serving.
    assert failed(daemon).status_code == 502
    assert main(["replay", "--verify", "--db", db]) == 0


class LateProvider:
    """The fake provider on a port bound but not yet listening (connections refused)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.state = FakeProviderState()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def serve(self) -> None:
        """Start listening and answering, as a provider whose server came back."""
        self.server = QuickServer(uvicorn.Config(
            make_app(self.state), log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "late provider"
            time.sleep(0.01)

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)
        self.sock.close()


@pytest.fixture
def late() -> Iterator[LateProvider]:
    provider = LateProvider()
    try:
        yield provider
    finally:
        provider.stop()


def test_a_provider_back_on_its_port_serves_the_next_call_at_once(
    daemons: Daemons, late: LateProvider
) -> None:
    daemon = dead_daemon(daemons, late.port)
    for _ in range(2):
        assert failed(daemon).status_code == 502
    late.serve()  # the user starts their server; no time passes on the daemon's clock
    with daemon.openai(session="s") as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=HI)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200 and raw.parse().choices
    assert len(late.state.snapshot()) == 1


def test_a_real_timeout_is_called_one_and_the_breaker_says_why_and_until_when(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start(provider_extra="read_timeout_s = 0.3\n")
    db = str(daemon.db)
    daemons.fake.state.by_model[MODEL] = {"delay_ms": 1500}
    for _ in range(2):  # 3 attempts each: 6 timeouts within a minute open the breaker
        answer = failed(daemon)
        assert answer.status_code == 504 and answer.body["code"] == "provider_timeout"
        assert answer.body["message"] == ("provider fake timed out: no bytes from it for "
                                          "0.3 s (read_timeout_s) (tried 3 times)")
        assert answer.response.headers["x-sessionwarden-error-class"] == "timeout"
        assert answer.response.headers[CALL_ID]
    code, out = cli(capsys, daemons.clock, "breaker", "list", "--json", "--db", db)
    assert code == 0
    [row] = json.loads(out)
    assert (row["state"], row["reason"]) == ("open", "overload")
    sent = len(daemons.used())
    refused = failed(daemon)
    # The keys are fine (keys list says ok): not a 429 naming them, but the breaker,
    # why, and the moment `breaker list` shows.
    # The retries' waits passed on the daemon's clock too: the breaker, opened by the
    # last timeout, returns 30 s after it, so in 30 s less the last wait.
    wait = datetime.fromisoformat(row["until"]) - daemons.clock.now()
    left = math.ceil(wait.total_seconds())
    assert 27 <= left <= 30
    assert refused.status_code == 503 and refused.body["code"] == "provider_overloaded"
    assert refused.body["message"] == (
        "provider 'fake' cannot take calls now: it kept failing (overloaded, 5xx or timing "
        f"out), so its breaker is open (`sessionwarden breaker list`); retry in {left} s, at "
        f"{row['until']} (nothing was sent upstream)")
    assert refused.response.headers["retry-after"] == str(left)
    assert refused.response.headers[CALL_ID]
    assert len(daemons.used()) == sent
    code, out = cli(capsys, daemons.clock, "breaker", "list", "--db", db)
    assert (code, out) == (0, f"fake: open until {row['until']} (overload)\n")
    code, out = cli(capsys, daemons.clock, "keys", "list", "--json", "--db", db)
    assert code == 0 and {r["state"] for r in json.loads(out)} == {"ok"}
    # At `until` one call probes; it is served, and the breaker closes.
    daemons.fake.state.by_model.clear()
    daemons.clock.advance(wait.total_seconds())
    with daemon.openai(session="s") as client:
        assert client.chat.completions.create(
            model=MODEL, messages=HI).choices  # type: ignore[arg-type]
    code, out = cli(capsys, daemons.clock, "breaker", "list", "--db", db)
    assert (code, out) == (0, "fake: closed\n")
    assert main(["replay", "--verify", "--db", db]) == 0


def test_an_unreachable_provider_s_call_goes_to_its_model_s_fallback_route(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    port = closed_port()
    extra = f"""
[[providers]]
name = "dead"
base_url = "http://127.0.0.1:{port}/v1"
keys = ["env:DEAD_KEY"]
[[models]]
name = "main"
provider = "dead"
fallback = "{MODEL}"
"""
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra)
    daemon.keys["DEAD_KEY"] = "sk-test-dead-" + "7" * 16
    daemon.start()
    try:
        with daemon.openai(session="s") as client:
            raw = client.chat.completions.with_raw_response.create(
                model="main", messages=HI)  # type: ignore[arg-type]
        assert raw.http_response.status_code == 200
        assert fake.state.last.body["model"] == MODEL
        events = session_events(daemon)
        [moved] = [e for e in events if isinstance(e, CallResent)]
        assert (moved.provider, moved.model, moved.reason) == ("fake", MODEL, "unreachable")
        [done] = [e for e in events if isinstance(e, CallCompleted)]
        assert done.call_id == raw.http_response.headers[CALL_ID] == moved.call_id
        assert [(t.status, t.error_class) for t in done.attempts] == [(0, "unreachable")] * 3
        assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
    finally:
        daemon.stop()


def test_a_refusal_at_admission_carries_the_call_id_replay_finds(
    tmp_path: Path, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ('[budgets]\nsession_usd = "0.001"\n[[models]]\nname = "priced"\n'
             'provider = "fake"\nprice = { input = "2.00", output = "8.00" }\n')
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra).start()
    try:
        with daemon.openai(session="big") as client, \
                pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="priced", messages=HI,  # type: ignore[arg-type]
                                           max_tokens=2000)
        assert caught.value.status_code == 402
        call_id = caught.value.response.headers[CALL_ID]
        assert caught.value.response.headers["x-sessionwarden-session-id"] == "big"
        # replay knows the id: the call was recorded, refused, with nothing to rebuild
        code = main(["replay", "--db", str(daemon.db), "--session", "big", "--call", call_id])
        _, err = capsys.readouterr()
        assert code == 1 and (f"sessionwarden: call {call_id} of session big has no "
                              "recorded request (refused, or made before requests were "
                              "recorded)\n") in err  # after the daemon's own log lines
        assert fake.state.snapshot() == []
    finally:
        daemon.stop()


def test_breaker_list_says_so_when_no_breaker_is_recorded(
    tmp_path: Path, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = InProcessDaemon(tmp_path / "events.db", fake)
    daemon.config = parse_config("")  # only the keyless simulated provider: no breaker
    daemon.start()
    try:
        with daemon.openai(session="s") as client:
            assert client.chat.completions.create(
                model="sim/chat", messages=HI).choices  # type: ignore[arg-type]
        db = str(daemon.db)
        assert main(["breaker", "list", "--db", db]) == 0
        assert capsys.readouterr().out == "no breakers recorded\n"
        assert main(["breaker", "list", "--json", "--db", db]) == 0
        assert json.loads(capsys.readouterr().out) == []
    finally:
        daemon.stop()
