"""SessionActor (actors/session.py): admission, completion, passivation, durable replies."""

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pykka
import pytest
from sessionwarden.actors.bridge import Call, Ping, ask, ask_blocking
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import (
    Abandon,
    AdmissionGranted,
    AdmissionRefused,
    Admit,
    Complete,
    NeedsWork,
    Resume,
)
from sessionwarden.actors.session import SessionActor, session_shard
from sessionwarden.domain.admission.pipeline import (
    Need,
    Pipeline,
    Proceed,
    Refuse,
    StageResult,
    stage,
)
from sessionwarden.domain.admission.validation import validate_request
from sessionwarden.domain.calls import CallOutcome, CallRequest
from sessionwarden.domain.errors import UnknownCall
from sessionwarden.domain.session import SessionState, session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    SessionStarted,
)
from sessionwarden.store import EventLog, StreamAppend
from sessionwarden.store.errors import StoreError
from sessionwarden.store.schema import connect
from sessionwarden.views.wiring import default_projections

from tests.actors.actor_support import call_request, no_leaked_actors

STARTED = SessionStarted.type_tag()
ADMITTED = CallAdmitted.type_tag()
REFUSED = CallRefused.type_tag()
COMPLETED = CallCompleted.type_tag()


class Env:
    def __init__(self, path: Path) -> None:
        self.log = EventLog(path, projections=default_projections())
        self.failures: list[BaseException] = []

    def session_actor(self, **options: Any) -> "pykka.ActorRef[Any]":
        options.setdefault("on_failure", self.failures.append)
        return SessionActor.start(self.log, **options)

    def settle(self, *refs: "pykka.ActorRef[Any]") -> None:
        """Wait until the actors processed their inbox and their appends committed."""
        for _ in range(3):  # completions may queue further appends
            for ref in refs:
                ref.ask(Ping(), timeout=5)
            self.log.submit([StreamAppend("test-barrier", ())]).wait(10)

    def types(self, session_id: str) -> list[str]:
        return [e.type for e in self.log.read_stream(session_stream(session_id))]

    def all_types(self) -> Counter[str]:
        return Counter(e.type for e in self.log.read_all())

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.log.read_connection().execute(sql, args)]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with no_leaked_actors(lambda: e.log.close()):
        e = Env(tmp_path / "e.db")
        yield e


def admit(call_id: str, session_id: str, **kwargs: Any) -> Admit:
    return Admit(call_request(call_id, session_id, **kwargs))


def outcome(call_id: str, session_id: str, **facts: Any) -> CallOutcome:
    facts.setdefault("status", 200)
    facts.setdefault("has_output", True)
    facts.setdefault("usage_block", {"prompt_tokens": 100, "completion_tokens": 9})
    return CallOutcome(call_id=call_id, session_id=session_id, outcome="ok", provider="prov",
                       latency_ms=42.0, credential="fp:0123456789ab", **facts)


class WriteLock:
    """A foreign connection holding SQLite's write lock: commits wait until release."""

    def __init__(self, path: Path) -> None:
        self.conn = connect(path)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.execute("COMMIT")
            self.conn.close()
            self.conn = None  # type: ignore[assignment]


def _seen(path: Path) -> dict[str, Any]:
    """What a fresh reader sees in the log right now."""
    conn = connect(path, readonly=True)
    try:
        types = [r[0] for r in conn.execute("SELECT type FROM events ORDER BY seq")]
        ledger = conn.execute("SELECT call_id, output_tokens FROM view_ledger").fetchall()
    finally:
        conn.close()
    return {"types": types, "ledger": ledger}


def reply_at_commit(env: Env, ref: "pykka.ActorRef[Any]", message: object
                    ) -> tuple[Any, BaseException | None, dict[str, Any]]:
    """Send ``message`` while the write lock is held; return the reply and what a reader
    saw at the very moment it arrived (so: was the append durable before the reply?)."""
    at_reply: list[tuple[Any, BaseException | None, dict[str, Any]]] = []
    replied = threading.Event()

    def reply(result: Any, error: BaseException | None) -> None:
        at_reply.append((result, error, _seen(env.log.path)))
        replied.set()

    lock = WriteLock(env.log.path)
    try:
        ref.tell(Call(message, reply))
        # The commit cannot happen while the lock is held, so neither can the reply.
        assert not replied.wait(0.2)
    finally:
        lock.release()
    assert replied.wait(10)
    return at_reply[0]


# ------------------------------------------------------------------ admission


