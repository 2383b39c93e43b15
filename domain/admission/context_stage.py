"""The context stage: keeps what reaches the model inside its window (issue 11).

One admission stage, pure, over the session's :class:`~sessionwarden.domain.context.history.
GovernedHistory`. For each call, in order:

1. **Recognise** the resent history: the request's leading system items are taken as
   they are; the others are hashed and compared with the governed history's client
   digests. A matching prefix is forwarded as it was forwarded last time, byte for
   byte; a mismatch is recorded (:class:`~sessionwarden.events.HistoryReset`) and the
   whole request is governed afresh. Only the items not seen before are decoded. A
   request that continues a response stored at the provider (``CallRequest.continues``,
   a Responses ``previous_response_id``) holds new items only: it is not recognised
   against the session's history, and its items are governed on their own.
2. **Spill** the new items' tool results over their limits, and per assistant turn the
   largest while the turn is over its budget (``domain.context.spill``). Writing the files is
   I/O: the stage asks for it (:class:`SpillWork`, a ``Need``) and resumes with which
   writes failed; a failed one falls back to inline truncation with a marker.
3. **Compress** when the best token figure (``domain.context.trigger``) reaches the model's
   trigger, or when the control API asked: phases 1, 2 and 4 (``domain.context.prune``,
   ``domain.context.boundaries``) around a summary of the middle
   (``domain.context.summary``'s builtin summariser, or a model's through
   :mod:`sessionwarden.domain.context.compression`).
4. **Record**: a :class:`~sessionwarden.events.RequestRecord` (CallAdmitted's
   ``request``) names by content key what is sent (the new contents go to the store in
   the same append), and the request goes on with the governed items and the estimate
   of what is sent.

The stage never mutates the session's state: the new governed history, guard and
threshold travel with the admitted request (:class:`ContextUpdate`) and the session's
actor adopts them once the admission is durable.
"""

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
from sessionwarden.config import Config
from sessionwarden.domain.admission.ahead import PriceOf
from sessionwarden.domain.admission.compression_stage import compress_step
from sessionwarden.domain.admission.pipeline import Need, Proceed, Refuse, StageResult
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.boundaries import natively_compacted
from sessionwarden.domain.context.compression import summary_state, tokens_of
from sessionwarden.domain.context.conversation import Conversation, ItemCodec
from sessionwarden.domain.context.history import (
    ContextUpdate,
    GovernedHistory,
    Item,
    digest,
    recognise,
)
from sessionwarden.domain.context.markers import carry_markers, identities
from sessionwarden.domain.context.messages import Message, Text
from sessionwarden.domain.context.spill import resolve_limits
from sessionwarden.domain.context.spill_turns import (
    SpillOutcome,
    SpillPlan,
    SpillWork,
    apply_spills,
    mark_evicted,
    plan_spills,
)
from sessionwarden.domain.context.transcript import content_ref
from sessionwarden.domain.context.trigger import estimate_tokens
from sessionwarden.domain.session import SessionState
from sessionwarden.events import ContextCompressed, Event, HistoryReset, RequestRecord

__all__ = ["ContextSettings", "govern"]


def _nothing(data: bytes) -> bool:
    return False


def _same(text: str) -> str:
    return text


class ContextSettings(NamedTuple):
    """What the stage needs from outside: the config, where spills go, what to record.

    ``holds_secret`` says whether a content holds an API key the daemon uses (the
    redactor's registered secrets, injected): such a content is sent, as the client
    wrote it, but never stored in the log. ``scrub`` replaces the secrets of a tool
    result about to be spilled (the redactor, injected): a spill file never holds one.
    ``evicted`` holds the names of the spill files evicted since (a live view of the
    spill keeper's memory, injected): a forwarded stand-in naming one is re-rendered.
    """

    config: Config
    spill_dir: str
    record_messages: bool = True
    holds_secret: Callable[[bytes], bool] = _nothing
    scrub: Callable[[str], str] = _same
    evicted: Collection[str] = frozenset()
    #: The price of a model (the runtime's price book), for what a compaction costs in
    #: cache; None: not priced.
    price: PriceOf | None = None


