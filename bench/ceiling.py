"""What any Python implementation of our group commit can reach here, next to ours.

Run ``.venv/bin/python bench/ceiling.py [--rounds N] [--tasks N] [--threads]``. The
question it answers: is the gap between ``EventLog`` and the issue's targets (8 appenders
≥ 3× raw apsw, 64 appenders ≥ 5×) in our code, or in the design on this machine? Each
round runs, on fresh files:

a     raw apsw, one transaction per event (``store.py`` mode a, the targets' baseline)
b     eventsourcing, one event per save (``store.py`` mode b, the 64-appender target's
      second baseline)
bare  the design stripped to its bones: N asyncio tasks on one uvloop, each putting one
      event in a list and awaiting a future; a writer thread commits whatever is queued
      with one multi-row INSERT into the baseline's table and hands the group back with
      one ``call_soon_threadsafe``. No hash chain, no view, no checks.
lean  as bare, with what the log must do for each event, written inline: the log's own
      schema, stream numbers, versions, the SHA-256 chain, the 11-column row, the
      ``StreamsView`` upsert and its tracking row, in one transaction (no conflict
      checks, no idempotency keys, no error handling).
c2    ``EventLog.append_async`` from N tasks (``store.py`` mode c2)

With ``--threads`` the appenders are N threads, each blocking on a lock until its group
is committed (bare-t, lean-t; from ``RELAY_MIN`` waiters on, each woken thread wakes the
next, as in ``EventLog``); lf-t is bare-t without a writer thread, the appender that
finds no commit running leading the next group (leader/follower); and the last mode is
``EventLog.append`` (``store.py`` mode c).

Medians and per-round ratios against a and b are printed; nothing asserts on time.
"""

import argparse
import asyncio
import hashlib
import itertools
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import apsw
from sessionwarden.store import StreamsView
from sessionwarden.store.hashing import DOMAIN, GENESIS
from sessionwarden.store.schema import connect, ensure_schema, presize_wal
from sessionwarden.store.writer import RELAY_MIN

import store as bench

# (future or lock the appender waits on, stream, type, schema version, data)
Item = tuple[object, str, str, int, bytes]
Runner = Callable[[int, Callable[[list[Item]], None]], float]
_INTS, _LEN = struct.Struct(">qqq"), struct.Struct(">I")


def field(value: bytes) -> bytes:
    return _LEN.pack(len(value)) + value


class Collector:
    """The shared half of bare and lean: a list, a lock, and a writer thread committing groups.

    The writer waits until all N appenders have queued (it knows N, which the real log must
    guess) and then commits whatever is queued; ``deliver`` hands the group back.
    """

    def __init__(self, appenders: int, commit: Callable[[list[Item]], None],
                 deliver: Callable[[list[Item]], None]) -> None:
        self.appenders, self.commit, self.deliver = appenders, commit, deliver
        self.lock, self.wake = threading.Lock(), threading.Lock()
        self.wake.acquire()
        self.queued: list[Item] = []
        self.want = 0  # how many queued items wake the writer; 0 while it is not waiting
        self.done = False
        self.thread = threading.Thread(target=self.run)

    def put(self, item: Item) -> None:
        with self.lock:
            self.queued.append(item)
            if self.want and len(self.queued) >= self.want:
                self.want = 0
                self.wake.release()

    def run(self) -> None:
        while True:
            with self.lock:
                waiting = len(self.queued) < self.appenders and not self.done
                if waiting:
                    self.want = self.appenders
            if waiting:
                self.wake.acquire(timeout=0.004)
            with self.lock:
                group = self.queued[:]
                self.queued.clear()
                self.want = 0
            if not group:
                if self.done:
                    return
                continue
            self.commit(group)
            self.deliver(group)

    def stop(self) -> None:
        with self.lock:
            self.done = True
            if self.want:
                self.want = 0
                self.wake.release()
        self.thread.join()


def run_group_commit(tasks: int, commit: Callable[[list[Item]], None]) -> float:
    """N asyncio tasks append one event each and wait; a writer thread commits groups."""
    streams = [str(uuid.uuid4()) for _ in range(bench.STREAMS)]

    async def main() -> float:
        loop = asyncio.get_running_loop()

        def resolve(group: list[Item]) -> None:
            for item in group:
                cast("asyncio.Future[None]", item[0]).set_result(None)

        collector = Collector(tasks, commit,
                              lambda group: loop.call_soon_threadsafe(resolve, group))
        collector.thread.start()

        async def appender(t: int) -> None:
            for i in range(t, bench.APPEND_EVENTS, tasks):
                stream = streams[i % bench.STREAMS]
                event = bench.session_event(i, stream)
                future = loop.create_future()
                collector.put((future, stream, event.type, event.schema_version, event.data))
                await future

        started = time.perf_counter()
        await asyncio.gather(*(appender(t) for t in range(tasks)))
        elapsed = time.perf_counter() - started
        collector.stop()
        return bench.APPEND_EVENTS / elapsed

    return bench.daemon_loop_run(main())


