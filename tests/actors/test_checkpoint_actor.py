"""CheckpointActor (actors/checkpoint.py): periodic PASSIVE, TRUNCATE escalation and shutdown.

The actor is subscribed to the store's commits as cmd/daemon/runtime.py subscribes it. The
tests open their log with ``autocheckpoint=False`` (the daemon keeps the writer's
automatic checkpoint on) so that every checkpoint they see is the actor's.
"""

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from sessionwarden.actors.checkpoint import CHECKPOINT_STREAM, CheckpointActor
from sessionwarden.actors.messages import Committed
from sessionwarden.events import CODEC, WalCheckpointed
from sessionwarden.store import EventLog, NewEvent
from sessionwarden.views.wiring import default_projections

from tests.actors.actor_support import no_leaked_actors

MiB = 1024 * 1024



def open_log(path: Path) -> EventLog:
    return EventLog(path, projections=default_projections(), autocheckpoint=False)


def start_checkpointer(log: EventLog, every: int, max_wal_bytes: int) -> "pykka.ActorRef[Any]":
    ref = CheckpointActor.start(log, every=every, max_wal_bytes=max_wal_bytes, on_failure=None)

    def committed(events: int) -> None:
        if ref.is_alive():
            ref.tell(Committed())

    log.add_commit_listener(committed)
    return ref


def wal_size(log: EventLog) -> int:
    try:
        return os.stat(f"{log.path}-wal").st_size
    except FileNotFoundError:
        return 0


