"""Benchmark of the event log against the anchors in perf-baselines.md (items 1a, 2a, 3).

Run ``.venv/bin/python bench/store.py [--quick]``. Modes run in rounds (A B C D, A B C D,
…) in this one process; medians and per-round ratios are printed:

a  raw apsw, one ``BEGIN IMMEDIATE; INSERT; COMMIT`` per event, WAL, synchronous=FULL,
   5,000 events round-robin over 1,000 streams (the 1a anchor's table shape)
b  eventsourcing 9.5.6 ``Application`` (stdlib sqlite3), one event per ``save``, default
   sync (FULL); 1,000 aggregates created untimed first (the 2a anchor)
c  ``EventLog`` with ``StreamsView``, 8 threads each calling ``append`` with one event and
   waiting for the acknowledgement (group commit), 5,000 events over 1,000 streams
d  as c with 64 threads
c2 as c, but 8 asyncio tasks on one event loop (uvloop, as uvicorn runs the daemon's),
   each awaiting ``append_async`` (the daemon's shape: one loop, many requests)
d2 as c2 with 64 tasks
c0, d0 as c and d without ``StreamsView`` (events only, like a and b)
a8 (information) as a with 8 events per transaction: what one fsync can carry when 8
   appenders have one append each in flight, with none of the log's own work

Then on a log of 1,000,000 events (100,000 with ``--quick``), built once with
``append_batch`` of 1,000 events spread over 1,000 streams and cached under
``bench/results/`` keyed by a marker of the schema and hash format, each in a fresh
subprocess: e1 ``replay(path, [StreamsView()], verify=False)``, e2 ``verify_chain`` over
``read_all()``, e3 ``replay(..., verify=True)`` (chain + decode + rebuild + compare), with
the peak RSS of each subprocess.

Numbers only; nothing here asserts on time.
"""

import argparse
import asyncio
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import EventLog, NewEvent, StreamAppend, StreamsView, replay
from sessionwarden.store.hashing import DOMAIN
from sessionwarden.store.verify import verify_chain

T = TypeVar("T")
RESULTS = Path(__file__).resolve().parent / "results"
STREAMS = 1000
APPEND_EVENTS = 5000

# -- payloads -----------------------------------------------------------------------------


class Item(msgspec.Struct):
    sku: str
    qty: int
    price: str


class OrderPlaced(msgspec.Struct):
    """The anchor's test event (about 214 bytes as msgpack)."""

    order_id: str
    customer_id: str
    items: list[Item]
    currency: str
    total: str
    note: str


_MSGPACK = msgspec.msgpack.Encoder()
_NOTE = "leave at the door, ring twice please"
_CLIENT = "claude-code/2.1.7 (linux; x86_64)"


def order_payload(i: int) -> bytes:
    return _MSGPACK.encode(
        OrderPlaced(
            order_id=f"{i:036d}",
            customer_id=f"cust-{i % 977:08d}",
            items=[Item("SKU-000123-BLUE", 2, "19.99"), Item("SKU-000456-RED", 1, "5.49")],
            currency="EUR",
            total="45.47",
            note=_NOTE,
        )
    )


def session_event(i: int, stream: str) -> NewEvent:
    """A real event of about 200 bytes (msgspec JSON), encoded in the timed loop."""
    tag, version, data = CODEC.encode(
        SessionStarted(
            model=f"claude-sonnet-4-5-{i:010d}", client=f"{_CLIENT} {stream}",
            parent_session_id=f"{i:036d}",
        )
    )
    return NewEvent(tag, data, schema_version=version)


# -- a: raw apsw --------------------------------------------------------------------------


def mode_raw(workdir: Path, per_txn: int = 1) -> dict[str, float]:
    """Raw apsw: ``per_txn`` events per ``BEGIN IMMEDIATE; INSERT…; COMMIT``, one thread.

    ``per_txn=8`` (a8) is the ceiling for 8 appenders: the most events one fsync can
    carry when each appender has one append in flight, with no hashing, planning,
    views, acknowledgements or threads.
    """
    conn = apsw.Connection(str(workdir / "raw.db"))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(
        "CREATE TABLE events (position INTEGER PRIMARY KEY, stream_id TEXT, version INT,"
        " type TEXT, ts REAL, payload BLOB, UNIQUE (stream_id, version))"
    )
    streams = [str(uuid.uuid4()) for _ in range(STREAMS)]
    versions = [0] * STREAMS
    started = time.perf_counter()
    for base in range(0, APPEND_EVENTS, per_txn):
        conn.execute("BEGIN IMMEDIATE")
        for i in range(base, min(base + per_txn, APPEND_EVENTS)):
            s = i % STREAMS
            versions[s] += 1
            conn.execute(
                "INSERT INTO events (stream_id, version, type, ts, payload)"
                " VALUES (?, ?, ?, ?, ?)",
                (streams[s], versions[s], "OrderPlaced", time.time(), order_payload(i)),
            )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return {"rate": APPEND_EVENTS / elapsed}


