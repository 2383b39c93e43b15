"""AppendRequest and its Relay: every waiter is woken exactly when its append is done.

The relay hands the writer's wake-up from one waiting thread to the next. What must
hold: every thread still waiting is woken, in any group size; a waiter that gave up (a
timeout, an exception in its thread) is skipped, never handed a wake-up it cannot pass
on; and a request waited on again after giving up returns its outcome at once.
"""

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sessionwarden.store import EventLog, StreamAppend
from sessionwarden.store.records import AppendResult
from sessionwarden.store.request import AppendRequest, Relay
from sessionwarden.store.writer import RELAY_MIN

from tests.store.store_support import ev, write_lock

WAIT_S = 30.0


def requests(n: int, relay: Relay) -> list[AppendRequest]:
    return [AppendRequest([StreamAppend("s", (ev(),))], None, None, relay) for _ in range(n)]


def finish_all(group: list[AppendRequest], relay: Relay) -> None:
    """What the writer does for a relayed group: record every outcome, wake the first."""
    for i, request in enumerate(group):
        request.finish([AppendResult("s", i + 1, i + 1, i + 1)], None, wake=False)
    relay.start(group)


class Waiters:
    """One thread per request, each calling ``wait(timeout)``; outcomes by index."""

    def __init__(self, group: list[AppendRequest], timeouts: dict[int, float]) -> None:
        self.outcomes: dict[int, object] = {}
        self.threads = [
            threading.Thread(target=self._wait, args=(i, r, timeouts.get(i)), daemon=True)
            for i, r in enumerate(group)
        ]
        for thread in self.threads:
            thread.start()

    def _wait(self, i: int, request: AppendRequest, timeout: float | None) -> None:
        try:
            self.outcomes[i] = request.wait(timeout)[0].first_seq
        except TimeoutError as exc:
            self.outcomes[i] = exc

    def join(self) -> None:
        for thread in self.threads:
            thread.join(WAIT_S)
        assert not any(t.is_alive() for t in self.threads), "a waiter was never woken"


@pytest.mark.parametrize("n", [1, 2, 17, 64])
def test_a_relay_wakes_every_waiter(n: int) -> None:
    relay = Relay()
    group = requests(n, relay)
    waiters = Waiters(group, {})
    time.sleep(0.05)  # most of them are blocked by now; the rest find the lock released
    finish_all(group, relay)
    waiters.join()
    assert waiters.outcomes == {i: i + 1 for i in range(n)}


def test_waiters_that_gave_up_are_skipped() -> None:
    relay = Relay()
    group = requests(20, relay)
    gave_up = {0, 5, 6, 19}  # the first, two in a row, the last
    waiters = Waiters(group, {i: 0.01 for i in gave_up})
    time.sleep(0.2)  # the timeouts have run out
    finish_all(group, relay)
    waiters.join()
    for i in range(20):
        if i in gave_up:
            assert isinstance(waiters.outcomes[i], TimeoutError)
            # Committed after all: waiting again returns the outcome at once.
            assert group[i].wait(0)[0].first_seq == i + 1
        else:
            assert waiters.outcomes[i] == i + 1


class Interrupted(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, raise_interrupted)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("alarm")
def test_a_waiter_interrupted_by_an_exception_is_skipped() -> None:
    relay = Relay()
    group = requests(5, relay)
    mine = group[0]  # this (main) thread waits on the first: the relay would start here
    others = Waiters(group[1:], {})
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    with pytest.raises(Interrupted):
        mine.wait()
    finish_all(group, relay)
    others.join()
    assert others.outcomes == {i: i + 2 for i in range(4)}
    assert mine.wait(0)[0].first_seq == 1


def test_a_request_not_relayed_times_out_as_before() -> None:
    request = AppendRequest([StreamAppend("s", (ev(),))], None, None)
    with pytest.raises(TimeoutError):
        request.wait(0.01)
    request.finish([AppendResult("s", 1, 1, 1)], None)
    assert request.wait(0)[0].first_seq == 1


def stall_then_append(db: Path, n: int, timeouts: dict[int, float]) -> dict[int, object]:
    """``n`` threads append one event each while another connection holds the write lock.

    They pile up behind the stalled writer, so one group carries most of them.
    """
    outcomes: dict[int, object] = {}
    with EventLog(db) as log:
        def append(i: int) -> None:
            try:
                outcomes[i] = log.append(f"s-{i}", [ev(str(i))], timeout=timeouts.get(i)).version
            except TimeoutError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=append, args=(i,), daemon=True) for i in range(n)]
        with write_lock(db):
            for thread in threads:
                thread.start()
            time.sleep(0.3)
        for thread in threads:
            thread.join(WAIT_S)
        assert not any(t.is_alive() for t in threads), "an appender was never woken"
        assert log._writer is not None
        assert log._writer.relayed_groups >= 1, "no group was large enough to relay"
        deadline = time.monotonic() + WAIT_S
        while log.head()[0] < n and time.monotonic() < deadline:
            time.sleep(0.01)  # appends that timed out still commit
        assert log.head()[0] == n
    return outcomes


def test_many_blocked_appenders_are_all_woken(db: Path) -> None:
    n = 4 * RELAY_MIN
    assert stall_then_append(db, n, {}) == {i: 1 for i in range(n)}


def test_appenders_that_time_out_do_not_strand_the_others(db: Path) -> None:
    n = 3 * RELAY_MIN
    timeouts = {i: 0.05 for i in range(0, n, 3)}
    outcomes = stall_then_append(db, n, timeouts)
    for i in range(n):
        if i in timeouts:
            assert isinstance(outcomes[i], TimeoutError)
        else:
            assert outcomes[i] == 1
