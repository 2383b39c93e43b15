"""Benchmark of the ledger's views: ``usage`` over a ledger of 1,000,000 calls (issue 12).

Run ``.venv/bin/python bench/ledger.py [--calls N] [--rounds R]``. Targets: ``usage --by
day --json`` ≤ 1 s and ``usage --by session --session ID`` ≤ 50 ms over 1,000,000 calls.

**The ledger** is written the way the daemon writes it: real ``SessionStarted``,
``CallAdmitted`` and ``CallCompleted`` events appended with ``EventLog.append_batch``
(hash chain, every projection of ``cmd/wiring.default_projections`` applied in the same
transaction, as in the daemon), in batches of 2,000 calls: 100 sessions live at a time,
each making 20 calls per batch and 200 in all (so 5,000 sessions for 1M calls), a batch
every 1.44 hours of the log's clock, so 1M calls span 30 days. Each session uses one
model (Claude Sonnet 4.5 at ``anthropic`` 60 %, GPT-4.1 at ``openai`` 38 %, an unpriced
local model 2 %) and its provider's two keys in turn; one call in 20 is a summary side
call on another model; one in 100 has estimated usage. Costs are what
``domain.cost.pricing.cost`` gives for the call's tokens at genai-prices' bundled prices
(exact Decimal strings); the local model's are ``unknown``. The log is built once and
kept as ``bench/results/ledger-<calls>-<marker>.db``, the marker a digest of the views'
DDL and of this generator's version, so a schema change builds a new one.

**Measured**, modes in turn in each round, wall time in this process:

day        ``main(["usage", "--by", "day", "--json"])``, output to a buffer: the CLI as
           it runs (argument parsing, read-only open, query, JSON), from the daily sums
day-calls  the same question from every call (a ``--since`` a second after the log's
           start: a bound that is not a whole day makes ``usage`` read ``view_ledger``,
           the path before ``view_ledger_daily``): the baseline
session    ``usage --by session --session ID`` (a table), one session of 200 calls
session-calls  the same from the calls (the baseline)
bare-day   the ceiling of day-calls: a bare ``SELECT day, count(*), sum(...) ... GROUP
           BY day`` over ``view_ledger`` on an open connection, no Decimal, no output
bare-sums  the same over ``view_ledger_daily``

then, once, ``sessionwarden usage --by day --json`` as a subprocess (wall, interpreter
start and imports included) and ``python -c "import sessionwarden.cmd.cli.main"`` (the
floor of any CLI command). The day answers from the sums and from the calls are
compared (they must be identical). Numbers only; nothing here asserts on time.
"""

import argparse
import contextlib
import hashlib
import io
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.main import main as cli
from sessionwarden.config import Config, ProviderConfig
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import cost
from sessionwarden.domain.session import session_stream
from sessionwarden.domain.usage.canonical import CanonicalUsage
from sessionwarden.events import CallAdmitted, CallCompleted, SessionStarted
from sessionwarden.store import EventLog, NewEvent, StreamAppend
from sessionwarden.views.wiring import default_projections

RESULTS = Path(__file__).resolve().parent / "results"
GENERATOR = "1"  # bump when the generated ledger changes
START = datetime(2026, 11, 1, tzinfo=UTC)
LIVE, PER_BATCH, PER_SESSION = 100, 20, 200
MODELS = [("anthropic", "claude-sonnet-4-5", 60), ("openai", "gpt-4.1", 38),
          ("local", "local-llm", 2)]
SIDE = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4.1-mini", "local": "local-llm"}
KEYS = {p: (f"fp:{p[:2]}000000001", f"fp:{p[:2]}000000002") for p in SIDE}


