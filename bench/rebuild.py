"""Rebuilding a session's governed history from the log, against its cold governance pass.

Run ``.venv/bin/python bench/rebuild.py [--rounds N] [--warmup N]``. Issue 23's target: rebuilding
the governed history of the 2,001-message session (``../shared/bench/hermes_session.json.gz``)
from the log costs no more than the cold governance pass of the same session (6.8 ms in
``bench/context.py``'s "ours" column), and makes no summary again. Model ``gpt-test``, 128K
window, default ``[compression]`` (builtin summariser), as ``bench/context_resend.py``.

Set up once (untimed), each stream in a real ``EventLog`` on a temporary SQLite file,
appended as ``actors/session.py``'s ``_conclude`` and ``_complete`` append:

* **one call**: the whole history as a first call (3 results spilled, one compression);
  ``verdict_events`` with the verdict's contents in the same ``StreamAppend``;
* **per turn**: the session played as its agent played it, one call per assistant
  message (the history up to it; 908 calls, then the whole 2,001-message history), each
  completed (CallCompleted with the prompt tokens as the provider's reading, so the
  guard and the calibration see real readings), 30 s of clock between calls.

Then in rounds, each mode once a round (``time.process_time``, CPU of this single-threaded
process; wall time of the same region printed beside it):

* (a) **cold**: ``Pipeline.run`` of the whole request over a fresh ``SessionState``, the
  spill files written into an emptied directory and the stage resumed (``admit`` of
  ``bench/context_resend.py``; the request is read before the clock starts);
* (b) **rebuild, one call**: ``SessionActor.load``'s work: ``recover`` over the decoded
  stream, ``log.read_contents(history.needs())``, ``resume``;
* (c) **rebuild, per turn**: the same over the per-turn stream (CPU per event printed).

Checked (printed): each rebuilt history equals the live one (client digests, items,
summary, forwarded bytes), and a profile of one rebuild calls none of the summariser's or
the compaction's functions. Ratios b/a and c/a are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.actors.messages import new_event
from sessionwarden.config import parse_config
from sessionwarden.domain.admission.pipeline import Admitted, Pipeline, verdict_events
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.calls import CallOutcome, complete_call
from sessionwarden.domain.session import SessionState, recover, resume, session_stream
from sessionwarden.events import CODEC
from sessionwarden.store import ANY, NO_STREAM, Content, EventLog, StreamAppend
from sessionwarden.store.spill import SpillStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from context_resend import CONFIG, SESSION, admit, call_request, load_messages
from proxy import SW_MODEL, loadavg, log

#: The cold pass of ``bench/context.py`` ("ours", whole session), the figure quoted.
ANCHOR_MS = 6.8
#: Functions whose call in a rebuild would mean a summary or a compaction made again.
FORBIDDEN = {"builtin_summary", "builtin", "finish", "prepare", "summary_request", "render",
             "prune", "plan_spills", "apply_spills", "choose_cut"}
CLOCK = time.process_time


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def body(messages: list[dict[str, Any]]) -> bytes:
    return msgspec.json.encode({"model": SW_MODEL, "messages": messages})


class Played:
    """A session admitted call by call into ``log``, as the session's actor does it."""

    def __init__(self, log: EventLog, pipeline: Pipeline, store: SpillStore, sid: str) -> None:
        self.log, self.pipeline, self.store = log, pipeline, store
        self.state = SessionState(sid)
        self.stream = session_stream(sid)
        self.now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
        self.calls = 0

    def call(self, messages: list[dict[str, Any]], complete: bool) -> Admitted:
        state = self.state
        self.calls += 1
        call_id = f"call-{self.calls}"
        request = call_request(body(messages), call_id)
        request = msgspec.structs.replace(request, session_id=state.session_id)
        verdict = admit(self.pipeline, state, request, self.store, self.now)
        if not isinstance(verdict, Admitted):
            raise SystemExit(f"call {self.calls} was not admitted: {verdict!r}")
        expected = ANY if state.started else NO_STREAM
        events = verdict_events(state, verdict)
        for event in events:
            state.fold(event)
        assert verdict.request.context is not None
        state.adopt(verdict.request.context)
        contents = tuple(Content(k, d) for k, d in verdict.request.contents)
        self.log.append_batch([StreamAppend(self.stream, tuple(new_event(e) for e in events),
                                            expected, contents=contents)])
        if complete:
            prompt = verdict.request.estimated_tokens
            done = complete_call(state, CallOutcome(
                call_id=call_id, session_id=state.session_id, outcome="success",
                provider="fake", status=200, latency_ms=900.0, has_output=True,
                output_chars=400, model=SW_MODEL, usage_block={
                    "prompt_tokens": prompt, "completion_tokens": 100,
                    "total_tokens": prompt + 100}), self.now, lambda s: s)
            state.fold(done)
            self.log.append_batch([StreamAppend(self.stream, (new_event(
                done, idempotency_key=f"done:{call_id}"),), ANY)])
        self.now += timedelta(seconds=30)
        return verdict


