"""The one-for-one Supervisor (actors/supervisor.py) over real actors and a real log."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from sessionwarden.actors.bridge import ActorCrash, GovernedActor, Ping, Reply, ask_blocking
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import Admit, Complete
from sessionwarden.actors.rateguard import RateGuardActor
from sessionwarden.actors.session import SessionActor
from sessionwarden.actors.shells import CompressorActor
from sessionwarden.actors.supervisor import ActorSpec, Supervisor
from sessionwarden.domain.calls import CallOutcome
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    RateLimitsObserved,
    SessionStarted,
)
from sessionwarden.store import EventLog, StreamAppend
from sessionwarden.store.schema import connect
from sessionwarden.views.wiring import default_projections

from tests.actors.actor_support import call_request, no_leaked_actors

STARTED = SessionStarted.type_tag()
ADMITTED = CallAdmitted.type_tag()
COMPLETED = CallCompleted.type_tag()
OBSERVED = RateLimitsObserved.type_tag()



def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


class Harness:
    """The test's log and every supervisor it built (all stopped at teardown)."""

    def __init__(self, path: Path) -> None:
        self.log = EventLog(path, projections=default_projections())
        self.supervisors: list[Supervisor] = []

    def supervise(self, specs: list[ActorSpec], **options: Any) -> Supervisor:
        supervisor = Supervisor(specs, **options)
        self.supervisors.append(supervisor)
        return supervisor

    def settle(self, *refs: "pykka.ActorRef[Any]") -> None:
        """Wait until the actors processed their inbox and their appends committed."""
        for _ in range(2):  # completions may queue one more round of appends
            for ref in refs:
                ref.ask(Ping(), timeout=5)
            self.log.submit([StreamAppend("test-barrier", ())]).wait(10)

    def types(self, stream: str) -> list[str]:
        return [e.type for e in self.log.read_stream(stream)]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    with no_leaked_actors(lambda: h.log.close()):
        h = Harness(tmp_path / "e.db")
        try:
            yield h
        finally:
            for supervisor in h.supervisors:
                supervisor.stop(timeout=5)


