"""The runaway stage on a 2,000-message history: what it adds to a call (issue 25).

Run ``.venv/bin/python bench/runaway.py [--rounds N]``. The input is
``../shared/bench/hermes_session.json.gz`` (a real tool-heavy session, 2,001 messages).
The stage (``domain.admission.runaway_stage``) is run as the session's actor runs it,
on the chat-completions adapter's reading of the request:

* (i) incremental: the session counted the call before (its ``SessionState.turn`` and
  the turn's guards in memory, as after any admitted call); this call adds the history's
  last two messages: what every call of a running agent costs;
* (f) from the log only: the same call, the turn folded from the log but the guards not
  in memory (the first call after a restart or an unloaded session): the turn's items are
  read once to fold its guards again;
* (d) ``msgspec.json.decode`` of the request body, the same reference ``context_resend``
  uses.

CPU time of this process, medians over rounds, each mode once a round. Target: (i) ≤ 1 ms
and O(new messages): it must not grow with the history (``--sizes`` runs it on prefixes).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.config import Config
from sessionwarden.domain.admission.pipeline import Proceed
from sessionwarden.domain.admission.runaway_stage import RunawaySettings, govern_runaway
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState
from sessionwarden.upstream.chat_completions import ChatCompletions

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT.parent / "shared" / "bench" / "hermes_session.json.gz"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
_WIRE = ChatCompletions()
_SETTINGS = RunawaySettings.from_config(Config())


def request(messages: list[dict[str, Any]], call_id: str) -> tuple[bytes, CallRequest]:
    """The body and the CallRequest the proxy builds for ``messages``."""
    body = msgspec.json.encode({"model": "gpt-test", "messages": messages})
    conversation, shape = _WIRE.read_request(body)
    conversation.fields_bytes, _ = _WIRE.upstream_fields(conversation.fields, "gpt-test",
                                                         False)
    return body, CallRequest(call_id=call_id, session_id="bench", provider="fake",
                             model="gpt-test", api_mode="chat_completions", shape=shape,
                             body=conversation)


def counted(req: CallRequest) -> SessionState:
    """A session whose last counted call was ``req`` (its events folded, guards adopted)."""
    state = SessionState("bench", started=True)
    verdict = govern_runaway(_SETTINGS, state, req, NOW)
    assert isinstance(verdict, Proceed)
    for event in verdict.events:
        state.fold(event)
    state.guards = verdict.request.guards
    return state


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def run(messages: list[dict[str, Any]], rounds: int) -> dict[str, float]:
    _, before = request(messages[:-2], "c1")
    body, after = request(messages, "c2")
    warm = counted(before)
    cold = counted(before)
    cold.guards = None  # as recovered from the log: the turn, not the guards
    times: dict[str, list[float]] = {"i": [], "f": [], "d": []}
    for _ in range(rounds):
        times["i"].append(cpu(lambda: govern_runaway(_SETTINGS, warm, after, NOW)))
        times["f"].append(cpu(lambda: govern_runaway(_SETTINGS, cold, after, NOW)))
        times["d"].append(cpu(lambda: msgspec.json.decode(body)))
    return {mode: statistics.median(values) for mode, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sizes", default="250,1000,2001")
    args = parser.parse_args()
    messages: list[dict[str, Any]] = msgspec.json.decode(gzip.decompress(SESSION.read_bytes()))
    print(f"runaway stage, CPU ms per call, medians of {args.rounds} rounds")
    print(f"{'messages':>9} {'(i) incremental':>16} {'(f) from the log':>17} "
          f"{'(d) decode':>11} {'i/d':>6}")
    for size in (int(s) for s in args.sizes.split(",")):
        found = run(messages[:size], args.rounds)
        print(f"{size:>9} {found['i']:>16.3f} {found['f']:>17.3f} {found['d']:>11.3f} "
              f"{found['i'] / found['d']:>6.3f}")
    print("target: (i) <= 1 ms at 2,001 messages, flat in the history's length")


if __name__ == "__main__":
    main()