# -- b: eventsourcing ---------------------------------------------------------------------


_ES: dict[str, type] = {}


def es_classes() -> tuple[type, type]:
    """The eventsourcing app and aggregate, defined once (topics must be unique)."""
    if not _ES:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event

        class Order(Aggregate):
            @event("Created")
            def __init__(self, customer_id: str) -> None:
                self.customer_id = customer_id
                self.items: list[tuple[str, int, str]] = []

            @event("ItemAdded")
            def add_item(self, sku: str, qty: int, price: str) -> None:
                self.items.append((sku, qty, price))

        _ES.update(app=Application, order=Order)
    return _ES["app"], _ES["order"]


def mode_eventsourcing(workdir: Path) -> dict[str, float]:
    Application, Order = es_classes()
    app = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(workdir / "es.db")}
    )
    orders = [Order(f"cust-{i}") for i in range(STREAMS)]
    for i in range(0, STREAMS, 100):
        app.save(*orders[i : i + 100])
    started = time.perf_counter()
    for i in range(APPEND_EVENTS):
        order = orders[i % STREAMS]
        order.add_item(f"SKU-{i:06d}", 2, "19.99")
        app.save(order)
    elapsed = time.perf_counter() - started
    app.close()
    return {"rate": APPEND_EVENTS / elapsed}


# -- c, d: EventLog with concurrent appenders ---------------------------------------------


def mode_eventlog(workdir: Path, threads: int, views: bool = True) -> dict[str, float]:
    log = EventLog(workdir / "log.db", projections=[StreamsView()] if views else [])
    streams = [str(uuid.uuid4()) for _ in range(STREAMS)]
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []

    def appender(t: int) -> None:
        mine = latencies[t]
        barrier.wait()
        try:
            for i in range(t, APPEND_EVENTS, threads):
                stream = streams[i % STREAMS]
                began = time.perf_counter()
                log.append(stream, [session_event(i, stream)])
                mine.append(time.perf_counter() - began)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    log.close()
    if failures:
        raise RuntimeError(f"{len(failures)} appends failed: {failures[0]!r}")
    lat = sorted(x for per in latencies for x in per)
    assert len(lat) == APPEND_EVENTS
    return {
        "rate": APPEND_EVENTS / elapsed,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
    }


