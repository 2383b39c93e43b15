"""Crash safety: SIGKILL a process appending from several threads, then audit the log.

``store_worker.py crash`` prints one ``ack`` line per batch ``append_batch`` returned.
The test kills it at a random moment, reopens the same database (state accumulates over
the trials) and checks that every acknowledged event survived with its content, that no
batch is partially stored, that SQLite's integrity check and ``replay --verify`` pass and
that the ``StreamsView`` position equals the head.

The default run makes a few kills (about a second each); the full soak of 24 is marked
``slow`` (``pytest -m slow``, which ``.ci/run`` runs too). Every kill checks everything,
so the short run loses no check, only repetitions of it.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import apsw
import pytest
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import EventLog, StreamsView, replay
from sessionwarden.store.errors import StoreClaimed
from sessionwarden.store.lock import InstanceLock

WORKER = Path(__file__).with_name("store_worker.py")
TRIALS = 4
SOAK_TRIALS = 24
THREADS = 4


class Worker:
    """A worker subprocess whose stdout lines are collected by a thread."""

    def __init__(self, *args: object, stderr: Path) -> None:
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._first = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill was never a whole ack
                self.lines.append(raw.decode().rstrip("\n"))
                self._first.set()
        self._first.set()

    def wait_first_line(self, timeout: float = 20.0) -> None:
        if not self._first.wait(timeout) or not self.lines:
            self.kill()
            pytest.fail(f"worker printed nothing; stderr:\n{self.stderr_text()}")

    def kill(self) -> list[str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)
        self._stderr.close()
        return self.lines

    def stderr_text(self) -> str:
        self._stderr.flush()
        return Path(self._stderr.name).read_text(errors="replace")


class Audit:
    """What earlier audits established: the head, its hash and every event's batch."""

    def __init__(self) -> None:
        self.head = 0
        self.head_hash = b""
        self.by_seq: dict[int, tuple[str, int, int]] = {}  # seq -> batch id, index, size

    def check(self, db: Path, acked: dict[str, tuple[int, int, int]]) -> None:
        """Audit the log after a crash: the events since the last audit, then the whole.

        Events up to the previous head were audited before; the verified hash chain and
        the unchanged hash at that head prove they are still the same bytes.
        """
        with EventLog(db, projections=[StreamsView()]) as log:  # reopening recovers the WAL
            head, head_hash = log.head()
            assert (log.tracking_position("view:streams") or 0) == head
            assert head >= self.head
            if self.head:
                (old,) = log.read_all(after=self.head - 1, until=self.head)
                assert old.hash == self.head_hash, "an audited event changed"
            batches: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
            expected_seq = self.head + 1
            for ev in log.read_all(after=self.head):
                assert ev.seq == expected_seq, f"gap before seq {ev.seq}"
                expected_seq += 1
                decoded = CODEC.decode(ev.type, ev.data)
                assert isinstance(decoded, SessionStarted)
                index, total = map(int, decoded.model.split("/"))
                assert index not in batches[decoded.client], f"duplicate event {decoded}"
                batches[decoded.client][index] = (ev.seq, total)
                self.by_seq[ev.seq] = (decoded.client, index, total)
            assert expected_seq - 1 == head
            integrity = log.read_connection().execute("PRAGMA integrity_check").fetchall()
            assert integrity == [("ok",)]
        # no batch is partial: every stored batch has all of its events, consecutively
        for batch_id, events in batches.items():
            totals = {total for _, total in events.values()}
            assert len(totals) == 1, f"batch {batch_id} disagrees on its size"
            total = totals.pop()
            assert sorted(events) == list(range(total)), f"batch {batch_id} is partial"
            seqs = sorted(seq for seq, _ in events.values())
            assert seqs == list(range(seqs[0], seqs[0] + total)), f"batch {batch_id} split"
        # every acknowledged batch is present, at the acknowledged seqs, with its content
        for batch_id, (first, last, total) in acked.items():
            assert last - first + 1 == total
            for seq in range(first, last + 1):
                assert seq in self.by_seq, f"acknowledged seq {seq} of {batch_id} is lost"
                assert self.by_seq[seq][0] == batch_id, f"seq {seq} is {self.by_seq[seq]}"
        report = replay(db, [StreamsView()], verify=True)
        assert report.ok, report
        assert report.events == head
        self.head, self.head_hash = head, head_hash


@pytest.mark.parametrize("trials", [
    pytest.param(TRIALS, id=f"{TRIALS}-kills"),
    pytest.param(SOAK_TRIALS, id=f"{SOAK_TRIALS}-kills", marks=pytest.mark.slow),
])
def test_sigkill_during_concurrent_batches_loses_no_acknowledged_event(
    tmp_path: Path, trials: int
) -> None:
    db = tmp_path / "events.db"
    seed = int(os.environ.get("SW_CRASH_SEED", time.time_ns()))
    print(f"SW_CRASH_SEED={seed}")  # shown on failure, to rerun the same kill schedule
    rng = random.Random(seed)
    acked: dict[str, tuple[int, int, int]] = {}
    audit = Audit()
    heads = []
    started = time.perf_counter()
    for trial in range(trials):
        worker = Worker(
            db, "crash", rng.randrange(1 << 30), THREADS, stderr=tmp_path / f"err-{trial}"
        )
        worker.wait_first_line()
        time.sleep(rng.uniform(0.050, 0.400))
        lines = worker.kill()
        assert worker.proc.returncode == -signal.SIGKILL, worker.stderr_text()
        for line in lines:
            kind, first, last, batch_id, total = line.split()
            assert kind == "ack"
            assert batch_id not in acked
            acked[batch_id] = (int(first), int(last), int(total))
        audit.check(db, acked)
        heads.append(audit.head)
        assert audit.head >= max(last for _, last, _ in acked.values())
    # finally, audit everything from scratch once more
    final = Audit()
    final.check(db, acked)
    assert final.by_seq == audit.by_seq
    elapsed = time.perf_counter() - started
    unacked = heads[-1] - sum(total for _, _, total in acked.values())
    print(f"{trials} kills, {len(acked)} acked batches, {heads[-1]} events "
          f"({unacked} committed but never acknowledged), {elapsed:.1f} s")


def test_sigkill_releases_instance_lock(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    worker = Worker(db, "lock", stderr=tmp_path / "err-lock")
    worker.wait_first_line()
    assert worker.lines[0] == f"locked {worker.proc.pid}"
    with pytest.raises(StoreClaimed, match=str(worker.proc.pid)):
        InstanceLock(db)
    worker.kill()
    assert worker.proc.returncode == -signal.SIGKILL
    claim = InstanceLock(db)  # the kernel dropped the dead process's flock
    try:
        assert claim.path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(StoreClaimed):
            InstanceLock(db)
    finally:
        claim.release()
    InstanceLock(db).release()


def test_integrity_check_helper_sees_a_fresh_log(tmp_path: Path) -> None:
    """The audit's own assumptions hold on a log that was closed cleanly."""
    db = tmp_path / "events.db"
    EventLog(db, projections=[StreamsView()]).close()
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    audit = Audit()
    audit.check(db, {})
    assert audit.head == 0