class _Call(NamedTuple):
    """One admission in progress: what the stage has read and decided so far."""

    request: CallRequest
    conversation: Conversation
    system: list[bytes]
    rest: Sequence[bytes]
    digests: list[bytes]
    #: Positions in ``rest`` of the items that may carry a cache marker.
    marked: frozenset[int]
    base: GovernedHistory
    kept: int
    events: list[Event]
    system_refs: tuple[tuple[str, int], ...]


def _leading_system(codec: ItemCodec, items: Sequence[bytes]) -> int:
    count = 0
    for raw in items:
        if not codec.is_system(raw):
            break
        count += 1
    return count


def govern(settings: ContextSettings, state: SessionState, request: CallRequest,
           now: datetime) -> StageResult:
    """The context stage (module doc); ``default_pipeline`` binds ``settings``."""
    conversation = request.body
    if not isinstance(conversation, Conversation) or request.reply is not None:
        # A wire format without a conversation adapter yet, or a call the daemon answers
        # itself (the runaway stage): nothing is sent, so nothing is governed.
        return Proceed(request)
    codec = conversation.codec
    items = conversation.items
    leading = _leading_system(codec, items)
    rest = items[leading:]
    # Identities, not exact digests: a client moving its cache marker onto the newest
    # message each round (Claude Code) still resends the same history.
    digests, with_marker = identities(rest)
    events: list[Event] = []
    history = state.context.history if state.context is not None else None
    if request.continues:
        # The rest of its history is stored at the provider: the request's items are
        # all new, governed on their own (spilled, never compressed: compress_step).
        history = None
    elif history is not None:
        recognition = recognise(history, digests)
        if recognition.reason:
            events.append(HistoryReset(call_id=request.call_id, reason=recognition.reason,
                                       matched=recognition.matched))
            history = None
    elif state.calls:
        events.append(HistoryReset(call_id=request.call_id, reason="not rebuilt from the log: "
                                   + (state.lost or "no governed history")))
    base = history or GovernedHistory()
    kept = len(base.items)
    # A stand-in whose spill file was evicted since it was sent says so from now on: the
    # items from the first such one are forwarded (and recorded) anew.
    marked = mark_evicted(base, settings.evicted, codec, settings.spill_dir)
    if marked is not None:
        base, kept = marked
    new = rest[len(base.client):]
    messages: list[Message] = []
    for offset, raw in enumerate(new):
        read = codec.read_item(raw)
        if isinstance(read, str):
            position = leading + len(base.client) + offset
            return Refuse(400, f"messages[{position}]: {read}", code="invalid_request",
                          events=tuple(events))
        messages.append(read)
    system = list(items[:leading])
    call = _Call(request, conversation, system, rest, digests, with_marker, base, kept, events,
                 tuple(content_ref(raw) for raw in system))
    model = settings.config.model_for(request.provider, request.model)
    limits = resolve_limits(settings.config.tools, model.context_length if model else None)
    plan = plan_spills(messages, limits, settings.spill_dir, first=leading + len(base.client),
                       scrub=settings.scrub)
    if not plan.files:
        return _extend(settings, state, call, messages, plan, SpillOutcome(), now)

    def resume(result: object) -> StageResult:
        outcome = result if isinstance(result, SpillOutcome) else SpillOutcome(
            failed={f.name: "the spill could not be written" for f in plan.files})
        return _extend(settings, state, call, messages, plan, outcome, now)

    return Need(SpillWork(plan.files), resume)