def test_admission_replies_only_once_the_call_is_durable(env: Env) -> None:
    ref = env.session_actor()
    result, error, seen = reply_at_commit(env, ref, admit("c1", "s1"))
    assert error is None
    assert isinstance(result, AdmissionGranted) and result.request.call_id == "c1"
    assert seen["types"] == [STARTED, ADMITTED]

    events = list(env.log.read_stream("session-s1"))
    assert CODEC.decode(events[0].type, events[0].data) == SessionStarted(
        model="prov/model-x", client="agent/1.0")
    assert CODEC.decode(events[1].type, events[1].data) == CallAdmitted(
        call_id="c1", provider="prov", model="model-x", message_count=4,
        estimated_tokens=321, stream=True)
    assert events[0].recorded_at == events[1].recorded_at  # one atomic append
    assert b"s1" not in events[1].data  # the stream names the session; no payload repeats it


def test_a_started_session_only_admits(env: Env) -> None:
    ref = env.session_actor()
    for i in range(3):
        assert isinstance(ask_blocking(ref, admit(f"c{i}", "s1")), AdmissionGranted)
    assert env.types("s1") == [STARTED, ADMITTED, ADMITTED, ADMITTED]
    assert env.rows("SELECT model, client, calls, refused FROM view_sessions") == [
        ("prov/model-x", "agent/1.0", 3, 0)]
    assert len(env.rows("SELECT * FROM view_calls_open")) == 3


def test_a_refused_call_is_recorded_and_never_admitted(env: Env) -> None:
    ref = env.session_actor()
    result, error, seen = reply_at_commit(env, ref, admit("c1", "s1", messages=0))
    assert error is None
    assert result == AdmissionRefused(400, "'messages' must contain at least one message",
                                      "empty_messages", "invalid_request_error")
    assert seen["types"] == [STARTED, REFUSED]
    refused = list(env.log.read_stream("session-s1"))[1]
    assert CODEC.decode(refused.type, refused.data) == CallRefused(
        call_id="c1", stage="validation", status=400,
        reason="'messages' must contain at least one message", code="empty_messages")
    assert env.rows("SELECT calls, refused FROM view_sessions") == [(0, 1)]
    assert env.rows("SELECT * FROM view_calls_open") == []


def test_unknown_message_goes_back_to_the_caller(env: Env) -> None:
    ref = env.session_actor()
    with pytest.raises(TypeError, match="SessionActor cannot handle str"):
        ask_blocking(ref, "hello")
    ask_blocking(ref, admit("c1", "s1"))
    assert env.types("s1") == [STARTED, ADMITTED]


# ------------------------------------------------------------------ stages that need work


class Summary:
    """The work the test stage needs: a (fake) summary of the conversation."""

    def __init__(self, text: str) -> None:
        self.text = text