class RecorderActor(GovernedActor):
    """A test child that journals its life; ``gate`` runs inside on_start."""

    def __init__(
        self,
        name: str,
        journal: list[tuple[Any, ...]],
        on_failure: Any,
        *,
        start_delay: float = 0.0,
        fail_start: bool = False,
        gate: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(on_failure)
        self.name = name
        self.journal = journal
        self.start_delay = start_delay
        self.fail_start = fail_start
        self.gate = gate

    def on_start(self) -> None:
        self.journal.append(("on_start", self.name))
        if self.gate is not None:
            self.gate()
        time.sleep(self.start_delay)
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot recover its state")
        self.journal.append(("ready", self.name))

    def on_stop(self) -> None:
        self.journal.append(("stop", self.name))

    def handle(self, message: object, reply: Reply) -> object:
        if message == "crash":
            raise ActorCrash(f"{self.name} state is corrupt")
        if message == "name":
            return self.name
        raise TypeError(f"cannot handle {message!r}")


def admit(call_id: str, session_id: str) -> Admit:
    return Admit(call_request(call_id, session_id, messages=3))


def completed(call_id: str, session_id: str, remaining: int = 900) -> Complete:
    headers = (("x-ratelimit-limit-requests", "1000"),
               ("x-ratelimit-remaining-requests", str(remaining)))
    return Complete(CallOutcome(
        call_id=call_id, session_id=session_id, outcome="ok", provider="prov", status=200,
        latency_ms=12.5, credential="fp:000000000000", has_output=True,
        usage_block={"prompt_tokens": 11, "completion_tokens": 7},
        rate_limit_headers=headers,
    ))


def has_ref(supervisor: Supervisor, name: str) -> bool:
    try:
        return supervisor.ref(name).is_alive()
    except KeyError:
        return False


# ------------------------------------------------------------------ start and stop


def start_session_and_rateguard(harness: Harness) -> Supervisor:
    """A started supervisor of one session actor and the rate guard that forwards to it."""
    log = harness.log
    sup: Supervisor = harness.supervise([
        ActorSpec("session-0", lambda f: SessionActor.start(log, on_failure=f)),
        ActorSpec("rateguard", lambda f: RateGuardActor.start(
            log, lambda _: sup.ref("session-0"), on_failure=f)),
    ], backoff_s=0.001)
    sup.start()
    return sup


def test_children_start_in_order_each_ready_before_the_next_and_stop_in_reverse(
    harness: Harness,
) -> None:
    log = harness.log
    journal: list[tuple[Any, ...]] = []
    sup: Supervisor
    order = ["first", "rateguard", "ledger", "second", "session-0", "third"]

    def spawn(name: str, start: Callable[[Any], Any]) -> ActorSpec:
        def starter(on_failure: Any) -> Any:
            earlier = order[: order.index(name)]
            journal.append(("spawn", name, tuple(n for n in earlier if has_ref(sup, n))))
            return start(on_failure)

        return ActorSpec(name, starter)

    def recorder(name: str) -> ActorSpec:
        # The delay makes an impatient supervisor start the next child too early.
        return spawn(name, lambda f: RecorderActor.start(name, journal, f, start_delay=0.03))

    sup = harness.supervise([
        recorder("first"),
        spawn("rateguard", lambda f: RateGuardActor.start(
            log, lambda _: sup.ref("session-0"), on_failure=f)),
        spawn("ledger", lambda f: CompressorActor.start(f)),
        recorder("second"),
        spawn("session-0", lambda f: SessionActor.start(log, on_failure=f)),
        recorder("third"),
    ])
    assert sup.names() == order
    sup.start()

    spawns = [entry for entry in journal if entry[0] == "spawn"]
    # Each child was spawned only once every earlier child answered its Ping.
    assert spawns == [("spawn", name, tuple(order[:i])) for i, name in enumerate(order)]
    lifecycle = [entry for entry in journal if entry[0] != "spawn"]
    assert lifecycle == [
        ("on_start", "first"), ("ready", "first"),
        ("on_start", "second"), ("ready", "second"),
        ("on_start", "third"), ("ready", "third"),
    ]
    assert journal.index(("ready", "first")) < journal.index(spawns[1])
    assert journal.index(("ready", "second")) < journal.index(spawns[4])
    refs = {name: sup.ref(name) for name in order}
    assert all(ref.is_alive() for ref in refs.values())

    del journal[:]
    sup.stop()
    assert journal == [("stop", "third"), ("stop", "second"), ("stop", "first")]
    assert not any(ref.is_alive() for ref in refs.values())
    assert sup.restarts == dict.fromkeys(order, 0)


def test_a_child_whose_on_start_raises_makes_start_raise(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    spawned: list[str] = []

    def spec(name: str, fail: bool = False) -> ActorSpec:
        def starter(on_failure: Any) -> Any:
            spawned.append(name)
            return RecorderActor.start(name, journal, on_failure, fail_start=fail)

        return ActorSpec(name, starter)

    sup = harness.supervise(
        [spec("ok"), spec("broken", fail=True), spec("never")], backoff_s=0.001
    )
    with pytest.raises(Exception) as raised:
        sup.start()
    assert isinstance(raised.value, pykka.ActorDeadError | ActorUnavailable | RuntimeError)
    assert spawned == ["ok", "broken"]
    assert has_ref(sup, "ok")
    with pytest.raises(KeyError):
        sup.ref("broken")
    time.sleep(0.1)  # a failed start is not retried in the background
    assert spawned == ["ok", "broken"]
    assert sup.restarts["broken"] == 0
    assert "broken" not in sup.given_up
    sup.stop()
    assert ("stop", "ok") in journal


# ------------------------------------------------------------------ restarts


def test_crashed_child_is_restarted_and_reachable_through_ref(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    sup = harness.supervise([
        ActorSpec("a", lambda f: RecorderActor.start("a", journal, f)),
        ActorSpec("b", lambda f: RecorderActor.start("b", journal, f)),
    ], backoff_s=0.001)
    sup.start()
    old, sibling = sup.ref("a"), sup.ref("b")
    with pytest.raises(ActorUnavailable, match="state is corrupt"):
        ask_blocking(old, "crash")
    wait_until(lambda: sup.restarts["a"] == 1)
    new = sup.ref("a")
    assert new.actor_urn != old.actor_urn
    assert new.is_alive() and not old.is_alive()
    assert ask_blocking(new, "name") == "a"
    assert sup.ref("b") is sibling and sibling.is_alive()  # one-for-one
    assert sup.restarts == {"a": 1, "b": 0}
    assert journal.count(("on_start", "a")) == 2


def test_restarted_session_actor_recovers_from_the_log(harness: Harness) -> None:
    sup = start_session_and_rateguard(harness)
    old = sup.ref("session-0")
    ask_blocking(old, admit("c1", "s1"))
    ask_blocking(old, admit("c2", "s1"))
    harness.settle(old)
    assert harness.types("session-s1") == [STARTED, ADMITTED, ADMITTED]

    old.tell("not a message")  # handle raises outside a call: the actor fails
    wait_until(lambda: sup.restarts["session-0"] == 1)
    new = sup.ref("session-0")
    assert new.is_alive() and not old.is_alive()

    ask_blocking(new, admit("c3", "s1"))
    # The rate guard reaches the new instance through the supervisor; and the new
    # instance knows c1 is open (recovered from the view), so it can complete it.
    assert ask_blocking(sup.ref("rateguard"), completed("c3", "s1")).call_id == "c3"
    assert ask_blocking(new, completed("c1", "s1")).call_id == "c1"
    harness.settle(new)
    # The new instance knew s1 was started: no second SessionStarted.
    assert harness.types("session-s1") == [
        STARTED, ADMITTED, ADMITTED, ADMITTED, COMPLETED, COMPLETED]
    calls = harness.log.read_connection().execute(
        "SELECT calls FROM view_sessions WHERE session_id = 's1'").fetchall()
    assert calls == [(3,)]


def test_restart_while_a_session_start_is_in_flight_keeps_one_session_started(
    harness: Harness,
) -> None:
    log = harness.log
    sup = harness.supervise([
        ActorSpec("session-0", lambda f: SessionActor.start(log, on_failure=f)),
    ], backoff_s=0.001)
    sup.start()
    old = sup.ref("session-0")
    blocker = connect(log.path)  # a foreign writer holds the write lock
    blocker.execute("BEGIN IMMEDIATE")
    try:
        old.tell(admit("c1", "s2"))  # SessionStarted + CallAdmitted, not committed yet
        old.tell("not a message")
        wait_until(lambda: sup.restarts["session-0"] == 1)
        new = sup.ref("session-0")
        new.tell(admit("c2", "s2"))  # recovered from a snapshot without s2
        new.ask(Ping(), timeout=5)
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    harness.settle(new)
    assert harness.types("session-s2") == [STARTED, ADMITTED, ADMITTED]


def test_a_restarted_rate_guard_recovers_what_it_recorded(harness: Harness) -> None:
    sup = start_session_and_rateguard(harness)
    session = sup.ref("session-0")
    for i in range(3):
        ask_blocking(session, admit(f"c{i}", "s1"))
    guard = sup.ref("rateguard")
    ask_blocking(guard, completed("c0", "s1", remaining=900))  # first: recorded
    ask_blocking(guard, completed("c1", "s1", remaining=899))  # counts down: not
    assert harness.types("ratelimits-prov") == [OBSERVED]

    guard.tell("not a message")  # the guard fails outside a call
    wait_until(lambda: sup.restarts["rateguard"] == 1)
    new = sup.ref("rateguard")
    assert new is not guard and new.is_alive()
    # Recovered from view_ratelimits: the same picture is still not news ...
    ask_blocking(new, completed("c2", "s1", remaining=898))
    assert harness.types("ratelimits-prov") == [OBSERVED]
    assert harness.types("session-s1").count(COMPLETED) == 3
    # ... and the rows it recovered from are the recorded ones.
    rows = harness.log.read_connection().execute(
        "SELECT credential, bucket, lim, remaining FROM view_ratelimits").fetchall()
    assert rows == [("fp:000000000000", "requests", 1000, 900)]


def test_a_child_failing_too_often_is_given_up(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    sup = harness.supervise([
        ActorSpec("flaky", lambda f: RecorderActor.start("flaky", journal, f)),
        ActorSpec("steady", lambda f: RecorderActor.start("steady", journal, f)),
    ], max_restarts=2, window_s=60.0, backoff_s=0.001)
    sup.start()
    for attempt in range(1, 3):
        sup.ref("flaky").tell("crash")
        wait_until(lambda attempt=attempt: sup.restarts["flaky"] == attempt)
    sup.ref("flaky").tell("crash")  # the third failure within the window
    wait_until(lambda: "flaky" in sup.given_up)
    time.sleep(0.05)
    assert sup.restarts["flaky"] == 2
    assert not sup.ref("flaky").is_alive()
    assert journal.count(("on_start", "flaky")) == 3
    with pytest.raises(ActorUnavailable):
        ask_blocking(sup.ref("flaky"), "name", timeout=1)
    assert ask_blocking(sup.ref("steady"), "name") == "steady"
    assert sup.given_up == {"flaky"}


def test_failures_older_than_the_window_are_forgotten(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    sup = harness.supervise([
        ActorSpec("flaky", lambda f: RecorderActor.start("flaky", journal, f)),
    ], max_restarts=1, window_s=0.15, backoff_s=0.001)
    sup.start()
    sup.ref("flaky").tell("crash")
    wait_until(lambda: sup.restarts["flaky"] == 1)
    time.sleep(0.2)
    sup.ref("flaky").tell("crash")
    wait_until(lambda: sup.restarts["flaky"] == 2)
    assert sup.given_up == set()
    assert sup.ref("flaky").is_alive()


def restart_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"sw-restart-{name}"]


def test_stop_during_a_restart_leaves_no_child_running(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    entered, release = threading.Event(), threading.Event()
    instances = [0]

    def gate() -> None:
        instances[0] += 1
        if instances[0] == 2:  # the restarted instance
            entered.set()
            release.wait(5)

    sup = harness.supervise([
        ActorSpec("slow", lambda f: RecorderActor.start("slow", journal, f, gate=gate)),
    ], backoff_s=0.001)
    sup.start()
    sup.ref("slow").tell("crash")
    assert entered.wait(5)
    # The daemon shuts down while the child is being restarted, and stop() gives up
    # waiting for the restart (a short timeout: the gate holds it until after stop()).
    sup.stop(timeout=0.05)
    assert restart_threads("slow"), "the restart must still be under way after stop()"
    release.set()
    wait_until(lambda: not restart_threads("slow"))
    # The restarted instance saw the stop and stopped itself: no child outlives stop().
    assert pykka.ActorRegistry.get_by_class(RecorderActor) == []
    assert journal.count(("stop", "slow")) == 1


def test_stop_does_not_wait_out_a_restart_backoff(harness: Harness) -> None:
    journal: list[tuple[Any, ...]] = []
    sup = harness.supervise([
        ActorSpec("flaky", lambda f: RecorderActor.start("flaky", journal, f)),
    ], backoff_s=10.0)
    sup.start()
    sup.ref("flaky").tell("crash")
    wait_until(lambda: restart_threads("flaky"))  # waiting out its 10 s backoff
    started = time.monotonic()
    sup.stop(timeout=5)
    assert time.monotonic() - started < 1.0
    wait_until(lambda: not restart_threads("flaky"))
    assert journal.count(("on_start", "flaky")) == 1  # never restarted
    assert sup.restarts["flaky"] == 0
    assert pykka.ActorRegistry.get_by_class(RecorderActor) == []