def _extend(settings: ContextSettings, state: SessionState, call: _Call,
            messages: list[Message], plan: SpillPlan, outcome: SpillOutcome,
            now: datetime) -> StageResult:
    """Append the new items (spilled as decided) and compress if the figure says so."""
    codec = call.conversation.codec
    governed, spill_events = apply_spills(plan, outcome, messages, codec, call.request.call_id)
    base = call.base
    first = len(base.client)
    new_items = tuple(
        Item(digest(raw), len(raw), tokens_of(message), raw, -1, origin=first + offset)
        if raw is not None
        else Item(call.digests[first + offset], len(call.rest[first + offset]),
                  tokens_of(message), None, first + offset)
        for offset, (message, raw) in enumerate(governed)
    ) + _notices(codec, call.request.notices)
    history = GovernedHistory(
        client=(*base.client, *call.digests[first:]), items=(*base.items, *new_items),
        call_id=base.call_id, tokens=base.tokens + sum(i.tokens for i in new_items),
        compressed=base.compressed, summary=base.summary, fields=base.fields,
        system=base.system,
        unread=_unread(base, governed, new_items))
    system_tokens = _system_tokens(call)
    # What is not governed history: the fields (tool schemas, as JSON) and system items.
    fixed = estimate_tokens(0, len(call.conversation.fields_bytes)) + system_tokens

    def done(history: GovernedHistory, kept: int, events: list[Event],
             update: ContextUpdate) -> StageResult:
        return _record(settings, call, history, kept, events, update, fixed, system_tokens)

    return compress_step(settings.config, state, call.request, call.rest, codec, history,
                         call.kept, [*call.events, *spill_events], fixed, now, done,
                         known=[message for message, _ in governed], price=settings.price)


def _notices(codec: ItemCodec, notices: Sequence[str]) -> tuple[Item, ...]:
    """The runaway stage's notices, as items of the daemon's after the call's new ones.

    Kept in the governed history like a summary (no client item stands for them), so the
    next call forwards them where they were: the forwarded history stays append-only.
    """
    items = []
    for text in notices:
        message = Message(role="user", parts=(Text(text),))
        raw = codec.write_item(message)
        items.append(Item(digest(raw), len(raw), tokens_of(message), raw, -1))
    return tuple(items)


def _unread(base: GovernedHistory, governed: Sequence[tuple[Message, bytes | None]],
            new_items: Sequence[Item]) -> int | None:
    """``unread`` after appending: a provider's compaction among the new items moves it.

    Only the new items are looked at (already read), so a long history costs nothing
    here; an unknown base stays unknown for the compression step to scan once.
    """
    unread = base.unread if base.items else 0
    tokens = base.tokens
    # The notices after them (``_notices``) are never a compaction.
    for (message, _), item in zip(governed, new_items[:len(governed)], strict=True):
        if natively_compacted(message):
            unread = tokens
        tokens += item.tokens
    return unread


def _system_tokens(call: _Call) -> int:
    """Tokens of the system items; the same items as the last call's are not read again."""
    # A history rebuilt from the log knows its system items' refs, not their estimate.
    if call.system_refs == call.base.system and (call.base.system_tokens
                                                 or not call.system_refs):
        return call.base.system_tokens
    system = 0
    for raw in call.system:
        read = call.conversation.codec.read_item(raw)
        if not isinstance(read, str):
            system += tokens_of(read)
    return system


def _rebuild_fields(history: GovernedHistory, kept: int, covered: int) -> dict[str, Any]:
    """The record's fields a restart rebuilds the governed history from (RequestRecord).

    ``covered``: how many client items the history covered before this call (0 after a
    reset); the ones it covers now that no appended item forwards unchanged are named
    by digest, since nothing else in the log says what they were.
    """
    added = history.items[kept:]
    sourced = {item.source for item in added}
    return {"tokens": tuple(item.tokens for item in added),
            "sources": tuple(item.source for item in added),
            "covers": len(history.client),
            "replaced": tuple(history.client[i].hex()
                              for i in range(covered, len(history.client))
                              if i not in sourced),
            # A client item sent with a marker is stored under its exact bytes' key: the
            # identity that recognises it is named too.
            "marked": tuple((position, item.digest.hex()) for position, item in enumerate(added)
                            if item.source >= 0 and item.key)}


