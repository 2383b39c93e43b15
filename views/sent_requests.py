"""One call's request rebuilt from the log, byte for byte, with what was decided for it.

Read by ``replay --session ID --call N`` (``cmd/cli/replay_call.py``) and by the live
page's replay of a call (``cmd/daemon/ui``).

Rules:

- The session's stream holds, per governed call, a CallAdmitted whose ``request`` names
  what was sent by content keys (the body's other fields and the system messages when
  they changed, and only the messages the call added to an earlier call's governed
  history); :func:`~sessionwarden.domain.context.transcript.sent_items` follows that
  chain back, the contents come from the log's ``contents`` table, and
  :func:`~sessionwarden.domain.context.transcript.assemble_body` joins them into the
  body, byte for byte what went upstream.
- Next to it: the decisions recorded for the call in the same stream (spills,
  compression, summariser failures, history resets, the summariser's own side calls),
  the model it was admitted for and the fingerprint of the key that served it.
- A content that is not in the log (recording was off for that call, or it is missing)
  is shown as ``{"key": …, "size": …}`` in its place. :func:`render_json` passes
  through the redactor (a body never holds a key, but a log may hold anything).
- :func:`content_references` tells ``replay --verify`` which contents an event refers to.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sessionwarden.domain.context.transcript import assemble_body, sent_items
from sessionwarden.domain.errors import BrokenChain
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContentRef,
    ContextCompressed,
    Event,
    EventError,
    HistoryReset,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.redact import default_redactor
from sessionwarden.store import EventLog
from sessionwarden.text import json_safe, printable
from sessionwarden.views.errors import NotReplayable

__all__ = ["DECISIONS", "SentRequest", "completeness", "content_references", "decision_line",
           "rebuild", "render_json"]

_json = msgspec.json.Encoder()

#: The events that explain a call's request, besides its admission and completion.
DECISIONS = (ToolResultSpilled, ContextCompressed, SummariserFailed, HistoryReset,
              CallResent, CompressionPreparing, CompressionPrepared, CompressionDropped)


def content_references(event: Event) -> Iterator[str]:
    """The content keys ``event`` refers to that the log must hold (for ``--verify``)."""
    record = event.request if isinstance(event, CallAdmitted | CallResent) else None
    if record is not None and record.stored:
        withheld = set(record.withheld)
        refs = (*([record.fields] if record.fields else ()), *(record.system or ()),
                *record.appended)
        for key, _ in refs:
            if key not in withheld:
                yield key
    elif isinstance(event, CompressionPrepared) and event.compacted.stored:
        compacted = event.compacted
        withheld = set(compacted.withheld)
        keys = [key for (key, _), source in zip(compacted.appended, compacted.sources,
                                                 strict=True) if source < 0]
        yield from (key for key in dict.fromkeys((*keys, event.summary[0], event.state[0]))
                    if key not in withheld)


@dataclass
class SentRequest:
    """One call's request as rebuilt from the log, with what was decided for it."""

    session_id: str
    call_id: str
    number: int  # 1-based, among the session's calls that recorded a request
    calls: int
    body: bytes
    messages: int
    missing: list[str]
    recorded: bool  # False: message recording was off for this call
    provider: str = ""
    model: str = ""
    credential: str = ""
    outcome: str = ""
    decisions: list[Event] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # held an API key: never stored


def rebuild(log: EventLog, session_id: str, call: str) -> SentRequest:
    """The request ``call`` (a 1-based number or a call id) of ``session_id`` sent.

    Raises:
        NotReplayable: no such session or call, or the recorded chain is broken.
    """
    events = _decoded(log, session_id)
    if not events:
        raise NotReplayable(printable(f"no session {session_id!r} in this log"))
    # A call's latest record is what it sent last (a resend's, if it was resent): the
    # record later calls build on, and the request shown.
    records = {e.call_id: e.request for e in events
               if isinstance(e, CallAdmitted | CallResent) and e.request is not None}
    order = list(records)
    call_id = _resolve(session_id, call, order, {
        e.call_id for e in events if isinstance(e, CallAdmitted | CallRefused)})
    try:
        fields_ref, items_key, system, history = sent_items(call_id, records.get)
    except BrokenChain as exc:
        raise NotReplayable(printable(f"cannot rebuild call {call_id}: {exc}")) from None
    record = records[call_id]
    refs = [fields_ref, *system, *history]
    stored = log.read_contents(key for key, _ in refs)
    missing = list(dict.fromkeys(key for key, _ in refs if key not in stored))
    everywhere = {key for r in records.values() for key in r.withheld}
    withheld = [key for key in missing if key in everywhere]
    items = [_content(stored, ref) for ref in (*system, *history)]
    fields = stored.get(fields_ref[0])
    if fields is None:
        fields = _json.encode({"fields_not_recorded": _ref_object(fields_ref)})
    sent = SentRequest(
        session_id=session_id, call_id=call_id, number=order.index(call_id) + 1,
        calls=len(order), body=assemble_body(fields, items_key, items),
        messages=len(items), missing=missing, recorded=record.stored, withheld=withheld,
    )
    for event in events:
        if isinstance(event, CallAdmitted) and event.call_id == call_id:
            sent.provider, sent.model = event.provider, event.model
        elif isinstance(event, CallCompleted) and event.call_id == call_id:
            sent.credential, sent.outcome = event.credential, event.outcome
        elif isinstance(event, DECISIONS) and event.call_id == call_id:
            sent.decisions.append(event)
        elif isinstance(event, CallAdmitted) and event.parent_call == call_id:
            sent.decisions.append(event)  # a side call made for it (the summariser)
    return sent


