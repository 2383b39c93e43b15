"""The call that crosses the trigger, with a compression prepared ahead and with none.

Run ``.venv/bin/python bench/prepared.py [--rounds N] [--delay-ms MS]``. Issue 23's target:
with the model summariser, the call that crosses the compression trigger with a prepared
compression takes at most 5 % of the summary call's duration more than an ordinary call
(the summary it used to wait for: here the fake's answer takes 2 s).

A real daemon in this process (``tests/cmd/inprocess.py``'s ``InProcessDaemon``: the
``Runtime``, its actors and the event log on a file, the HTTP app under uvicorn on
127.0.0.1) in front of the fake upstream (``FakeProviderServer``, in this process too),
model ``small`` (16K window, trigger 12,750 tokens, prepare mark 80 % of it) and::

    [compression]
    summariser = "model"
    summary_model = "fake/sum-model"     # the fake answers it after --delay-ms (2,000)
    prepare_ahead = true                 # mode A; false in mode B (summary made inline)

Each mode plays the tool-heavy agent session of ``tests/cmd/test_context_e2e.py``
(``agent_session``: 1-3 parallel tool results of 20-60 lines a turn, the whole history
resent each call) from a fresh database until the call whose admission records
``context.compressed.v2`` (ContextCompressed): the crossing call. In mode A, after the
call that records ``context.compression_preparing.v1``, the next call waits until
``context.compression_prepared.v1`` is in the log, as an agent thinking between calls would.
Calls are plain ``POST /v1/chat/completions`` from one ``httpx.Client`` (keep-alive),
timed in wall time (``perf_counter``) client to client.

Per mode and round: the crossing call's latency, the median of the ordinary calls before
it (all but the session's first), added = crossing - ordinary, and the summary side
call's own duration (its CallCompleted ``latency_ms``). Each round runs both modes, each
on a fresh database and daemon (one fake upstream for the run), A first in odd rounds and
B first in even ones. Medians over rounds; the target is median(added A) / summary
duration ≤ 5 %. Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from loguru import logger
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from proxy import loadavg, log  # noqa: E402

from tests.cmd.inprocess import InProcessDaemon  # noqa: E402
from tests.cmd.test_context_e2e import SMALL, agent_session  # noqa: E402
from tests.support.fake_provider import FakeProviderServer  # noqa: E402

SUMMARY = "## Goal\n- fix the failing test suite\n## Done\n- found a stale fixture"
TARGET = 0.05


def config(ahead: bool) -> str:
    return ('[compression]\nsummariser = "model"\nsummary_model = "fake/sum-model"\n'
            f"prepare_ahead = {'true' if ahead else 'false'}\n" + SMALL)


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def wait_for(daemon: InProcessDaemon, session: str, kind: type, timeout: float) -> float:
    """Poll the log until an event of type ``kind``; seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if any(isinstance(e, kind) for e in events(daemon, session)):
            return time.perf_counter() - started
        time.sleep(0.01)
    raise SystemExit(f"no {kind.__name__} in {timeout} s")


class Run(msgspec.Struct):
    """One mode's session: what was measured."""

    ordinary: list[float]
    crossing: float
    call_index: int
    summary_ms: float
    waited_ms: int
    prepared: bool
    prep_wait: float
    preparing_index: int

    @property
    def base(self) -> float:
        return med(self.ordinary)

    @property
    def added(self) -> float:
        return self.crossing - self.base