def run_group_commit_threads(threads: int, commit: Callable[[list[Item]], None]) -> float:
    """N threads append one event each and block on a lock until its group committed.

    From ``RELAY_MIN`` waiters on, the writer wakes only the first and each woken thread
    wakes the next, as ``EventLog`` does; below it, the writer wakes each.
    """
    streams = [str(uuid.uuid4()) for _ in range(bench.STREAMS)]

    def deliver(group: list[Item]) -> None:
        locks = [cast(threading.Lock, item[0]) for item in group]
        if len(locks) < RELAY_MIN:
            for done in locks:
                done.release()
            return
        for before, after in itertools.pairwise(group):
            relay_next[id(before[0])] = cast(threading.Lock, after[0])
        locks[0].release()

    relay_next: dict[int, threading.Lock] = {}
    collector = Collector(threads, commit, deliver)

    def appender(t: int) -> None:
        for i in range(t, bench.APPEND_EVENTS, threads):
            stream = streams[i % bench.STREAMS]
            event = bench.session_event(i, stream)
            done = threading.Lock()
            done.acquire()
            collector.put((done, stream, event.type, event.schema_version, event.data))
            done.acquire()
            after = relay_next.pop(id(done), None)
            if after is not None:
                after.release()

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    collector.thread.start()
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    collector.stop()
    return bench.APPEND_EVENTS / elapsed


class _Follower:
    """One append in a leader/follower round: its lock, and the row it carries."""

    __slots__ = ("done", "item")

    def __init__(self, item: Item) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.item = item


def run_leader_follower(threads: int, commit: Callable[[list[Item]], None]) -> float:
    """N threads and no writer thread: the appender that finds no commit running leads.

    The leader waits for all N, commits their group on its own thread and wakes the
    others; then it goes on to its next append, usually to lead again. This saves the
    writer design's hand-off to and from a writer thread: does that lift the ceiling?
    """
    streams = [str(uuid.uuid4()) for _ in range(bench.STREAMS)]
    mutex, full = threading.Lock(), threading.Lock()
    full.acquire()
    queue: list[_Follower] = []
    state = {"leading": False, "want": 0}

    def lead(me: _Follower) -> None:
        with mutex:
            waiting = len(queue) < threads
            if waiting:
                state["want"] = threads
        if waiting:
            full.acquire(timeout=0.004)
        with mutex:
            group = queue[:]
            queue.clear()
            state["want"] = 0
        commit([follower.item for follower in group])
        for follower in group:
            if follower is not me:
                follower.done.release()
        with mutex:
            state["leading"] = False

    def appender(t: int) -> None:
        for i in range(t, bench.APPEND_EVENTS, threads):
            stream = streams[i % bench.STREAMS]
            event = bench.session_event(i, stream)
            me = _Follower((None, stream, event.type, event.schema_version, event.data))
            with mutex:
                queue.append(me)
                leader = not state["leading"]
                if leader:
                    state["leading"] = True
                elif state["want"] and len(queue) >= state["want"]:
                    state["want"] = 0
                    full.release()
            if leader:
                lead(me)
            else:
                me.done.acquire()

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return bench.APPEND_EVENTS / (time.perf_counter() - started)


def mode_bare(workdir: Path, tasks: int, runner: Runner = run_group_commit) -> dict[str, float]:
    conn = apsw.Connection(str(workdir / "bare.db"))
    conn.execute("PRAGMA journal_mode = WAL").fetchall()
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(
        "CREATE TABLE events (position INTEGER PRIMARY KEY, stream_id TEXT, version INT,"
        " type TEXT, ts REAL, payload BLOB, UNIQUE (stream_id, version))"
    )
    versions: dict[str, int] = {}

    def commit(group: list[Item]) -> None:
        params: list[object] = []
        for _, stream, type_, _, data in group:
            versions[stream] = version = versions.get(stream, 0) + 1
            params += (stream, version, type_, time.time(), data)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO events (stream_id, version, type, ts, payload) VALUES "
            + ",".join(["(?, ?, ?, ?, ?)"] * len(group)),
            params,
        )
        conn.execute("COMMIT")

    try:
        return {"rate": runner(tasks, commit)}
    finally:
        conn.close()