def stream_types(log: EventLog, stream: str) -> tuple[int, str]:
    """How many events ``stream`` holds, and how many of each type."""
    types: dict[str, int] = {}
    for record in log.read_stream(stream):
        types[record.type] = types.get(record.type, 0) + 1
    return sum(types.values()), ", ".join(
        f"{n} {t}" for t, n in sorted(types.items(), key=lambda x: -x[1]))


def rebuild(log: EventLog, sid: str) -> SessionState:
    """``SessionActor.load``: the state folded from its stream, its history from contents."""
    state, history = recover(sid, (
        (CODEC.decode(record.type, record.data), record.recorded_at)
        for record in log.read_stream(session_stream(sid))))
    needs = history.needs()
    resume(state, history, log.read_contents(needs) if needs else {})
    return state


def compare(name: str, live: SessionState, rebuilt: SessionState,
            client_items: list[bytes]) -> None:
    """Print whether the rebuilt history is the live one, field by field."""
    ours, theirs = live.context, rebuilt.context
    if ours is None or theirs is None:
        log(f"  {name}: NO HISTORY (live {ours is not None}, rebuilt {theirs is not None}; "
            f"lost: {rebuilt.lost!r})")
        return
    a, b = ours.history, theirs.history
    sent_a, sent_b = a.forwarded(client_items), b.forwarded(client_items)
    checks = {"client digests": a.client == b.client, "items": a.items == b.items,
              "summary": a.summary == b.summary, "compressions": a.compressed == b.compressed,
              "tokens": a.tokens == b.tokens, "fields/system refs":
              (a.fields, a.system) == (b.fields, b.system), "forwarded bytes": sent_a == sent_b,
              "guard": ours.guard == theirs.guard,
              "calls/open": (live.calls, set(live.open)) == (rebuilt.calls, set(rebuilt.open)),
              "calibration": live.calibration == rebuilt.calibration}
    ok = all(checks.values())
    log(f"  {name}: rebuilt = live: {'yes' if ok else 'NO'} ({len(b.client):,} client digests, "
        f"{len(b.items)} items forwarded, {sum(map(len, sent_b)) / 1e3:,.1f} KB, "
        f"{b.compressed} compression(s), {b.tokens:,} tokens)"
        + ("" if ok else "; differ: " + ", ".join(k for k, v in checks.items() if not v)))


