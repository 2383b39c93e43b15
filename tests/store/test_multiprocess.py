"""Several processes appending to one log file, and a read-only reader watching them.

Each process has its own ``EventLog`` (and so its own group-commit writer); they meet
only in SQLite's write lock, the application-level busy retry and the writer's check of
the head at the start of every transaction.
"""

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sessionwarden.store import EventLog, StreamsView, replay
from sessionwarden.store.verify import verify_chain

WORKER = Path(__file__).with_name("store_worker.py")


def _start(
    db: Path, tmp_path: Path, label: str, mode: str, *args: object
) -> subprocess.Popen[bytes]:
    with (tmp_path / f"err-{label}").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(db), mode, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )


def _release(barrier: Path, names: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
    """Wait until every worker has opened its log, then let them all go at once."""
    deadline = time.monotonic() + 30
    while not all((barrier / f"ready-{n}").exists() for n in names):
        for p in procs:
            assert p.poll() is None, f"worker exited early with {p.returncode}"
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.005)
    (barrier / "go").touch()


def _finish(proc: subprocess.Popen[bytes], tmp_path: Path) -> str:
    out, _ = proc.communicate(timeout=120)
    errors = "\n".join(p.read_text() for p in tmp_path.glob("err-*") if p.stat().st_size)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{errors}"
    return out.decode().strip()


def _check_log(db: Path, total: int, per_writer: dict[str, int]) -> None:
    with EventLog(db, projections=[StreamsView()]) as log:
        seqs = [ev.seq for ev in log.read_all()]
        assert seqs == list(range(1, total + 1))
        assert log.head()[0] == total
        assert log.tracking_position("view:streams") == total
        streams = Counter(ev.stream.rsplit("-", 1)[0] for ev in log.read_all())
        assert streams == per_writer
        chain = verify_chain(log.read_all())
        assert chain.ok and chain.events == total, chain
        views = log.read_connection().execute(
            "SELECT sum(events), sum(version) FROM view_streams"
        ).fetchall()
        assert views == [(total, total)]
    report = replay(db, [StreamsView()], verify=True)
    assert report.ok and report.events == total, report


@pytest.mark.slow  # four processes, 8,000 events: .ci/run's slow set runs it
def test_four_processes_append_8000_events_without_gaps(tmp_path: Path) -> None:
    db, barrier = tmp_path / "events.db", tmp_path / "barrier"
    barrier.mkdir()
    EventLog(db, projections=[StreamsView()]).close()  # no schema race in the test itself
    names = [f"w{i}" for i in range(4)]
    count = 2000
    procs = [_start(db, tmp_path, name, "append", barrier, name, count) for name in names]
    _release(barrier, names, procs)
    started = time.perf_counter()
    outputs = [_finish(p, tmp_path) for p in procs]
    elapsed = time.perf_counter() - started
    assert outputs == [f"done {count} 0"] * 4
    _check_log(db, 4 * count, dict.fromkeys(names, count))
    print(f"4 x {count} appends in {elapsed:.2f} s ({4 * count / elapsed:,.0f}/s)")


def test_readonly_reader_never_sees_a_gap_while_two_processes_append(tmp_path: Path) -> None:
    db, barrier = tmp_path / "events.db", tmp_path / "barrier"
    barrier.mkdir()
    EventLog(db, projections=[StreamsView()]).close()
    names = ["a0", "a1"]
    count = 2000
    writers = [_start(db, tmp_path, name, "append", barrier, name, count) for name in names]
    reader = _start(db, tmp_path, "reader", "read", barrier, 2 * count)
    _release(barrier, [*names, "reader"], [*writers, reader])
    outputs = [_finish(p, tmp_path) for p in writers]
    (barrier / "stop").touch()
    read_line = _finish(reader, tmp_path)
    assert outputs == [f"done {count} 0"] * 2
    kind, seen, polls, gaps = read_line.split()
    assert (kind, int(seen), int(gaps)) == ("read", 2 * count, 0)
    assert int(polls) > 10, "the reader should have overlapped the writers"
    _check_log(db, 2 * count, dict.fromkeys(names, count))