def mode_lean(workdir: Path, tasks: int, runner: Runner = run_group_commit) -> dict[str, float]:
    path = workdir / "lean.db"
    conn = connect(path)
    ensure_schema(conn, path)
    StreamsView().create(conn)
    presize_wal(conn)
    heads: dict[str, tuple[int, int, bytes]] = {}  # stream -> (no, version, length-prefixed name)

    def commit(group: list[Item]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (row[0], row[1]) if row else (0, GENESIS)
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        at = field(now.encode())
        next_no: int | None = None
        events: list[object] = []
        streams: list[object] = []
        view: dict[str, list[object]] = {}
        for _, stream, type_, schema_version, data in group:
            head = heads.get(stream)
            if head is None:
                if next_no is None:
                    next_no = conn.execute(
                        "SELECT coalesce(max(no), 0) + 1 FROM streams").fetchone()[0]
                head = (next_no, 0, field(stream.encode()))
                streams += (next_no, stream)
                next_no += 1
            number, version, name = head[0], head[1] + 1, head[2]
            heads[stream] = (number, version, name)
            seq += 1
            digest = hashlib.sha256(b"".join((
                DOMAIN, prev, _INTS.pack(seq, version, schema_version), name,
                field(type_.encode()), at, b"\x00", field(data),
            ))).digest()
            events += (seq, stream, version, type_, schema_version, now, None, data, prev,
                       digest, number)
            prev = digest
            entry = view.get(stream)
            if entry is None:
                view[stream] = [stream, version, 1, seq, seq, now, now]
            else:
                entry[1], entry[4], entry[6] = version, seq, now
                entry[2] += 1  # type: ignore[operator]
        if streams:
            conn.execute("INSERT INTO streams VALUES " + ",".join(["(?, ?)"] * (len(streams) // 2)),
                         streams)
        conn.execute("INSERT INTO events VALUES " + ",".join(
            ["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(group)), events)
        conn.execute(
            "INSERT INTO view_streams (stream, version, events, first_seq, last_seq,"
            " first_recorded_at, last_recorded_at) VALUES "
            + ",".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(view))
            + " ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
            " events = events + excluded.events, last_seq = excluded.last_seq,"
            " last_recorded_at = excluded.last_recorded_at",
            [value for entry in view.values() for value in entry],
        )
        conn.execute(
            "INSERT INTO tracking VALUES ('view:streams', ?)"
            " ON CONFLICT (name) DO UPDATE SET position = excluded.position", (seq,))
        conn.execute("COMMIT")

    try:
        return {"rate": runner(tasks, commit)}
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=8, help="concurrent appenders (default 8)")
    parser.add_argument("--threads", action="store_true",
                        help="the appenders are threads blocking on their ack (EventLog: mode c)")
    parser.add_argument("--events", type=int, default=bench.APPEND_EVENTS,
                        help=f"events appended per mode and round "
                             f"(default {bench.APPEND_EVENTS:,})")
    args = parser.parse_args()
    bench.APPEND_EVENTS = args.events
    tasks = args.tasks
    modes: dict[str, Callable[[Path], dict[str, float]]]
    if args.threads:
        modes = {
            "a raw apsw 1 txn/event FULL": bench.mode_raw,
            "b eventsourcing 1 event/save": bench.mode_eventsourcing,
            f"bare-t group commit, {tasks} threads":
                lambda d: mode_bare(d, tasks, run_group_commit_threads),
            f"lean-t the log's work inline, {tasks} threads":
                lambda d: mode_lean(d, tasks, run_group_commit_threads),
            f"lf-t bare, leader/follower, no writer thread, {tasks} threads":
                lambda d: mode_bare(d, tasks, run_leader_follower),
            f"c EventLog.append, {tasks} threads": lambda d: bench.mode_eventlog(d, tasks),
        }
    else:
        modes = {
            "a raw apsw 1 txn/event FULL": bench.mode_raw,
            "b eventsourcing 1 event/save": bench.mode_eventsourcing,
            f"bare group commit, {tasks} tasks": lambda d: mode_bare(d, tasks),
            f"lean the log's work inline, {tasks} tasks": lambda d: mode_lean(d, tasks),
            f"c2 EventLog.append_async, {tasks} tasks": lambda d: bench.mode_asyncio(d, tasks),
        }
    print(f"python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()} (apsw), "
          f"{args.rounds} rounds, {bench.APPEND_EVENTS:,} events over {bench.STREAMS:,} streams\n")
    bench.RESULTS.mkdir(exist_ok=True)
    results: dict[str, list[float]] = {name: [] for name in modes}
    for r in range(args.rounds):
        for name, fn in modes.items():
            workdir = Path(tempfile.mkdtemp(prefix="ceiling-", dir=bench.RESULTS))
            try:
                results[name].append(fn(workdir)["rate"])
            finally:
                shutil.rmtree(workdir)
        print(f"  round {r + 1}: " + ", ".join(
            f"{n.split()[0]} {results[n][-1]:,.0f}/s" for n in modes), file=sys.stderr)
    rows = [[name, bench.fmt(statistics.median(rates)),
             f"{bench.fmt(min(rates))} - {bench.fmt(max(rates))}"]
            for name, rates in results.items()]
    print("Appends, events/s")
    bench.table(["mode", "median", "min - max"], rows)
    names = list(modes)
    ratio_rows = []
    for baseline in names[:2]:
        for name in names[2:]:
            per_round = [x / y for x, y in zip(results[name], results[baseline], strict=True)]
            ratio_rows.append([f"{name.split()[0]}/{baseline.split()[0]}",
                               f"{statistics.median(per_round):.2f}",
                               " ".join(f"{x:.2f}" for x in per_round)])
    print("Per-round ratios against a and b")
    bench.table(["ratio", "median", "rounds"], ratio_rows)


if __name__ == "__main__":
    main()