def _decoded(log: EventLog, session_id: str) -> list[Event]:
    """The session's events this version knows, decoded, in order."""
    out: list[Event] = []
    for recorded in log.read_stream(session_stream(session_id)):
        if not CODEC.knows(recorded.type):
            continue  # written by a newer version: nothing this command needs
        try:
            out.append(CODEC.decode(recorded.type, recorded.data))
        except EventError as exc:
            raise NotReplayable(printable(
                f"event {recorded.seq} cannot be decoded ({exc}); "
                "`sessionwarden replay --verify` audits the log")) from None
    return out


def _resolve(session_id: str, call: str, order: list[str], known: set[str]) -> str:
    """The call id ``call`` names: a call id of the session, or a 1-based number."""
    if call in order:
        return call
    if call in known:
        raise NotReplayable(printable(
            f"call {call} of session {session_id} has no recorded request "
            "(refused, or made before requests were recorded)"))
    if not order:
        raise NotReplayable(printable(f"session {session_id} has no recorded request"))
    if call.isdigit():
        number = int(call)
        if 1 <= number <= len(order):
            return order[number - 1]
        raise NotReplayable(printable(
            f"session {session_id} has {len(order)} recorded request"
            f"{'s' if len(order) > 1 else ''}: --call takes 1 to {len(order)} or a call id"))
    raise NotReplayable(printable(f"no call {call!r} in session {session_id}"))


def _ref_object(ref: ContentRef) -> dict[str, Any]:
    return {"key": ref[0], "size": ref[1]}


def _content(stored: dict[str, bytes], ref: ContentRef) -> bytes:
    """The content of ``ref``, or ``{"key": …, "size": …}`` in its place."""
    found = stored.get(ref[0])
    return _json.encode(_ref_object(ref)) if found is None else found


def decision_line(event: Event) -> str:
    """One line saying what ``event`` decided."""
    if isinstance(event, ToolResultSpilled):
        where = f"tool result of message {event.message}" + (
            f" ({event.tool})" if event.tool else "")
        if event.truncated:
            return (f"{where} cut inline: {event.chars:,} chars; the spill file could not "
                    f"be written ({event.error})")
        return (f"{where} spilled over its {event.reason} limit: {event.chars:,} chars to "
                f"{event.file}, {event.preview_chars:,} chars kept as preview")
    if isinstance(event, ContextCompressed):
        focus = f", focus {event.focus!r}" if event.focus else ""
        by = event.summariser + (f" ({event.model})" if event.model else "")
        return (f"compressed ({event.trigger}{focus}): {event.tokens_before:,} -> "
                f"{event.tokens_after:,} tokens ({event.source}), threshold "
                f"{event.threshold:,}; {event.messages_before} -> {event.messages_after} "
                f"messages, {event.summarised} summarised by {by}, {event.pruned} pruned"
                + (f"; prepared ahead (waited {event.waited_ms} ms)" if event.prepared else "")
                + (f"; cache write ~${event.cache_write_usd}, saves "
                   f"${event.saved_usd_per_call} a later call" if event.cache_write_usd else ""))
    if isinstance(event, CompressionPreparing):
        return (f"past the prepare mark: the compression of its {event.messages} messages "
                f"(~{event.tokens:,} tokens) is prepared ahead")
    if isinstance(event, CompressionPrepared):
        return (f"compression prepared ahead: {event.messages_before} messages, "
                f"{event.tokens_before:,} -> {event.tokens_after:,} tokens, "
                f"{event.summarised} summarised by {event.model or event.summariser}")
    if isinstance(event, CompressionDropped):
        return f"compression prepared ahead dropped: {event.reason}"
    if isinstance(event, SummariserFailed):
        return (f"summariser {event.model} failed ({event.reason}): {event.action}, "
                f"cooldown {event.cooldown_s:g} s")
    if isinstance(event, HistoryReset):
        return f"history reset: {event.reason} ({event.matched} messages still matched)"
    if isinstance(event, CallResent):
        return f"resent after {event.reason}: the request shown is the second one"
    if isinstance(event, CallAdmitted):
        return f"side call {event.call_id} ({event.purpose}): {event.provider}/{event.model}"
    return type(event).type_tag()  # pragma: no cover - every decision type is above


def _decision_json(event: Event) -> dict[str, Any]:
    # Every field, defaults included: a reader should not have to know them.
    fields: dict[str, Any] = msgspec.to_builtins(msgspec.structs.asdict(event))
    return {"event": type(event).type_tag(), **fields}


def completeness(sent: SentRequest) -> str:
    if not sent.missing:
        return ""
    if sent.withheld and len(sent.withheld) == len(sent.missing):
        return (f"{len(sent.withheld)} content(s) held an API key the daemon uses and were "
                'not stored (shown as {"key", "size"})')
    if not sent.recorded:
        return ("message recording was off for this call: contents not in the log are "
                'shown as {"key", "size"}')
    return (f"{len(sent.missing)} content(s) missing from the log, shown as "
            '{"key", "size"}; `sessionwarden replay --verify` audits the log')


def render_json(sent: SentRequest) -> str:
    """One JSON object; ``request`` is the body exactly as sent (last, spliced in)."""
    head = {
        "session_id": sent.session_id, "call_id": sent.call_id, "number": sent.number,
        "provider": sent.provider, "model": sent.model, "credential": sent.credential,
        "outcome": sent.outcome, "decisions": [_decision_json(d) for d in sent.decisions],
        "complete": not sent.missing, "recorded": sent.recorded, "missing": sent.missing,
    }
    # The body is valid JSON: splicing it in keeps every byte of it, where decoding and
    # re-encoding could change number spellings or escapes.
    text = _json.encode(head)[:-1] + b',"request":' + sent.body + b"}"
    return default_redactor.redact(json_safe(text.decode(errors="replace"))) + "\n"