@stage("needs-summary")
def needs_summary(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    def resume(result: object) -> StageResult:
        if result == "refuse":
            return Refuse(409, "the summary said no", code="no")
        body = {**request.body, "summary": result}
        return Proceed(request.__class__(**{**{f: getattr(request, f) for f in
                                                request.__struct_fields__}, "body": body}))

    return Need(Summary("summarise"), resume)


def test_a_stage_that_needs_work_is_resumed_with_its_result(env: Env) -> None:
    ref = env.session_actor(pipeline=Pipeline([validate_request, needs_summary]))
    reply = ask_blocking(ref, admit("c1", "s1"))
    assert isinstance(reply, NeedsWork) and isinstance(reply.work, Summary)
    assert env.types("s1") == []  # nothing is recorded while admission waits
    granted = ask_blocking(ref, Resume("s1", "c1", "a short summary"))
    assert isinstance(granted, AdmissionGranted)
    assert granted.request.body["summary"] == "a short summary"
    assert env.types("s1") == [STARTED, ADMITTED]

    assert isinstance(ask_blocking(ref, admit("c2", "s1")), NeedsWork)
    refused = ask_blocking(ref, Resume("s1", "c2", "refuse"))
    assert refused == AdmissionRefused(409, "the summary said no", "no",
                                       "invalid_request_error")
    assert env.types("s1") == [STARTED, ADMITTED, REFUSED]
    assert CODEC.decode(REFUSED, list(env.log.read_stream("session-s1"))[2].data).stage == (
        "needs-summary")


def test_an_abandoned_or_unknown_resumption_is_refused(env: Env) -> None:
    ref = env.session_actor(pipeline=Pipeline([needs_summary]))
    assert isinstance(ask_blocking(ref, admit("c1", "s1")), NeedsWork)
    ref.tell(Abandon("c1"))
    with pytest.raises(UnknownCall):
        ask_blocking(ref, Resume("s1", "c1", "late"))
    with pytest.raises(UnknownCall):
        ask_blocking(ref, Resume("s1", "never", "x"))
    assert env.types("s1") == []


def test_pending_admissions_are_bounded(env: Env) -> None:
    ref = env.session_actor(pipeline=Pipeline([needs_summary]), max_pending=3)
    for i in range(5):
        assert isinstance(ask_blocking(ref, admit(f"c{i}", "s1")), NeedsWork)
    assert ref.proxy().snapshot().get()["pending"] == 3
    with pytest.raises(UnknownCall):  # the oldest were forgotten
        ask_blocking(ref, Resume("s1", "c0", "x"))
    assert isinstance(ask_blocking(ref, Resume("s1", "c4", "x")), AdmissionGranted)


def test_the_proxy_loop_resumes_from_asyncio(env: Env) -> None:
    ref = env.session_actor(pipeline=Pipeline([needs_summary]))

    async def main() -> Any:
        reply = await ask(ref, admit("c1", "s1"))
        while isinstance(reply, NeedsWork):
            await asyncio.sleep(0)  # the work runs on the loop, never blocking an actor
            reply = await ask(ref, Resume("s1", "c1", f"done: {reply.work.text}"))
        return reply

    granted = asyncio.run(main())
    assert granted.request.body["summary"] == "done: summarise"


# ------------------------------------------------------------------ completion


def test_completion_replies_only_once_durable_and_moves_the_call_to_the_ledger(env: Env
                                                                              ) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    result, error, seen = reply_at_commit(env, ref, Complete(outcome("c1", "s1")))
    assert seen["types"] == [STARTED, ADMITTED, COMPLETED]
    assert seen["ledger"] == [("c1", 9)]
    completed = next(e for e in env.log.read_stream("session-s1") if e.type == COMPLETED)
    assert completed.idempotency_key == "done:c1"
    # The reply is the recorded completion (the access log takes its tokens from it).
    assert error is None and result == CODEC.decode(COMPLETED, completed.data)
    assert CODEC.decode(COMPLETED, completed.data) == CallCompleted(
        call_id="c1", status=200, latency_ms=42.0, credential="fp:0123456789ab",
        input_tokens=100, output_tokens=9)
    assert env.rows("SELECT * FROM view_calls_open") == []
    assert env.rows("SELECT provider, model, stream, outcome, cost_status FROM view_ledger"
                    ) == [("prov", "model-x", 1, "ok", "unknown")]
    assert env.rows("SELECT last_status, last_outcome, last_credential FROM view_sessions"
                    ) == [(200, "ok", "fp:0123456789ab")]


def test_missing_usage_is_estimated_from_admission_and_flagged(env: Env) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    ask_blocking(ref, Complete(outcome("c1", "s1", usage_block=None, output_chars=40)))
    event = CODEC.decode(COMPLETED, list(env.log.read_stream("session-s1"))[-1].data)
    assert isinstance(event, CallCompleted)
    assert (event.source, event.input_tokens, event.output_tokens, event.flags) == (
        "estimated", 321, 10, ("usage_missing",))


def test_a_call_completes_once(env: Env) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    ask_blocking(ref, Complete(outcome("c1", "s1")))
    with pytest.raises(UnknownCall):
        ask_blocking(ref, Complete(outcome("c1", "s1")))
    with pytest.raises(UnknownCall):  # never admitted
        ask_blocking(ref, Complete(outcome("c9", "s1")))
    assert env.all_types()[COMPLETED] == 1
    assert ref.is_alive()


def test_a_completion_racing_its_retry_on_a_new_instance_is_stored_once(env: Env) -> None:
    old = env.session_actor()
    ask_blocking(old, admit("c1", "s1"))
    done = outcome("c1", "s1")
    lock = WriteLock(env.log.path)
    try:
        # The first attempt is queued behind the lock; a successor that loads the session
        # now still sees the call open, and records it again.
        old.tell(Complete(done))
        old.ask(Ping(), timeout=5)
        new = env.session_actor()
        replies: list[BaseException | None] = []
        got = threading.Event()
        new.tell(Call(Complete(done), lambda r, e: (replies.append(e), got.set())))
        new.ask(Ping(), timeout=5)
    finally:
        lock.release()
    assert got.wait(10)
    assert replies == [None]
    env.settle(old, new)
    assert env.all_types()[COMPLETED] == 1
    assert len(env.rows("SELECT * FROM view_ledger")) == 1


def test_a_store_failure_stops_the_actor_instead_of_trusting_its_state(env: Env) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    env.log.close()
    with pytest.raises(StoreError):  # the caller learns why (the proxy answers 503)
        ask_blocking(ref, admit("c2", "s1"))
    deadline = time.monotonic() + 5
    while (not env.failures or ref.is_alive()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(env.failures) == 1  # and the actor stopped: its state folded a lost event
    # Asked only once it has stopped: a message told to an actor still stopping is dropped
    # unanswered, and the ask would wait out its whole 10 s timeout to say the same.
    assert not ref.is_alive()
    with pytest.raises(ActorUnavailable):
        ask_blocking(ref, admit("c3", "s1"))


# ------------------------------------------------------------------ passivation


def test_passivation_keeps_at_most_max_sessions_and_recovers_from_the_view(env: Env) -> None:
    ref = env.session_actor(max_sessions=3)
    proxy = ref.proxy()
    for i in range(10):
        ask_blocking(ref, admit(f"c{i}", f"s{i}"))
        env.settle(ref)
        assert proxy.passivated.get() == max(0, i + 1 - 3)  # so 3 are kept
    # s0 was passivated long ago: it is recovered without a second SessionStarted, and
    # with its open call, which it can complete.
    ask_blocking(ref, admit("c0b", "s0"))
    ask_blocking(ref, Complete(outcome("c0", "s0")))
    env.settle(ref)
    assert env.types("s0") == [STARTED, ADMITTED, ADMITTED, COMPLETED]
    assert env.all_types()[STARTED] == 10
    assert env.rows("SELECT calls FROM view_sessions WHERE session_id = 's0'") == [(2,)]


def test_sessions_with_appends_in_flight_are_not_passivated(env: Env) -> None:
    ref = env.session_actor(max_sessions=2)
    lock = WriteLock(env.log.path)
    try:
        for i in range(5):
            ref.tell(admit(f"c{i}", f"s{i}"))
        ref.ask(Ping(), timeout=5)
    finally:
        lock.release()
    env.settle(ref)
    for i in range(5):
        assert env.types(f"s{i}") == [STARTED, ADMITTED], i
    for i in range(5):  # kept or passivated, each is known to be started
        ask_blocking(ref, admit(f"c{i}b", f"s{i}"))
    env.settle(ref)
    for i in range(5):
        assert env.types(f"s{i}") == [STARTED, ADMITTED, ADMITTED], i
    assert ref.proxy().passivated.get() >= 3


def test_a_call_is_never_lost_when_a_new_session_is_evicted_with_appends_in_flight(
    env: Env,
) -> None:
    ref = env.session_actor(max_sessions=1)
    lock = WriteLock(env.log.path)
    try:
        ref.tell(admit("a1", "A"))  # A has an append in flight: it cannot be passivated
        ref.tell(admit("b1", "B"))
        ref.tell(admit("b2", "B"))
        ref.ask(Ping(), timeout=5)
    finally:
        lock.release()
    env.settle(ref)
    assert env.types("A") == [STARTED, ADMITTED]
    assert env.types("B") == [STARTED, ADMITTED, ADMITTED]


def test_a_session_started_by_another_instance_is_not_started_twice(env: Env) -> None:
    first, second = env.session_actor(), env.session_actor()
    lock = WriteLock(env.log.path)
    try:
        first.tell(admit("a", "s1"))
        first.ask(Ping(), timeout=5)
        second.tell(admit("b", "s1"))  # loads s1 before the first start committed
        second.ask(Ping(), timeout=5)
    finally:
        lock.release()
    env.settle(first, second)
    assert env.types("s1") == [STARTED, ADMITTED, ADMITTED]


# ------------------------------------------------------------------ sharding


def test_session_shard_is_stable_and_spreads_sessions() -> None:
    ids = [f"session-{i:05d}" for i in range(4000)]
    shards = [session_shard(s, 8) for s in ids]
    assert all(0 <= s < 8 for s in shards)
    assert shards == [session_shard(s, 8) for s in ids]
    counts = Counter(shards)
    assert len(counts) == 8
    assert min(counts.values()) > 400 and max(counts.values()) < 600  # expected 500
    assert {session_shard(s, 1) for s in ids[:50]} == {0}
    # Stable across processes: it must not depend on Python's per-process hash seed.
    probe = "from sessionwarden.actors.session import session_shard as f; " \
            "print([f(f'session-{i:05d}', 8) for i in range(200)])"
    for seed in ("1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed}, timeout=60,
        ).stdout
        assert out.strip() == str(shards[:200])
