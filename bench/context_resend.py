"""Context governance of a resent history, and a daemon's memory with many long sessions.

Run ``.venv/bin/python bench/context_resend.py [--rounds N] [--sessions N] [--parallel N]``.
The input is ``../shared/bench/hermes_session.json.gz`` (a real tool-heavy session, 2,001
messages, 7.3 MB; see its README), sent as an OpenAI client sends it: one JSON body
``{"model": ..., "messages": [...]}``. Two sections (issue 11, "Speed and memory"):

**resend** (in this process). The body goes once through the daemon's real admission
pipeline (``domain.admission.stages.default_pipeline``: validation, then the context stage)
as ``cmd/daemon/proxy/relay.py`` and ``actors/session.py`` run it: the chat-completions
adapter reads it, the spill files the stage asks for are written
(``store.spill.SpillStore``, a temporary directory) and the stage resumed, the verdict's
events folded and its context adopted. Then the same history plus one new user message, in
rounds (each mode once a round, CPU time of this process, medians over rounds):

* (a) ``msgspec.json.decode`` of that request body: the target's reference;
* (b) the adapter's ``read_request`` of it, its upstream fields and the ``CallRequest``:
  what the HTTP layer does before admission;
* (c) ``Pipeline.run`` of that request over the governed state (re-adopted each round;
  the stage is pure and does not mutate it): recognition of the resent prefix by hashes,
  the new message read and recorded.

Target: (c) ≤ (a), as the median of the per-round ratios. ``--profile`` prints where (c)
spends its time (it is printed anyway when the target is missed). Also printed: the cold
first admission, and the Python objects a governed session keeps (``tracemalloc``).

**memory** (a real daemon). ``sessionwarden daemon`` and the fake upstream, set up as in
``bench/proxy.py`` (model ``gpt-test``, 128K window, default ``[daemon]`` and context
settings). The daemon's RSS (``VmRSS`` of ``/proc/<pid>/status``) when idle, after the whole
session was sent in each of ``--sessions`` sessions (``X-Session-Id`` ``mem-000`` …,
``--parallel`` calls at a time; read after each quarter of them, so a plateau shows), then
after one resend each (history plus one message).
Also: the database's growth (used pages, as ``bench/callsize.py`` reads them) and the events
written by type, the spill directory's size, and the calls' latencies. Target: RSS with
100 live sessions ≤ 250 MB above idle. Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import gzip
import io
import itertools
import os
import pstats
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import msgspec
from sessionwarden.config import Config, parse_config
from sessionwarden.domain.admission.pipeline import (
    Admitted,
    Pending,
    Pipeline,
    Verdict,
    verdict_events,
)
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.history import ContextUpdate
from sessionwarden.domain.context.spill_turns import SpillOutcome, SpillWork
from sessionwarden.domain.session import SessionState
from sessionwarden.events import IterationCounted
from sessionwarden.store.errors import SpillUnavailable
from sessionwarden.store.spill import SpillStore
from sessionwarden.upstream.chat_completions import ChatCompletions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callsize import used_bytes
from proxy import SW_MODEL, TOKEN, Proc, loadavg, log, start_daemon, start_fake

ROOT = Path(__file__).resolve().parent.parent
SESSION = ROOT.parent / "shared" / "bench" / "hermes_session.json.gz"
#: Timed in CPU time of this process: on a shared 2-core machine, wall time counts
#: whatever else runs (``bench/context.py`` does the same).
CLOCK = time.process_time
#: The message a resend adds to the history.
NEW_MESSAGE = {"role": "user", "content": "Thanks. Now run the whole test suite again and "
               "commit the fix with a message that says what changed and why."}
#: The same model as the daemon of ``bench/proxy.py``: 128K window, default settings.
CONFIG = f"""
[[providers]]
name = "fake"
base_url = "http://127.0.0.1:9/v1"
keys = ["env:BENCH_UNUSED_KEY"]
[[models]]
name = "{SW_MODEL}"
provider = "fake"
context_length = 128000
"""
TARGET_RSS_MB = 250.0


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def load_messages(path: Path, count: int | None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = msgspec.json.decode(gzip.decompress(path.read_bytes()))
    return messages[:count] if count else messages


def bodies(messages: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    """The request body of the whole history, and of a resend of it with one new message."""
    first = msgspec.json.encode({"model": SW_MODEL, "messages": messages})
    resend = msgspec.json.encode({"model": SW_MODEL, "messages": [*messages, NEW_MESSAGE]})
    return first, resend


# -- resend: the context stage in this process ------------------------------------------------

_WIRE = ChatCompletions()


def call_request(body: bytes, call_id: str) -> CallRequest:
    """What the proxy (``cmd/daemon/proxy/relay.py``) builds before admission."""
    conversation, shape = _WIRE.read_request(body)
    conversation.fields_bytes, _ = _WIRE.upstream_fields(conversation.fields, SW_MODEL,
                                                         shape.stream)
    return CallRequest(call_id=call_id, session_id="bench", provider="fake", model=SW_MODEL,
                       api_mode="chat_completions", shape=shape, body=conversation)


def admit(pipeline: Pipeline, state: SessionState, request: CallRequest, store: SpillStore,
          now: datetime) -> Verdict:
    """Run admission to its verdict, writing the spill files it asks for."""
    verdict = pipeline.run(state, request, now)
    while isinstance(verdict, Pending):
        assert isinstance(verdict.work, SpillWork), verdict.work
        failed: dict[str, str] = {}
        for spill in verdict.work.files:
            try:
                store.put(spill.data)
            except SpillUnavailable as exc:
                failed[spill.name] = str(exc)
        verdict = pipeline.resume(verdict, SpillOutcome(failed), state, now)
    return verdict


def adopt(state: SessionState, verdict: Verdict) -> ContextUpdate:
    """What the session's actor does with an admission (``actors/session.py``)."""
    if not isinstance(verdict, Admitted):
        raise SystemExit(f"the history was not admitted: {verdict!r}")
    for event in verdict_events(state, verdict):
        state.fold(event)
    update = verdict.request.context
    assert isinstance(update, ContextUpdate)
    state.adopt(update)
    return update