def daemon_loop_run(coro: "Coroutine[Any, Any, T]") -> T:
    """Run ``coro`` on the event loop the daemon gets: uvicorn's "auto" picks uvloop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(coro)
    return uvloop.run(coro)


def mode_asyncio(workdir: Path, tasks: int, views: bool = True) -> dict[str, float]:
    """As c/d, but the appenders are asyncio tasks awaiting ``append_async``.

    This is the daemon's own shape: one event loop (uvloop, as uvicorn runs it), many
    concurrent requests, each waiting for its acknowledgement
    (``sessionwarden.store.aio``: one loop wake-up per committed group).
    """
    log = EventLog(workdir / "log.db", projections=[StreamsView()] if views else [])
    streams = [str(uuid.uuid4()) for _ in range(STREAMS)]

    async def run() -> tuple[float, list[float]]:
        latencies: list[float] = []

        async def appender(t: int) -> None:
            for i in range(t, APPEND_EVENTS, tasks):
                stream = streams[i % STREAMS]
                began = time.perf_counter()
                await log.append_async(stream, [session_event(i, stream)])
                latencies.append(time.perf_counter() - began)

        started = time.perf_counter()
        await asyncio.gather(*(appender(t) for t in range(tasks)))
        return time.perf_counter() - started, latencies

    elapsed, latencies = daemon_loop_run(run())
    log.close()
    lat = sorted(latencies)
    assert len(lat) == APPEND_EVENTS
    return {
        "rate": APPEND_EVENTS / elapsed,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
    }


# -- e: the large log ---------------------------------------------------------------------


def schema_marker() -> str:
    """A digest of the DDL a fresh log gets, its user_version and the hash domain."""
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "marker.db"
        EventLog(db, projections=[StreamsView()]).close()
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            ddl = conn.execute("SELECT type, name, sql FROM sqlite_schema ORDER BY name").fetchall()
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
        finally:
            conn.close()
    blob = repr((ddl, version, DOMAIN, "bench-store-v1")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def large_log(events: int) -> tuple[Path, float | None]:
    """The cached log of ``events`` events; the build rate if it had to be built."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"store-{events}-{schema_marker()}.db"
    if path.exists():
        with EventLog(path, readonly=True) as log:
            if log.head()[0] == events:
                return path, None
    building = path.with_suffix(".building")
    for stale in [*RESULTS.glob(path.name + "*"), *RESULTS.glob(building.name + "*")]:
        stale.unlink()
    streams = [str(uuid.uuid4()) for _ in range(STREAMS)]
    started = time.perf_counter()
    with EventLog(building, projections=[StreamsView()]) as log:
        for base in range(0, events, 1000):
            parts = [
                StreamAppend(streams[i % STREAMS], (session_event(i, streams[i % STREAMS]),))
                for i in range(base, min(base + 1000, events))
            ]
            log.append_batch(parts)
            if base and base % 100_000 == 0:
                rate = base / (time.perf_counter() - started)
                print(f"  built {base:,} events ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    for suffix in ("-wal", "-shm"):  # the last close checkpointed; nothing should remain
        Path(str(building) + suffix).unlink(missing_ok=True)
    building.rename(path)
    return path, events / elapsed


def child(kind: str, db: Path) -> None:
    """Run one large-log measurement in this (fresh) process and print it as JSON."""
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if kind == "verify":
        with EventLog(db, readonly=True) as log:
            chain = verify_chain(log.read_all())
        ok, count = chain.ok, chain.events
    else:
        report = replay(db, [StreamsView()], verify=kind == "replay-verify")
        ok, count = report.ok, report.events
    elapsed = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"ok": ok, "events": count, "seconds": elapsed,
                      "rss_mb": peak_kb / 1024, "base_rss_mb": base_kb / 1024}))


