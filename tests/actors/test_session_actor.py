"""SessionActor (actors/session.py): admission, passivation, sharding, durable replies."""

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from sessionwarden.actors.bridge import Call, Ping, ask, ask_blocking
from sessionwarden.actors.ledger import UsageLedgerActor
from sessionwarden.actors.messages import Admit, Responded
from sessionwarden.actors.session import SessionActor, session_shard, session_stream
from sessionwarden.cmd.wiring import default_projections
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    SessionStarted,
    UpstreamResponded,
    UsageRecorded,
)
from sessionwarden.store import EventLog, StreamAppend
from sessionwarden.store.errors import IdempotencyConflict
from sessionwarden.store.schema import connect

from tests.actors.actor_support import no_leaked_actors

STARTED = SessionStarted.type_tag()
ADMITTED = CallAdmitted.type_tag()
RESPONDED = UpstreamResponded.type_tag()
USAGE = UsageRecorded.type_tag()



class Env:
    def __init__(self, path: Path) -> None:
        self.log = EventLog(path, projections=default_projections())
        self.ledger = UsageLedgerActor.start(self.log)

    def session_actor(self, **options: Any) -> "pykka.ActorRef[Any]":
        return SessionActor.start(self.log, ledger=lambda: self.ledger, **options)

    def settle(self, *refs: "pykka.ActorRef[Any]") -> None:
        """Wait until the actors processed their inbox and their appends committed."""
        for _ in range(3):  # completions may queue further appends
            for ref in (*refs, self.ledger):
                ref.ask(Ping(), timeout=5)
            self.log.submit([StreamAppend("test-barrier", ())]).wait(10)

    def types(self, session_id: str) -> list[str]:
        return [e.type for e in self.log.read_stream(session_stream(session_id))]

    def all_types(self) -> Counter[str]:
        return Counter(e.type for e in self.log.read_all())


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with no_leaked_actors(lambda: e.log.close()):
        e = Env(tmp_path / "e.db")
        yield e


def admit(call_id: str, session_id: str) -> Admit:
    call = CallAdmitted(
        call_id=call_id, session_id=session_id, provider="prov", model="model-x",
        message_count=4, estimated_tokens=321, stream=True,
    )
    return Admit(call, client="agent/1.0")


def response(call_id: str, session_id: str) -> UpstreamResponded:
    return UpstreamResponded(
        call_id=call_id, session_id=session_id, status=200, latency_ms=42.0,
        credential="fp:0123456789ab",
    )


def usage(call_id: str, session_id: str, output_tokens: int = 9) -> UsageRecorded:
    return UsageRecorded(
        call_id=call_id, session_id=session_id, provider="prov", model="model-x",
        credential="fp:0123456789ab", status=200, input_tokens=100,
        output_tokens=output_tokens, source="provider",
    )


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


# ------------------------------------------------------------------ admission


def test_admit_starts_a_new_session_then_only_admits(env: Env) -> None:
    ref = env.session_actor()
    assert ask_blocking(ref, admit("c1", "s1")) is None
    env.settle(ref)
    assert env.types("s1") == [STARTED, ADMITTED]
    ref.tell(admit("c2", "s1"))  # the proxy tells, it does not ask
    ask_blocking(ref, admit("c3", "s1"))
    env.settle(ref)
    assert env.types("s1") == [STARTED, ADMITTED, ADMITTED, ADMITTED]

    events = list(env.log.read_stream("session-s1"))
    assert [e.version for e in events] == [1, 2, 3, 4]
    started = CODEC.decode(events[0].type, events[0].data)
    assert started == SessionStarted(session_id="s1", model="prov/model-x", client="agent/1.0")
    first = CODEC.decode(events[1].type, events[1].data)
    assert first == CallAdmitted(
        call_id="c1", session_id="s1", provider="prov", model="model-x",
        message_count=4, estimated_tokens=321, stream=True,
    )
    assert events[0].recorded_at == events[1].recorded_at  # one atomic append
    row = env.log.read_connection().execute(
        "SELECT model, client, calls FROM view_sessions WHERE session_id = 's1'").fetchall()
    assert row == [("model-x", "agent/1.0", 3)]


def test_unknown_message_goes_back_to_the_caller(env: Env) -> None:
    ref = env.session_actor()
    with pytest.raises(TypeError, match="SessionActor cannot handle str"):
        ask_blocking(ref, "hello")
    ask_blocking(ref, admit("c1", "s1"))
    env.settle(ref)
    assert env.types("s1") == [STARTED, ADMITTED]