def marker(results: Path) -> str:
    """A digest of the DDL of every view on a fresh log, and of the generator's version."""
    path = results / "marker.db"
    path.unlink(missing_ok=True)
    with EventLog(path, projections=default_projections()) as log:
        ddl = [r[0] for r in log.read_connection().execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return hashlib.sha256(("\n".join(ddl) + GENERATOR).encode()).hexdigest()[:12]


class Clock:
    """The log's clock: the generator moves it batch by batch."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def _events(rng: random.Random, book: PriceBook, sid: str, n: int, provider: str,
            model: str, at: datetime) -> list[NewEvent]:
    """One call's CallAdmitted and CallCompleted."""
    side = n % 20 == 19
    called = SIDE[provider] if side else model
    cached = rng.randrange(0, 40_000)
    usage = CanonicalUsage(
        source="estimated" if n % 100 == 50 else "provider",
        input_tokens=rng.randrange(200, 8_000), cache_read_tokens=cached,
        output_tokens=rng.randrange(20, 2_000))
    priced = cost(usage, book.lookup(provider, called, at=at))
    call_id = f"{sid}-{n:04d}"
    return [
        new_event(CallAdmitted(call_id=call_id, provider=provider, model=called,
                               message_count=2 * n + 2, estimated_tokens=usage.prompt_tokens,
                               purpose="summary" if side else "",
                               parent_call=f"{sid}-{n - 1:04d}" if side else "")),
        new_event(CallCompleted(
            call_id=call_id, status=200, latency_ms=round(rng.uniform(300, 9000), 3),
            credential=KEYS[provider][n % 2], input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
            source=usage.source,
            cost=None if priced.amount is None else str(priced.amount),
            cost_status=priced.status, cost_source=priced.source,
            cost_version=priced.version)),
    ]


def build(calls: int, results: Path) -> Path:
    """The cached ledger of ``calls`` calls in ``results`` (built if missing; module doc)."""
    results.mkdir(exist_ok=True)
    path = results / f"ledger-{calls}-{marker(results)}.db"
    if path.exists():
        return path
    building = path.with_suffix(".building")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    book = PriceBook(Config(providers=(
        ProviderConfig(name="anthropic", base_url="https://api.anthropic.com/v1"),
        ProviderConfig(name="openai", base_url="https://api.openai.com/v1"),
        ProviderConfig(name="local", base_url="http://127.0.0.1:8000/v1"))))
    rng = random.Random(12)
    weighted = [m for m in MODELS for _ in range(m[2])]
    batches = max(1, calls // (LIVE * PER_BATCH))
    step = timedelta(days=30) / batches
    clock = Clock()
    live: dict[str, tuple[str, str, int]] = {}  # session -> provider, model, calls made
    made, sessions, started = 0, 0, time.perf_counter()
    with EventLog(building, projections=default_projections(), clock=clock) as log:
        for batch in range(batches):
            clock.now = START + step * batch
            parts = []
            while len(live) < LIVE:
                sid = f"bench-{sessions:06d}"
                provider, model, _ = rng.choice(weighted)
                live[sid] = (provider, model, 0)
                sessions += 1
            for sid, (provider, model, done) in list(live.items()):
                events = [new_event(SessionStarted(model=f"{provider}/{model}",
                                                   client="bench/1.0"))] if done == 0 else []
                for n in range(done, done + PER_BATCH):
                    events += _events(rng, book, sid, n, provider, model, clock.now)
                parts.append(StreamAppend(session_stream(sid), tuple(events)))
                done += PER_BATCH
                if done >= PER_SESSION:
                    del live[sid]
                else:
                    live[sid] = (provider, model, done)
            log.append_batch(parts)
            made += LIVE * PER_BATCH
            if batch and batch % 50 == 0:
                rate = made / (time.perf_counter() - started)
                print(f"  built {made:,} calls ({rate:,.0f} calls/s)", file=sys.stderr,
                      flush=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    building.rename(path)
    print(f"built {made:,} calls over {sessions:,} sessions in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return path


def run_cli(*argv: str) -> str:
    """``sessionwarden *argv`` in this process; its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(list(argv))
    assert code == 0, f"usage exited {code}"
    return out.getvalue()


def bare(db: Path, table: str) -> Callable[[], object]:
    counted = "count(*)" if table == "view_ledger" else "sum(calls)"
    sql = (f"SELECT day, {counted}, sum(input_tokens), sum(output_tokens),"
           " sum(cache_read_tokens), sum(cache_write_tokens), sum(reasoning_tokens),"
           f" group_concat(cost, ' ') FROM {table} GROUP BY day")
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    return lambda: conn.execute(sql).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where the ledger is built and kept (default bench/results)")
    args = parser.parse_args()
    if args.calls < LIVE * PER_BATCH:
        parser.error(f"--calls: at least {LIVE * PER_BATCH}")
    db = build(args.calls, args.results)
    with EventLog(db, readonly=True) as log:
        conn = log.read_connection()
        rows = conn.execute("SELECT count(*) FROM view_ledger").fetchone()[0]
        sums = conn.execute("SELECT count(*) FROM view_ledger_daily").fetchone()[0]
        sid = conn.execute("SELECT session_id FROM view_ledger ORDER BY seq DESC"
                           " LIMIT 1").fetchone()[0]
    print(f"ledger: {db.name}, {db.stat().st_size / 1e6:,.0f} MB, {rows:,} calls, "
          f"{sums:,} rows of daily sums; load average {os.getloadavg()[0]:.2f}")
    raw = ("--since", "2000-01-01T00:00:01")
    modes: dict[str, Callable[[], object]] = {
        "day": lambda: run_cli("usage", "--db", str(db), "--by", "day", "--json"),
        "day-calls": lambda: run_cli("usage", "--db", str(db), "--by", "day", "--json", *raw),
        "session": lambda: run_cli("usage", "--db", str(db), "--by", "session",
                                   "--session", sid),
        "session-calls": lambda: run_cli("usage", "--db", str(db), "--by", "session",
                                         "--session", sid, *raw),
        "bare-day": bare(db, "view_ledger"),
        "bare-sums": bare(db, "view_ledger_daily"),
    }
    same = modes["day"]() == modes["day-calls"]()
    print(f"usage --by day --json: the same answer from the sums and from the calls: "
          f"{'yes' if same else 'NO'}")
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, mode in modes.items():
            t0 = time.perf_counter()
            mode()
            times[name].append(time.perf_counter() - t0)
    print(f"{args.rounds} rounds, wall ms (median, min-max):")
    for name, values in times.items():
        ms = [v * 1000 for v in values]
        print(f"{name:<14} {statistics.median(ms):9.1f} ms  ({min(ms):.1f}-{max(ms):.1f})")
    print("per-round ratios (median):")
    for slow, fast in (("day-calls", "day"), ("session-calls", "session"),
                       ("day-calls", "bare-day"), ("day", "bare-sums")):
        ratios = [s / f for f, s in zip(times[fast], times[slow], strict=True)]
        print(f"{slow + '/' + fast:<24} {statistics.median(ratios):8.2f}x")
    day, session = (statistics.median(times[m]) for m in ("day", "session"))
    print(f"target: usage --by day --json <= 1 s: {day:.3f} s, "
          + ("met" if day <= 1 else "MISSED"))
    print(f"target: usage --by session --session ID <= 50 ms: {session * 1000:.1f} ms, "
          + ("met" if session <= 0.05 else "MISSED"))
    cmd = [sys.executable, "-m", "sessionwarden.cmd.cli.main", "usage", "--db", str(db),
           "--by", "day", "--json"]
    for label, argv in (("subprocess: sessionwarden usage --by day --json", cmd),
                        ("subprocess: python -c 'import sessionwarden.cmd.cli.main'",
                         [sys.executable, "-c", "import sessionwarden.cmd.cli.main"])):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        print(f"{label}: {(time.perf_counter() - t0) * 1000:.0f} ms (one run)")


if __name__ == "__main__":
    main()