def run_child(kind: str, db: Path) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(db)], capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(f"{kind} subprocess failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout)
    if not result["ok"]:
        raise RuntimeError(f"{kind} failed on {db}: {result}")
    result["rate"] = result["events"] / result["seconds"]
    return result


# -- reporting ----------------------------------------------------------------------------


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(
        zip(headers, widths, strict=True)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(
            zip(r, widths, strict=True))))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k-event log for (e), 3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds (default 5, quick 3)")
    parser.add_argument("--large", type=int, help="events in the large log (default 1M)")
    parser.add_argument("--skip-append", action="store_true", help="only run (e)")
    parser.add_argument("--skip-large", action="store_true", help="skip (e)")
    parser.add_argument("--modes", help="comma-separated append modes to run (default all)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    rounds = args.rounds or (3 if args.quick else 5)
    large = args.large or (100_000 if args.quick else 1_000_000)
    print(f"python {sys.version.split()[0]}, SQLite {apsw.sqlite_lib_version()} (apsw), "
          f"nproc {os.cpu_count()}, {rounds} rounds\n")

    RESULTS.mkdir(exist_ok=True)
    modes: dict[str, Callable[[Path], dict[str, float]]] = {
        "a raw apsw 1 txn/event FULL": mode_raw,
        "b eventsourcing 1 event/save": mode_eventsourcing,
        "c EventLog 8 appenders": lambda d: mode_eventlog(d, 8),
        "d EventLog 64 appenders": lambda d: mode_eventlog(d, 64),
        "c2 EventLog 8 asyncio tasks": lambda d: mode_asyncio(d, 8),
        "d2 EventLog 64 asyncio tasks": lambda d: mode_asyncio(d, 64),
        "c0 as c, events only": lambda d: mode_eventlog(d, 8, views=False),
        "d0 as d, events only": lambda d: mode_eventlog(d, 64, views=False),
        "a8 raw apsw 8 events/txn": lambda d: mode_raw(d, per_txn=8),
    }
    if args.modes:
        chosen = set(args.modes.split(","))
        unknown = chosen - {name.split()[0] for name in modes}
        if unknown:
            parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
        modes = {name: fn for name, fn in modes.items() if name.split()[0] in chosen}
    if not args.skip_append:
        results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for r in range(rounds):
            for name, fn in modes.items():
                workdir = Path(tempfile.mkdtemp(prefix="append-", dir=RESULTS))
                try:
                    results[name].append(fn(workdir))
                finally:
                    shutil.rmtree(workdir)
            print(f"  round {r + 1}: " + ", ".join(
                f"{n.split()[0]} {results[n][-1]['rate']:,.0f}/s" for n in modes), file=sys.stderr)
        rows = []
        for name, mode_runs in results.items():
            rates = [x["rate"] for x in mode_runs]
            lat = (f"{statistics.median(x['p50_ms'] for x in mode_runs):.2f} / "
                   f"{statistics.median(x['p99_ms'] for x in mode_runs):.2f}"
                   if "p50_ms" in mode_runs[0] else "-")
            rows.append([name, f"{APPEND_EVENTS:,}", fmt(statistics.median(rates)),
                         f"{fmt(min(rates))} - {fmt(max(rates))}", lat])
        print(f"Appends, {APPEND_EVENTS:,} events over {STREAMS:,} streams, events/s")
        table(["mode", "events", "median", "min - max", "ack p50 / p99 ms"], rows)
        full = {name.split()[0]: name for name in modes}
        ratio_rows = []
        for label, num_key, den_key, target in (
            ("c/a", "c", "a", 3), ("d/a", "d", "a", 5), ("d/b", "d", "b", 10),
            ("c2/a asyncio", "c2", "a", 3), ("d2/a asyncio", "d2", "a", 5),
            ("d2/b asyncio", "d2", "b", 10),
            ("c0/a (info)", "c0", "a", 3), ("d0/a (info)", "d0", "a", 5),
            ("d0/b (info)", "d0", "b", 10),
            ("a8/a (ceiling at 8)", "a8", "a", 3), ("c2/a8 (info)", "c2", "a8", 0),
        ):
            if num_key not in full or den_key not in full:
                continue
            num, den = full[num_key], full[den_key]
            per_round = [x["rate"] / y["rate"] for x, y in zip(
                results[num], results[den], strict=True)]
            med = statistics.median(per_round)
            ratio_rows.append([label, f"{med:.2f}", " ".join(f"{x:.2f}" for x in per_round),
                               f">= {target}" if target else "-",
                               ("met" if med >= target else "MISSED") if target else ""])
        if ratio_rows:
            print("Per-round ratios")
            table(["ratio", "median", "rounds", "target", ""], ratio_rows)
    if args.skip_large:
        return

    db, build_rate = large_log(large)
    size_mb = db.stat().st_size / 2**20
    built = f"built now at {build_rate:,.0f} events/s" if build_rate else "cached"
    print(f"Large log: {large:,} events, {size_mb:,.0f} MB, {db.name} ({built})")
    kinds = ["replay", "verify", "replay-verify"]
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds:
            runs[kind].append(run_child(kind, db))
        print(f"  round {r + 1}: " + ", ".join(
            f"{k} {runs[k][-1]['seconds']:.2f} s" for k in kinds), file=sys.stderr)
    labels = {
        "replay": "e1 replay verify=False",
        "verify": "e2 verify_chain(read_all())",
        "replay-verify": "e3 replay verify=True",
    }
    targets = {"replay": ">= 150,000/s, < 200 MB", "verify": "< 10 s (1M)", "replay-verify": "-"}
    rows = []
    for kind in kinds:
        rs = runs[kind]
        rows.append([
            labels[kind],
            fmt(statistics.median(x["rate"] for x in rs)),
            f"{fmt(min(x['rate'] for x in rs))} - {fmt(max(x['rate'] for x in rs))}",
            f"{statistics.median(x['seconds'] for x in rs):.2f}",
            f"{max(x['rss_mb'] for x in rs):.0f} "
            f"({statistics.median(x['base_rss_mb'] for x in rs):.0f})",
            targets[kind],
        ])
    print(f"Whole-log reads, {large:,} events, each in a fresh subprocess")
    table(["mode", "events/s median", "min - max", "seconds", "peak RSS MB (at start)",
           "target"], rows)


if __name__ == "__main__":
    main()