def test_passivation_keeps_at_most_max_sessions_and_recovers_from_the_view(env: Env) -> None:
    ref = env.session_actor(max_sessions=3)
    proxy = ref.proxy()
    for i in range(10):
        ask_blocking(ref, admit(f"c{i}", f"s{i}"))
        env.settle(ref)
        assert proxy.passivated.get() == max(0, i + 1 - 3)  # so 3 are kept
    # s0 was passivated long ago: it is recovered without a second SessionStarted.
    ask_blocking(ref, admit("c0b", "s0"))
    ask_blocking(ref, admit("c0c", "s0"))
    env.settle(ref)
    assert env.types("s0") == [STARTED, ADMITTED, ADMITTED, ADMITTED]
    assert proxy.passivated.get() == 8
    assert env.all_types()[STARTED] == 10
    calls = env.log.read_connection().execute(
        "SELECT calls FROM view_sessions WHERE session_id = 's0'").fetchall()
    assert calls == [(3,)]


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


# ------------------------------------------------------------------ responses


def test_responded_without_usage_is_appended(env: Env) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    assert ask_blocking(ref, Responded(response("c1", "s1"))) is None
    env.settle(ref)
    assert env.types("s1") == [STARTED, ADMITTED, RESPONDED]
    assert env.all_types()[USAGE] == 0
    row = env.log.read_connection().execute(
        "SELECT last_status, last_credential FROM view_sessions WHERE session_id = 's1'"
    ).fetchall()
    assert row == [(200, "fp:0123456789ab")]


def _snapshot(path: Path) -> dict[str, Any]:
    """What a fresh reader sees in the log right now."""
    conn = connect(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, stream, type, recorded_at FROM events"
            " WHERE stream IN ('session-s1', 'usage-s1') ORDER BY seq").fetchall()
        ledger = conn.execute("SELECT call_id, output_tokens FROM view_ledger").fetchall()
    finally:
        conn.close()
    return {"rows": rows, "ledger": ledger}


def test_responded_with_usage_replies_only_once_both_are_committed_together(
    env: Env,
) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    env.settle(ref)
    at_reply: list[tuple[Any, Any, dict[str, Any]]] = []
    replied = threading.Event()

    def reply(result: Any, error: BaseException | None) -> None:
        at_reply.append((result, error, _snapshot(env.log.path)))  # right at the reply
        replied.set()

    lock = WriteLock(env.log.path)
    try:
        ref.tell(Call(Responded(response("c1", "s1"), usage("c1", "s1")), reply))
        # The commit cannot happen while the lock is held, so neither can the reply.
        assert not replied.wait(0.2)
        assert _snapshot(env.log.path)["ledger"] == []
    finally:
        lock.release()
    assert replied.wait(10)
    [(result, error, seen)] = at_reply
    assert error is None
    assert result.stream == "usage-s1" and not result.duplicate
    assert seen["ledger"] == [("c1", 9)]
    kinds = [(stream, kind) for _, stream, kind, _ in seen["rows"]]
    assert kinds == [
        ("session-s1", STARTED), ("session-s1", ADMITTED),
        ("session-s1", RESPONDED), ("usage-s1", USAGE),
    ]
    (resp_seq, _, _, resp_at), (usage_seq, _, _, usage_at) = seen["rows"][2:]
    assert usage_seq == resp_seq + 1
    assert usage_at == resp_at  # one transaction: one recorded_at
    assert result.first_seq == usage_seq


def test_responded_with_usage_through_asyncio_ask(env: Env) -> None:
    ref = env.session_actor()
    ref.tell(admit("c1", "s1"))

    async def main() -> tuple[Any, dict[str, Any]]:
        result = await ask(ref, Responded(response("c1", "s1"), usage("c1", "s1")))
        return result, _snapshot(env.log.path)

    result, seen = asyncio.run(main())
    assert result.stream == "usage-s1"
    assert seen["ledger"] == [("c1", 9)]
    assert [kind for _, _, kind, _ in seen["rows"]] == [STARTED, ADMITTED, RESPONDED, USAGE]


def test_a_conflicting_usage_record_does_not_kill_the_shard(env: Env) -> None:
    ref = env.session_actor()
    ask_blocking(ref, admit("c1", "s1"))
    ask_blocking(ref, Responded(response("c1", "s1"), usage("c1", "s1")))
    with pytest.raises(IdempotencyConflict):
        ask_blocking(ref, Responded(response("c1", "s1"), usage("c1", "s1", output_tokens=1)))
    time.sleep(0.05)
    assert ref.is_alive()
    ask_blocking(ref, admit("c2", "s1"), timeout=2)