def checkpoints(log: EventLog) -> list[WalCheckpointed]:
    found = []
    for e in log.read_stream(CHECKPOINT_STREAM):
        event = CODEC.decode(e.type, e.data)
        assert isinstance(event, WalCheckpointed)
        found.append(event)
    return found


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def event(i: int, size: int = 100) -> NewEvent:
    return NewEvent("test.happened.v1", (f"{i:08d}" * (size // 8 + 1))[:size].encode())


class Logs:
    """Every log a test opens, closed at teardown after every actor stopped."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.opened: list[EventLog] = []

    def open(self, name: str = "e.db") -> EventLog:
        log = open_log(self.tmp_path / name)
        self.opened.append(log)
        return log


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Logs]:
    opened = Logs(tmp_path)

    def close_logs() -> None:
        for log in opened.opened:
            log.close()

    with no_leaked_actors(close_logs):
        yield opened


# ------------------------------------------------------------------ periodic checkpoints


def test_passive_checkpoint_every_n_commits_is_recorded(logs: Logs) -> None:
    log = logs.open()
    ref = start_checkpointer(log, every=5, max_wal_bytes=64 * MiB)
    for i in range(4):
        log.append("s", [event(i)])
    time.sleep(0.05)
    assert checkpoints(log) == []  # four commits: not yet
    log.append("s", [event(4)])
    wait_until(lambda: len(checkpoints(log)) == 1)
    [first] = checkpoints(log)
    assert first.mode == "PASSIVE"
    assert first.reason == "5 commits"
    assert first.wal_frames > 0
    assert first.checkpointed_frames == first.wal_frames  # no reader held it back

    for i in range(5, 25):  # 20 more commits, plus the checkpoints' own
        log.append("s", [event(i)])
    ref.ask(Committed(), timeout=5)  # one more commit tick, also a barrier
    log.append("s", [event(99)])
    wait_until(lambda: len(checkpoints(log)) >= 5)
    recorded = checkpoints(log)
    assert 5 <= len(recorded) <= 8
    assert {c.mode for c in recorded} == {"PASSIVE"}
    in_memory = ref.proxy().checkpoints.get()
    assert [(c.mode, c.wal_frames, c.checkpointed_frames) for c in recorded] == in_memory[
        : len(recorded)]


def test_escalates_to_truncate_when_the_wal_is_too_big(logs: Logs) -> None:
    log = logs.open()
    start_checkpointer(log, every=3, max_wal_bytes=4096)
    for i in range(3):
        log.append("s", [event(i, 2000)])
    wait_until(lambda: checkpoints(log))
    [first] = checkpoints(log)
    assert first.mode == "TRUNCATE"
    assert re.fullmatch(r"wal \d+ bytes > 4096", first.reason), first.reason
    assert first.wal_frames == first.checkpointed_frames


def test_shutdown_truncates_and_leaves_an_empty_wal(logs: Logs) -> None:
    log = logs.open()
    ref = start_checkpointer(log, every=1000, max_wal_bytes=64 * MiB)
    for i in range(60):
        log.append(f"s-{i % 3}", [event(i, 1000)])
    assert wal_size(log) > 60 * 1000
    assert checkpoints(log) == []
    ref.stop(timeout=10)
    last = checkpoints(log)[-1]
    assert (last.mode, last.reason) == ("TRUNCATE", "shutdown")
    assert last.wal_frames == last.checkpointed_frames
    assert wal_size(log) == 0  # the shutdown event itself was truncated away too
    path = log.path
    log.close()
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    with EventLog(path, readonly=True) as reopened:
        assert reopened.head()[0] == 61


# ------------------------------------------------------------------ lingering readers


def _append_with_a_lingering_reader(log: EventLog, n: int) -> tuple[int, int, int]:
    """Append ``n`` ~2 KB events while a thread runs back-to-back read transactions.

    Returns the largest WAL size sampled, the size at the end and the reader's count.
    """
    stop = threading.Event()
    reads = [0]
    failure: list[BaseException] = []

    def reader() -> None:
        try:
            conn = log.read_connection()
            while not stop.is_set():
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM events").fetchall()
                conn.execute("COMMIT")
                reads[0] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            failure.append(exc)

    thread = threading.Thread(target=reader, name="test-lingering-reader")
    thread.start()
    largest = 0
    try:
        while reads[0] == 0:
            time.sleep(0.001)
        payload = os.urandom(1000).hex().encode()  # 2,000 bytes, incompressible
        for i in range(n):
            log.append(f"s-{i % 10}", [NewEvent("test.bulk.v1", payload)])
            if i % 25 == 0:
                largest = max(largest, wal_size(log))
        end = wal_size(log)
    finally:
        stop.set()
        thread.join(10)
    assert not failure, failure
    return max(largest, end), end, reads[0]


@pytest.mark.slow  # about 18 s of appends against a lingering reader
def test_wal_stays_bounded_while_a_reader_lingers(logs: Logs) -> None:
    # Measured here: 1.4-8.6 MiB at most with the actor, ~73 MiB without. The bound has
    # headroom because one TRUNCATE may wait up to its 500 ms busy timeout for the writer
    # lock while this loop keeps appending at ~25 MB/s.
    bound = 24 * MiB

    unchecked = logs.open("baseline.db")
    base_max, base_end, _ = _append_with_a_lingering_reader(unchecked, 3000)

    log = logs.open()
    ref = start_checkpointer(log, every=20, max_wal_bytes=1 * MiB)
    largest, end, reads = _append_with_a_lingering_reader(log, 3000)
    recorded = ref.proxy().checkpoints.get()
    events = checkpoints(log)

    assert reads > 100  # the reader really was running all along
    assert largest < bound, largest
    assert end < bound, end
    assert any(mode == "TRUNCATE" for mode, _, _ in recorded)
    assert any(e.reason.startswith("wal ") for e in events)
    # Without the actor nothing resets the WAL: it holds every frame ever written.
    assert base_end == base_max
    assert base_end > 2 * bound, base_end
    assert base_end > 3 * largest, (base_end, largest)


def test_checkpoints_do_not_feed_themselves(logs: Logs) -> None:
    log = logs.open()
    with pytest.raises(ValueError, match="at least 2"):
        CheckpointActor(log, every=1)
    start_checkpointer(log, every=2, max_wal_bytes=64 * MiB)
    log.append("s", [event(0)])
    log.append("s", [event(1)])
    time.sleep(0.3)
    assert len(checkpoints(log)) == 1
