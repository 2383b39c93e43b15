"""Subprocess helper for the crash and multi-process store tests.

Run as ``python tests/store/store_worker.py DB MODE ARGS...``. Modes:

``crash SEED THREADS``
    Append batches of 1-20 events spread over 1-3 streams with ``append_batch`` from
    ``THREADS`` threads, forever. After each acknowledged batch print
    ``ack <first_seq> <last_seq> <batch_id> <n_events>``. Every event is a real
    ``SessionStarted`` whose ``client`` is the batch id and whose ``model`` is
    ``"<index>/<n_events>"``, so a reopened log tells which batch each event belongs to and
    whether a batch is complete. The parent kills this process with SIGKILL.

``lock``
    Claim the database's ``InstanceLock``, print ``locked <pid>`` and sleep forever.

``append BARRIER_DIR NAME COUNT``
    Open an ``EventLog`` with ``StreamsView``, create ``BARRIER_DIR/ready-NAME``, wait for
    ``BARRIER_DIR/go``, then make ``COUNT`` single-event appends (one ``append`` call each)
    to streams ``NAME-<i % 20>``. Print ``done <ok> <errors>``; exit 1 if any append failed.

``read BARRIER_DIR TARGET``
    Open the log with ``EventLog(readonly=True)``, wait for ``go`` and poll ``read_all``
    from the last seen seq until ``TARGET`` events have been seen or ``BARRIER_DIR/stop``
    appears. Every event read must be exactly last_seen + 1 and ``head()`` must never move
    backwards. Print ``read <seen> <polls> <gaps>``; exit 1 on any gap.
"""

import os
import random
import sys
import threading
import time
from pathlib import Path

from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import EventLog, NewEvent, StreamAppend, StreamsView
from sessionwarden.store.lock import InstanceLock

_out_lock = threading.Lock()


def emit(line: str) -> None:
    """Write one whole line and flush it, so a SIGKILL never leaves an ack half-told."""
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def event(session_id: str, model: str) -> NewEvent:
    tag, version, data = CODEC.encode(SessionStarted(client=session_id, model=model))
    return NewEvent(tag, data, schema_version=version)


def wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.001)


def crash(db: Path, seed: int, threads: int) -> None:
    log = EventLog(db, projections=[StreamsView()])
    pid = os.getpid()

    def run(t: int) -> None:
        rng = random.Random(seed * 1000 + t)
        n = 0
        while True:
            n += 1
            batch_id = f"b{pid}-{t}-{n}"
            total = rng.randint(1, 20)
            k = rng.randint(1, min(3, total))
            streams = rng.sample(range(40), k)
            cuts = sorted(rng.sample(range(1, total), k - 1))
            bounds = [0, *cuts, total]
            parts = [
                StreamAppend(
                    f"crash-{streams[j]}",
                    tuple(event(batch_id, f"{i}/{total}") for i in range(bounds[j], bounds[j + 1])),
                )
                for j in range(k)
            ]
            results = log.append_batch(parts)
            first = min(r.first_seq for r in results)
            last = max(r.last_seq for r in results)
            emit(f"ack {first} {last} {batch_id} {total}")

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def lock(db: Path) -> None:
    claim = InstanceLock(db)
    emit(f"locked {os.getpid()}")
    time.sleep(3600)
    claim.release()


def append(db: Path, barrier: Path, name: str, count: int) -> int:
    log = EventLog(db, projections=[StreamsView()])
    (barrier / f"ready-{name}").touch()
    wait_for(barrier / "go")
    ok = errors = 0
    for i in range(count):
        try:
            result = log.append(f"{name}-{i % 20}", [event(f"{name}-{i}", "mp")])
        except Exception as exc:
            errors += 1
            print(f"error {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            continue
        if result.first_seq != result.last_seq or result.first_seq < 1:
            errors += 1
            print(f"error bad result {result}", file=sys.stderr, flush=True)
            continue
        ok += 1
    log.close()
    emit(f"done {ok} {errors}")
    return 0 if errors == 0 and ok == count else 1


def read(db: Path, barrier: Path, target: int) -> int:
    log = EventLog(db, readonly=True)
    (barrier / "ready-reader").touch()
    wait_for(barrier / "go")
    last = 0
    head = 0
    polls = gaps = 0
    while last < target:
        polls += 1
        for ev in log.read_all(after=last):
            if ev.seq != last + 1:
                gaps += 1
                print(f"gap: saw seq {ev.seq} after {last}", file=sys.stderr, flush=True)
            last = ev.seq
        new_head = log.head()[0]
        if new_head < head or new_head < last:
            gaps += 1
            print(f"head went back: {new_head} (was {head}, read {last})", file=sys.stderr)
        head = new_head
        if (barrier / "stop").exists() and last >= head:
            break
        time.sleep(0.002)
    log.close()
    emit(f"read {last} {polls} {gaps}")
    return 0 if gaps == 0 else 1


def main(argv: list[str]) -> int:
    db, mode, *args = argv
    path = Path(db)
    if mode == "crash":
        crash(path, int(args[0]), int(args[1]))
    elif mode == "lock":
        lock(path)
    elif mode == "append":
        return append(path, Path(args[0]), args[1], int(args[2]))
    elif mode == "read":
        return read(path, Path(args[0]), int(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