def summary_check(name: str, fn: Callable[[], object]) -> None:
    """Profile one rebuild: which context functions ran; none that makes a summary."""
    prof = cProfile.Profile()
    prof.runcall(fn)
    called: dict[str, int] = {}
    for (path, _, func), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        if "/domain/context/" in path:
            called[f"{Path(path).stem}.{func}"] = row[1]
    bad = sorted(k for k in called if k.split(".")[-1] in FORBIDDEN)
    mine = {k: n for k, n in called.items()
            if k.split(".")[0] in ("compression", "summary", "summariser", "prune")}
    log(f"  {name}: summary or compaction made again: {'YES: ' + ', '.join(bad) if bad else 'no'}"
        f" (their modules' functions called: "
        + (", ".join(f"{k} x{n}" for k, n in sorted(mine.items())) or "none") + ")")


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    gc.collect()
    t0, w0 = CLOCK(), time.perf_counter()
    out = fn()
    return CLOCK() - t0, time.perf_counter() - w0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session", type=Path, default=SESSION)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    messages = load_messages(args.session, None)
    config = parse_config(CONFIG)
    log(f"{args.session.name}: {len(messages):,} messages; {loadavg()}")
    tmp = Path(tempfile.mkdtemp(prefix="sw-rebuild-"))
    try:
        spill_dir = tmp / "spill"
        pipeline = default_pipeline(config, str(spill_dir))
        store = SpillStore(spill_dir)
        whole = body(messages)
        conversation = call_request(whole, "x").body
        non_system = [raw for raw in conversation.items if not conversation.codec.is_system(raw)]

        t0 = time.perf_counter()
        one_log = EventLog(tmp / "one.db")
        one = Played(one_log, pipeline, store, "one")
        one.call(messages, complete=False)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        per_log = EventLog(tmp / "turns.db")
        per = Played(per_log, pipeline, store, "turns")
        for i in turns:
            per.call(messages[:i], complete=True)
        per.call(messages, complete=True)
        n_one, one_types = stream_types(one_log, one.stream)
        n_per, per_types = stream_types(per_log, per.stream)
        log(f"set up in {time.perf_counter() - t0:.1f} s wall:")
        log(f"  one call: {n_one} events: {one_types}")
        log(f"  per turn: {per.calls} calls (one per assistant message, then the whole "
            f"history), {n_per:,} events: {per_types}")
        log("checks:")
        compare("(b) one call", one.state, rebuild(one_log, "one"), non_system)
        compare("(c) per turn", per.state, rebuild(per_log, "turns"), non_system)
        summary_check("(b) one call", lambda: rebuild(one_log, "one"))
        summary_check("(c) per turn", lambda: rebuild(per_log, "turns"))

        cold: list[tuple[float, float]] = []
        one_t: list[tuple[float, float]] = []
        per_t: list[tuple[float, float]] = []
        for r in range(args.warmup + args.rounds):
            shutil.rmtree(spill_dir, ignore_errors=True)
            spill_dir.mkdir()
            request = call_request(whole, f"cold-{r}")
            fresh = SessionState("cold")
            a_cpu, a_wall, verdict = timed(
                lambda: admit(pipeline, fresh, request, store, one.now))  # noqa: B023
            assert isinstance(verdict, Admitted)
            b_cpu, b_wall, _ = timed(lambda: rebuild(one_log, "one"))
            c_cpu, c_wall, _ = timed(lambda: rebuild(per_log, "turns"))
            if r >= args.warmup:
                cold.append((a_cpu, a_wall))
                one_t.append((b_cpu, b_wall))
                per_t.append((c_cpu, c_wall))
        one_log.close()
        per_log.close()
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    log(f"\n{args.rounds} rounds after {args.warmup} warm-up, ms (median, min–max over rounds):")
    log(f"  {'mode':44s} {'CPU':>8s} {'(min–max)':>16s} {'wall':>8s}")
    for name, xs in (("(a) cold pass: Pipeline.run + spills", cold),
                     (f"(b) rebuild, one call ({n_one} events)", one_t),
                     (f"(c) rebuild, per turn ({n_per:,} events)", per_t)):
        cpu = [x[0] * 1e3 for x in xs]
        log(f"  {name:44s} {med(cpu):8.2f} {f'({min(cpu):.2f}–{max(cpu):.2f})':>16s} "
            f"{med([x[1] * 1e3 for x in xs]):8.2f}")
    per_event = med([c[0] / n_per * 1e6 for c in per_t])
    log(f"  (c) per event: {per_event:.1f} µs CPU")
    for name, xs in (("b", one_t), ("c", per_t)):
        ratios = [x[0] / a[0] for x, a in zip(xs, cold, strict=True)]
        log(f"{name}/a rebuild / cold pass, CPU: {med(ratios):.4f}x "
            f"(per round {min(ratios):.4f}–{max(ratios):.4f}; target ≤ 1: "
            f"{'met' if med(ratios) <= 1 else 'MISSED'}); "
            f"against the {ANCHOR_MS} ms anchor: {med([x[0] for x in xs]) * 1e3 / ANCHOR_MS:.3f}x")
    log(f"\n{loadavg()}")


if __name__ == "__main__":
    main()