def _forward(history: GovernedHistory, rest: Sequence[bytes], marked: frozenset[int],
             kept: int) -> tuple[GovernedHistory, list[bytes], int]:
    """The bytes to forward for each item, the history with their keys, and ``kept``.

    A client item is forwarded as the client sends it now (its cache marker where the
    client put it); a stand-in gets its client item's current marker, or none
    (:func:`~sessionwarden.domain.context.markers.carry_markers`). An item whose bytes
    differ from what was forwarded last (a marker moved) is no longer the base call's:
    ``kept`` shrinks to it, so the record names exactly the bytes sent. ``marked``: the
    positions of the client items that may hold a marker (found when they were digested),
    so no item's bytes are searched twice in one call.
    """
    items = list(history.items)
    sent: list[bytes] = []
    for index, item in enumerate(items):
        if item.raw is None:
            data = rest[item.source]
            key = digest(data) if item.source in marked else item.digest
        else:
            # A spilled item's client version is large: only a marked one is read again.
            client = rest[item.origin] if item.origin in marked else None
            data = carry_markers(item.raw, client)
            key = item.digest if data is item.raw else digest(data)
        if key != (item.key or item.digest):
            kept = min(kept, index)
            items[index] = item._replace(key=b"" if key == item.digest else key)
        sent.append(data)
    return history._replace(items=tuple(items)), sent, kept


def _record(settings: ContextSettings, call: _Call, history: GovernedHistory, kept: int,
            events: list[Event], update: ContextUpdate, fixed: int, system_tokens: int
            ) -> StageResult:
    """The request to forward, and its record (CallAdmitted's) with its new contents."""
    request = call.request
    history, sent, kept = _forward(history, call.rest, call.marked, kept)
    fields = call.conversation.fields_bytes
    fields_ref = content_ref(fields)
    system_refs = call.system_refs
    # Most calls send the fields and system messages of the call before: named once.
    same_base = kept > 0
    record = RequestRecord(
        fields=None if same_base and fields_ref == history.fields else fields_ref,
        items_key=call.conversation.codec.items_key,
        system=None if same_base and system_refs == history.system else system_refs,
        base=history.call_id if same_base else "", kept=kept,
        appended=tuple(((item.key or item.digest).hex(), len(data))
                       for item, data in zip(history.items[kept:], sent[kept:], strict=True)),
        stored=settings.record_messages,
        **_rebuild_fields(history, kept, len(call.base.client)),
    )
    contents: tuple[tuple[str, bytes], ...] = ()
    if settings.record_messages:
        candidates = [(ref[0], raw) for ref, raw in zip(record.appended, sent[kept:],
                                                         strict=True)]
        if record.system is not None:
            candidates[:0] = [(ref[0], raw) for ref, raw in zip(system_refs, call.system,
                                                                strict=True)]
        if record.fields is not None:
            candidates.insert(0, (fields_ref[0], fields))
        # A compression's summary state (what the next one updates) is stored with it.
        candidates.extend(summary_state(e, history) for e in events
                          if isinstance(e, ContextCompressed) and e.state[0])
        contents = tuple(c for c in candidates if not settings.holds_secret(c[1]))
        if len(contents) < len(candidates):
            kept_keys = {key for key, _ in contents}
            record = msgspec.structs.replace(record, withheld=tuple(dict.fromkeys(
                key for key, _ in candidates if key not in kept_keys)))
    history = history._replace(call_id=request.call_id, fields=fields_ref, system=system_refs,
                               system_tokens=system_tokens)
    update = update._replace(history=history)
    shape = msgspec.structs.replace(request.shape,
                                    prompt_tokens=fixed + history.tokens - update.unread,
                                    message_count=len(call.system) + len(sent))
    governed = msgspec.structs.replace(
        request, shape=shape, body=call.conversation.with_items([*call.system, *sent]),
        context=update, contents=contents, record=record)
    return Proceed(governed, tuple(events))