def retained(pipeline: Pipeline, body: bytes, store: SpillStore, now: datetime) -> int:
    """Bytes of Python objects a session's state keeps after its first admission."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = SessionState("retained")
        adopt(state, admit(pipeline, state, call_request(body, "call-1"), store, now))
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def event_names(verdict: Verdict) -> str:
    """The context's events of a verdict (the runaway stage's count of the call aside)."""
    names: dict[str, int] = {}
    for event in verdict.events:
        if isinstance(event, IterationCounted):
            continue
        names[type(event).__name__] = names.get(type(event).__name__, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in names.items()) or "none"


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    gc.collect()
    t0 = CLOCK()
    out = fn()
    return CLOCK() - t0, out


def profile(fn: Callable[[], object], lines: int = 14) -> None:
    prof = cProfile.Profile()
    prof.runcall(fn)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(lines)
    log("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])


def resend_section(args: argparse.Namespace, messages: list[dict[str, Any]]) -> None:
    config: Config = parse_config(CONFIG)
    first, resend = bodies(messages)
    log(f"\n== resend: governance of a resent history ({len(messages):,} messages, "
        f"{len(first) / 1e6:.2f} MB body; resend {len(resend) / 1e6:.2f} MB) ==")
    with tempfile.TemporaryDirectory(prefix="sw-resend-") as tmp:
        spill_dir = Path(tmp) / "spill"
        pipeline = default_pipeline(config, str(spill_dir))
        store = SpillStore(spill_dir)
        state = SessionState("bench")
        now = datetime.now(UTC)
        t0, w0 = CLOCK(), time.perf_counter()
        verdict = admit(pipeline, state, call_request(first, "call-1"), store, now)
        cold_cpu, cold_wall = CLOCK() - t0, time.perf_counter() - w0
        update = adopt(state, verdict)
        history = update.history
        assert isinstance(verdict, Admitted)
        sent = sum(len(raw) for raw in verdict.request.body.items)
        log(f"first call (cold, spill files written): {cold_cpu * 1e3:.0f} ms CPU, "
            f"{cold_wall * 1e3:.0f} ms wall; events: {event_names(verdict)}")
        log(f"  governed history: {len(history.client):,} client items covered, "
            f"{len(history.items)} forwarded ({sent / 1e3:,.1f} KB with the system items), "
            f"{history.tokens:,} estimated tokens, {history.compressed} compression(s)")
        del verdict
        log(f"  memory a governed session keeps (Python objects, tracemalloc): "
            f"{retained(pipeline, first, store, now) / 1024:,.0f} KB")

        decode_t: list[float] = []
        read_t: list[float] = []
        govern_t: list[float] = []
        checked = ""
        for r in range(args.warmup + args.rounds):
            call_id = f"call-{r + 2}"
            a, _ = timed(lambda: msgspec.json.decode(resend))
            b, request = timed(partial(call_request, resend, call_id))
            assert isinstance(request, CallRequest)
            state.adopt(update)
            c, outcome = timed(partial(pipeline.run, state, request, now))
            assert isinstance(outcome, Admitted | Pending)
            checked = event_names(outcome)
            if r >= args.warmup:
                decode_t.append(a)
                read_t.append(b)
                govern_t.append(c)
        log(f"resend events (each round): {checked}")
        if isinstance(outcome, Pending) or checked != "none":
            log("  WARNING: the resend was not recognised as the governed history plus one "
                "message: the figures below are not those of a resend")
        ratio = med([c / a for a, c in zip(decode_t, govern_t, strict=True) if a > 0])
        both = med([(b + c) / a for a, b, c in zip(decode_t, read_t, govern_t, strict=True)
                    if a > 0])
        log(f"{args.rounds} rounds after {args.warmup} warm-up, CPU ms "
            "(median, min–max over rounds):")
        for name, xs in (("(a) msgspec.json.decode(body)", decode_t),
                         ("(b) read_request + fields + CallRequest", read_t),
                         ("(c) Pipeline.run (the governance)", govern_t)):
            log(f"  {name:42s} {med(xs) * 1e3:8.2f}   ({min(xs) * 1e3:.2f}–"
                f"{max(xs) * 1e3:.2f})")
        verdict_text = "met" if ratio <= 1 else "MISSED"
        log(f"(c)/(a) governance / decode: {ratio:.2f}x (target ≤ 1: {verdict_text})")
        log(f"((b)+(c))/(a) the proxy's whole handling before sending / decode: {both:.2f}x")
        if args.profile or ratio > 1:
            log("\nprofile of (c), by own time:")
            state.adopt(update)
            request = call_request(resend, "call-profile")
            profile(lambda: pipeline.run(state, request, now))


# -- memory: a real daemon with many sessions -------------------------------------------------


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of ``pid``, in MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(root, name))
    return files, size


def send_all(client: httpx.Client, url: str, body: bytes, sessions: range,
             parallel: int) -> list[float]:
    """POST ``body`` once in each of ``sessions``; the calls' wall latencies in seconds."""

    def one(i: int) -> float:
        t0 = time.perf_counter()
        r = client.post(url, content=body, headers={"X-Session-Id": f"mem-{i:03d}",
                                                    "Content-Type": "application/json"})
        if r.status_code != 200:
            raise SystemExit(f"session mem-{i:03d}: HTTP {r.status_code}: {r.text[:300]}")
        return time.perf_counter() - t0

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, sessions))