def play(fake: FakeProviderServer, db: Path, ahead: bool, delay_ms: int,
         turns: int) -> Run:
    """Play the agent until the crossing call; its latency and the others'."""
    fake.state.clear()
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": delay_ms}
    daemon = InProcessDaemon(db, fake, extra_config=config(ahead)).start()
    session = "prepared" if ahead else "inline"
    latencies: list[float] = []
    prep_wait = 0.0
    preparing_index = 0
    settle = ahead
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}/v1", timeout=60,
                          headers={"Authorization": f"Bearer {daemon.token}",
                                   "X-Session-Id": session}) as client:
            for messages in agent_session(turns):
                body = msgspec.json.encode({"model": "small", "messages": messages})
                t0 = time.perf_counter()
                r = client.post("/chat/completions", content=body,
                                headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise SystemExit(f"call {len(latencies)}: HTTP {r.status_code}: "
                                     f"{r.text[:300]}")
                found = events(daemon, session)
                done = [e for e in found if isinstance(e, ContextCompressed)]
                if done:
                    break
                if settle and any(isinstance(e, CompressionPreparing) for e in found):
                    preparing_index = len(latencies)
                    prep_wait = wait_for(daemon, session, CompressionPrepared, 60)
                    settle = False
            else:
                raise SystemExit(f"no ContextCompressed in {turns + 2} calls")
        found = events(daemon, session)
    finally:
        daemon.stop()
    [compressed] = done
    sides = {e.call_id for e in found if isinstance(e, CallAdmitted) and e.purpose}
    summary = [e.latency_ms for e in found if isinstance(e, CallCompleted)
               and e.call_id in sides]
    if ahead and not any(isinstance(e, CompressionPrepared) for e in found):
        log("  WARNING: mode A crossed the trigger with no CompressionPrepared")
    if not ahead and any(isinstance(e, CompressionPreparing) for e in found):
        log("  WARNING: mode B prepared a compression ahead")
    return Run(ordinary=latencies[1:-1], crossing=latencies[-1], call_index=len(latencies),
               summary_ms=med(summary), waited_ms=compressed.waited_ms,
               prepared=compressed.prepared, prep_wait=prep_wait,
               preparing_index=preparing_index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (A then B each)")
    parser.add_argument("--delay-ms", type=int, default=2000,
                        help="how long the fake takes to answer the summary (default 2,000)")
    parser.add_argument("--turns", type=int, default=60, help="agent turns at most")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    logger.remove()  # the daemon's INFO lines would drown the table; warnings stay
    logger.add(sys.stderr, level="WARNING")
    log(f"prepared ahead (A) vs summary inline (B): {args.rounds} rounds, summary answered "
        f"after {args.delay_ms} ms; {loadavg()}")
    runs: dict[str, list[Run]] = {"A": [], "B": []}
    with FakeProviderServer() as fake, tempfile.TemporaryDirectory(prefix="sw-prep-") as tmp:
        for r in range(args.rounds):
            for mode in ("A", "B") if r % 2 == 0 else ("B", "A"):
                db = Path(tmp) / f"{mode}-{r}" / "events.db"
                db.parent.mkdir()
                run = play(fake, db, mode == "A", args.delay_ms, args.turns)
                runs[mode].append(run)
                log(f"round {r + 1} {mode}: crossing call #{run.call_index} "
                    f"{run.crossing * 1e3:8.1f} ms, ordinary median {run.base * 1e3:6.1f} ms "
                    f"({len(run.ordinary)} calls, {min(run.ordinary) * 1e3:.1f}–"
                    f"{max(run.ordinary) * 1e3:.1f}), added {run.added * 1e3:+8.1f} ms; "
                    f"summary call {run.summary_ms:.0f} ms; prepared={run.prepared} "
                    f"waited_ms={run.waited_ms}"
                    + (f"; preparing at call #{run.preparing_index}, then waited "
                       f"{run.prep_wait * 1e3:.0f} ms for CompressionPrepared"
                       if mode == "A" else "")
                    + f"; {loadavg()}")
    log(f"\nmedians over {args.rounds} rounds, wall ms:")
    log(f"  {'mode':28s} {'ordinary':>9s} {'crossing':>9s} {'added':>9s} {'summary call':>13s}")
    for mode, name in (("A", "A prepared ahead"), ("B", "B summary inline")):
        xs = runs[mode]
        log(f"  {name:28s} {med([x.base for x in xs]) * 1e3:9.1f} "
            f"{med([x.crossing for x in xs]) * 1e3:9.1f} {med([x.added for x in xs]) * 1e3:+9.1f}"
            f" {med([x.summary_ms for x in xs]):13.0f}")
    added_a = [x.added for x in runs["A"]]
    share = [a / (args.delay_ms / 1e3) for a in added_a]
    measured = [x.added / (x.summary_ms / 1e3) for x in runs["A"] if x.summary_ms > 0]
    saved = [b.added - a.added for a, b in zip(runs["A"], runs["B"], strict=True)]
    log(f"added A / summary duration ({args.delay_ms} ms): {med(share) * 100:.2f} % "
        f"(per round: {', '.join(f'{s * 100:.2f}' for s in share)}; target ≤ "
        f"{TARGET * 100:.0f} %: {'met' if med(share) <= TARGET else 'MISSED'})")
    log(f"added A / the summary call's measured duration: {med(measured) * 100:.2f} %")
    log(f"added B - added A (what preparing ahead takes off the crossing call): "
        f"{med(saved) * 1e3:.0f} ms (median of per-round differences)")
    log(f"\n{loadavg()}")


if __name__ == "__main__":
    main()
