"""A call is recorded or refused before it is sent, and never sent and lost.

Each test stops or crashes one of the daemon's actors (in-process: the real runtime and
app, a real log, the openai SDK as client, the fake provider upstream) and checks what the
client gets, what reached the upstream and what the log holds. Before the admission
pipeline, a dead session shard let a call through unrecorded (200), and a dead ledger
actor turned a call that had used its key into a 500 from a raw ``pykka.ActorDeadError``.
"""

import threading
import time
from typing import Any

import openai
import pytest
from sessionwarden.cmd.daemon.proxy import calls
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    IterationCounted,
    SessionStarted,
)

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]
ADMITTED, COMPLETED = CallAdmitted.type_tag(), CallCompleted.type_tag()


def test_a_plain_call_is_two_events_admitted_with_what_was_sent_then_completed(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with inprocess.openai(session="two") as client:
        for _ in range(3):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    # The first call also opens the turn's count (a resend of it is not counted again).
    assert inprocess.types("session-two") == [
        SessionStarted.type_tag(), IterationCounted.type_tag(), ADMITTED, COMPLETED,
        ADMITTED, COMPLETED, ADMITTED, COMPLETED]
    # No lease events, no separate usage stream.
    kinds = {t for (t,) in inprocess.rows("SELECT DISTINCT type FROM events")}
    assert not any("lease" in k or k.startswith("usage.") for k in kinds)
    assert not inprocess.rows("SELECT name FROM streams WHERE name LIKE 'usage-%'")


def test_rate_limits_are_recorded_when_they_change_not_on_every_call(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with inprocess.openai(session="rl") as client:
        for _ in range(8):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
    # The fake counts its buckets down by one per call: each key's first picture is news,
    # the countdown is not.
    observed = inprocess.types("ratelimits-fake")
    assert observed == ["ratelimit.observed.v1"] * 2  # two keys, round robin
    rows = inprocess.rows("SELECT credential, bucket FROM view_ratelimits")
    assert {bucket for _, bucket in rows} == {"requests", "tokens"}
    assert len({cred for cred, _ in rows}) == 2


def test_an_empty_messages_list_is_refused_with_400_and_never_sent(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with inprocess.openai(session="v") as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[])
    assert "'messages' must contain at least one message" in info.value.message
    assert fake.state.snapshot() == []
    assert inprocess.types("session-v") == [SessionStarted.type_tag(), CallRefused.type_tag()]
    assert inprocess.rows("SELECT count(*) FROM view_ledger") == [(0,)]


def test_a_dead_session_shard_refuses_the_call_before_it_is_sent(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    rt = inprocess.runtime
    rt.session_ref("gone").stop()  # stopped for good: the supervisor does not restart it
    with inprocess.openai(session="gone") as client, \
            pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert info.value.status_code == 503
    assert "nothing was sent upstream" in info.value.message
    assert fake.state.snapshot() == []  # never sent ...
    assert inprocess.types("session-gone") == []  # ... so nothing to record
    # Its key goes back once the lease (asked for alongside admission) has arrived,
    # which may be just after the client has its answer.
    deadline = time.monotonic() + 5
    while True:
        snapshot = rt.credentials.proxy().snapshot().get()["fake"]
        if [active for _, active, _ in snapshot] == [0, 0] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert [active for _, active, _ in snapshot] == [0, 0]


def test_a_dead_rate_guard_does_not_lose_the_record(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    inprocess.runtime.rateguard.stop()
    with inprocess.openai(session="rg") as client:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
    call_id = raw.headers["x-sessionwarden-call-id"]
    assert inprocess.rows("SELECT status, outcome FROM view_ledger WHERE call_id = ?",
                          (call_id,)) == [(200, "ok")]


def test_a_dead_credential_pool_is_a_503_recorded_never_sent(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    inprocess.runtime.credentials.stop()
    with inprocess.openai(session="nokey") as client, \
            pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert info.value.status_code == 503
    assert fake.state.snapshot() == []
    assert inprocess.rows("SELECT status, outcome, source FROM view_ledger") == [
        (0, "no_credential", "missing")]


def _slow_call(daemon: InProcessDaemon, session: str, box: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            with daemon.openai(session=session, timeout=60) as client:
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=MESSAGES, extra_body={"fake": {"delay_ms": 600}})
                box["id"] = raw.headers["x-sessionwarden-call-id"]
                box["content"] = raw.parse().choices[0].message.content
        except Exception as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_admitted(daemon: InProcessDaemon, session: str) -> None:
    deadline = time.monotonic() + 10
    while not daemon.rows("SELECT 1 FROM view_calls_open WHERE session_id = ?", (session,)):
        assert time.monotonic() < deadline, "the call was never admitted"
        time.sleep(0.01)


def test_a_session_shard_restarting_mid_call_still_records_it(
    inprocess: InProcessDaemon, fake: FakeProviderServer
) -> None:
    rt = inprocess.runtime
    box: dict[str, Any] = {}
    thread = _slow_call(inprocess, "crashy", box)
    _wait_admitted(inprocess, "crashy")
    name = next(n for n in rt.supervisor.names() if rt.supervisor.ref(n) is rt.session_ref(
        "crashy"))
    rt.session_ref("crashy").tell("not a message")  # the shard fails outside a call
    thread.join(30)
    assert "error" not in box, box
    assert rt.supervisor.restarts[name] == 1
    assert inprocess.rows("SELECT outcome FROM view_ledger WHERE call_id = ?", (box["id"],)
                          ) == [("ok",)]
    assert inprocess.types("session-crashy").count(COMPLETED) == 1


def test_a_record_that_cannot_be_written_is_a_503_and_is_closed_at_the_next_start(
    inprocess: InProcessDaemon, fake: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls, "COMPLETE_DEADLINE_S", 0.3)
    rt = inprocess.runtime
    box: dict[str, Any] = {}
    thread = _slow_call(inprocess, "lost", box)
    _wait_admitted(inprocess, "lost")
    rt.session_ref("lost").stop()  # gone for good while the upstream answers
    thread.join(30)
    error = box.get("error")
    assert isinstance(error, openai.InternalServerError) and error.status_code == 503
    assert "could not record this call" in error.message
    assert len(fake.state.snapshot()) == 1  # it was sent: the admission says so
    assert inprocess.rows("SELECT count(*) FROM view_calls_open") == [(1,)]

    inprocess.stop()
    again = InProcessDaemon(inprocess.db, fake).start()
    try:
        rows = again.rows("SELECT outcome, source, status FROM view_ledger")
        assert rows == [("unknown", "estimated", 0)]
        assert again.rows("SELECT count(*) FROM view_calls_open") == [(0,)]
        assert again.types("session-lost").count(COMPLETED) == 1
    finally:
        again.stop()
