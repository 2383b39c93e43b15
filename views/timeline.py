"""One session's timeline: its calls and the decisions taken for them, read from its stream.

The live page's view of a session (``cmd/daemon/ui``): one entry per recorded fact, in
order, with the call it belongs to, so the page can link a call to its replay.

Rules:

- Entries: a call admitted (model, estimated size), completed (status, tokens, cost,
  failovers), refused (stage, reason), or a decision recorded for a call (a spill, a
  compaction and what it saved, a summariser failure, a history reset, the grace call,
  a guardrail), worded as ``replay --call`` words them
  (:func:`~sessionwarden.views.sent_requests.decision_line`).
- Text from the log is returned as it is; the page inserts it as text, never as markup.
"""

from typing import Any

from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    CompactionRequested,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
    Event,
    GuardrailTripped,
    HistoryReset,
    IterationCounted,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog
from sessionwarden.views.sent_requests import DECISIONS, decision_line

__all__ = ["MAX_ENTRIES", "read_timeline"]

#: The latest entries a timeline shows at most.
MAX_ENTRIES = 500

#: What kind of entry each decision is, for the page's colours and filters.
_KINDS = {ToolResultSpilled: "spill", ContextCompressed: "compaction",
          SummariserFailed: "failure", HistoryReset: "reset", CallResent: "failover",
          CompressionPreparing: "compaction", CompressionPrepared: "compaction",
          CompressionDropped: "compaction"}


def _entry(event: Event, at: str, replayable: set[str]) -> dict[str, Any] | None:
    kind, text = "", ""
    call = getattr(event, "call_id", "")
    if isinstance(event, CallAdmitted):
        if event.request is not None:
            replayable.add(event.call_id)
        if event.purpose:
            kind, text = "side", decision_line(event)
        else:
            kind = "call"
            text = (f"admitted for {event.provider}/{event.model}: {event.message_count} "
                    f"items, ~{event.estimated_tokens:,} tokens"
                    + (" (streamed)" if event.stream else ""))
    elif isinstance(event, CallCompleted):
        kind = "done" if event.outcome in ("ok", "answered") else "error"
        prompt = event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
        cost = "cost unknown" if event.cost is None else f"${event.cost}"
        text = (f"{event.outcome} {event.status or '-'} in {event.latency_ms:,.0f} ms: "
                f"{'~' if event.source == 'estimated' else ''}{prompt:,} in "
                f"({event.cache_read_tokens:,} cached) + {event.output_tokens:,} out, {cost}")
        if event.attempts:
            text += "; failed over from " + ", ".join(
                f"{a.credential[:8]} ({a.status or a.error_class})" for a in event.attempts)
        if event.error_class:
            text += f"; {event.error_class}"
    elif isinstance(event, CallRefused):
        kind, text = "refused", f"refused at {event.stage} ({event.status}): {event.reason}"
    elif isinstance(event, DECISIONS):
        if isinstance(event, CallResent) and event.request is not None:
            replayable.add(event.call_id)
        kind, text = _KINDS[type(event)], decision_line(event)
    elif isinstance(event, IterationCounted) and not event.child:
        if event.decision == "forward":
            return None
        kind = "runaway"
        text = {"grace": f"iteration {event.used} of {event.limit}: grace call, tools off",
                "answer": "the daemon answered itself: the turn's budget is spent",
                "stop": "the daemon answered itself: a guardrail stopped the turn"}.get(
            event.decision, event.decision)
    elif isinstance(event, GuardrailTripped):
        kind = "runaway"
        text = (f"guardrail {event.rule} {'stopped' if event.stopped else event.level}"
                + (f" ({event.tool}, {event.count}×)" if event.tool else f" ({event.count}×)"))
    elif isinstance(event, CompactionRequested):
        kind, text = "compaction", "compaction requested" + (
            f", focus {event.focus!r}" if event.focus else "")
    else:
        return None
    return {"at": at, "kind": kind, "call_id": call, "text": text}


def read_timeline(log: EventLog, session_id: str, limit: int = MAX_ENTRIES,
                  after: int = 0) -> dict[str, Any] | None:
    """The session's latest ``limit`` entries, oldest first; None for an unknown session.

    Each entry: ``at`` (recorded, ISO 8601), ``kind`` (call, done, error, refused, spill,
    compaction, failure, reset, failover, side, runaway), ``call_id``, ``text``, and
    ``replay`` true on the entry that admitted a call whose request the log can rebuild.
    ``version`` is the stream's version read up to: a page asks again with ``after`` set
    to it and gets only what came since (a long session is not read whole every second).
    """
    entries: list[dict[str, Any]] = []
    replayable: set[str] = set()
    seen, version = 0, after
    for recorded in log.read_stream(session_stream(session_id), after):
        seen += 1
        version = recorded.version
        if not CODEC.knows(recorded.type):
            continue
        entry = _entry(CODEC.decode(recorded.type, recorded.data), recorded.recorded_at,
                       replayable)
        if entry is not None:
            entries.append(entry)
    if not seen and not after:
        return None
    for entry in entries:
        entry["replay"] = entry["kind"] == "call" and entry["call_id"] in replayable
    return {"session_id": session_id, "entries": entries[-limit:], "version": version,
            "omitted": max(0, len(entries) - limit)}