def memory_section(args: argparse.Namespace, messages: list[dict[str, Any]]) -> None:
    first, resend = bodies(messages)
    log(f"\n== memory: one daemon, {args.sessions} sessions of {len(messages):,} messages "
        f"({len(first) / 1e6:.2f} MB body), {args.parallel} call(s) at a time ==")
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="sw-resend-mem-") as tmp:
        workdir = Path(tmp)
        try:
            _, fake_url = start_fake(workdir, procs)
            daemon, url, db = start_daemon(workdir, fake_url, procs)
            spill_dir = db.parent / "spill"
            url += "/chat/completions"
            time.sleep(1.0)
            rows: list[tuple[str, dict[str, float], int, dict[str, int]]] = []
            quarters: list[tuple[int, float]] = []  # (sessions sent, RSS MB)

            def point(name: str) -> None:
                time.sleep(0.5)
                used, counts, _ = used_bytes(db)
                rows.append((name, proc_status(daemon.pid), used, counts))

            point("idle (started)")
            with httpx.Client(timeout=300.0,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                small = msgspec.json.encode({"model": SW_MODEL, "messages": [NEW_MESSAGE]})
                client.post(url, content=small, headers={
                    "X-Session-Id": "warm-up", "Content-Type": "application/json"}
                ).raise_for_status()
                point("idle (after one small call)")
                # Quarters: whether RSS grows with the sessions or levels off shows.
                firsts: list[float] = []
                bounds = sorted({args.sessions * q // 4 for q in range(5)})
                for low, high in itertools.pairwise(bounds):
                    firsts += send_all(client, url, first, range(low, high), args.parallel)
                    point(f"after the history in {high} sessions")
                    quarters.append((high, rows[-1][1]["VmRSS"]))
                resends = send_all(client, url, resend, range(args.sessions), args.parallel)
                point("after one resend each")
            spills = tree_size(spill_dir)
            db_files = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
        finally:
            for proc in reversed(procs):
                proc.stop()
    idle = rows[0][1]["VmRSS"]
    log(f"{'point':34s} {'RSS MB':>8s} {'above idle':>11s} {'peak MB':>8s} "
        f"{'db used MB':>11s}")
    for name, status, used, _ in rows:
        log(f"{name:34s} {status['VmRSS']:8.1f} {status['VmRSS'] - idle:+11.1f} "
            f"{status['VmHWM']:8.1f} {used / 2**20:11.2f}")
    live = rows[-1][1]["VmRSS"] - idle
    if len(quarters) >= 2:
        # Most of the growth comes with the first sessions (the allocator keeps what the
        # first 7 MB bodies needed); the slope after them is what a session adds.
        (sent0, rss0), (sent1, rss1) = quarters[0], quarters[-1]
        log(f"RSS from the first quarter to all sessions: {rss1 - rss0:+.1f} MB for "
            f"{sent1 - sent0} more sessions ({(rss1 - rss0) / (sent1 - sent0):+.2f} MB a "
            "session)")
    per = live / args.sessions
    # The target is for 100 sessions; fewer are scaled up (which overstates: the first
    # sessions also pay for what the daemon allocates once).
    scaled = per * 100
    how = "" if args.sessions == 100 else f"; scaled to 100: {scaled:.0f} MB"
    log(f"RSS above idle with {args.sessions} live sessions: {live:.1f} MB "
        f"({per:.2f} MB a session{how}; target ≤ {TARGET_RSS_MB:.0f} MB for 100: "
        f"{'met' if scaled <= TARGET_RSS_MB else 'MISSED'})")
    log(f"calls: first send p50 {med(firsts) * 1e3:.0f} ms (max {max(firsts) * 1e3:.0f}), "
        f"resend p50 {med(resends) * 1e3:.0f} ms (max {max(resends) * 1e3:.0f}), wall, "
        "client to client")
    for (_, _, used0, n0), (name, _, used1, n1) in itertools.pairwise(
            [rows[1], rows[-2], rows[-1]]):
        written = {t: n1[t] - n0.get(t, 0) for t in sorted(n1) if n1[t] != n0.get(t, 0)}
        log(f"{name}: database +{(used1 - used0) / 2**20:.2f} MB used; events "
            + ", ".join(f"{n} {t}" for t, n in written.items()))
    log(f"database files on disk at the end: {db_files / 2**20:.2f} MB (with the WAL); "
        f"spill directory: {spills[0]} files, {spills[1] / 2**20:.2f} MB")


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session", type=Path, default=SESSION, help="a gzipped JSON "
                        "list of chat messages (default: the shared Hermes session)")
    parser.add_argument("--messages", type=int, default=0,
                        help="use only the first N messages (default: all)")
    parser.add_argument("--rounds", type=int, default=15, help="timed resend rounds")
    parser.add_argument("--warmup", type=int, default=2, help="untimed resend rounds first")
    parser.add_argument("--sessions", type=int, default=100,
                        help="live sessions in the memory section")
    parser.add_argument("--parallel", type=int, default=2,
                        help="calls in flight at a time in the memory section")
    parser.add_argument("--profile", action="store_true",
                        help="print the profile of the resend's governance")
    parser.add_argument("--skip-resend", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.sessions < 1 or args.parallel < 1:
        parser.error("--rounds, --sessions and --parallel must be at least 1")
    messages = load_messages(args.session, args.messages or None)
    log(f"{args.session.name}: {len(messages):,} messages; {loadavg()}")
    if not args.skip_resend:
        resend_section(args, messages)
    if not args.skip_memory:
        memory_section(args, messages)
    log(f"\n{loadavg()}")


if __name__ == "__main__":
    main()
