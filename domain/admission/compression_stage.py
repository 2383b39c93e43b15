"""The context stage's compression step: whether to compress, with which summariser.

``domain.admission.context_stage`` calls :func:`compress_step` once the new items are
appended to the governed history. It decides on the best token figure
(``domain.context.trigger``: the trigger, the calibrated estimate, the anti-thrashing
guard), on the prompt cache gone cold past the prepare mark, or on a compression asked
for through the control API, then compresses (``domain.context.compression``).

Rules:

- ``summariser = "builtin"``: at once, deterministic;
- ``summariser = "model"``: the stage needs a summary from a model
  (:class:`~sessionwarden.domain.context.summariser.SummaryWork`, a side call the proxy makes and
  the ledger meters); it resumes with the result. On a failure — or while the model is
  cooling down after failures (``domain.context.summariser``'s ladder) — ``on_summary_failure``
  decides: ``"fallback"`` inserts the builtin summary, ``"abort"`` forwards the history
  uncompressed, or refuses the call when that cannot fit the model's window; a summary
  whose worst case does not fit a spend cap is not asked for (``SummaryResult.over_cap``)
  and the builtin summary stands in, whatever ``on_summary_failure`` says, recorded in
  SummariserFailed. No message is ever dropped without a summary covering it. A
  session's very first call uses the builtin summariser: a side call cannot be the call
  that starts a session; with a compression prepared ahead for this history
  (``domain.admission.ahead``), it is applied instead, without a summary call (a
  preparation still running is waited for up to ``prepare_wait_s``).

A prompt that cannot fit the window with its answer's reserve (``domain.context.trigger``'s
``prompt_room``) is compressed whatever the anti-thrashing guard says, and when even
compressed it does not fit (or compression is off, or found nothing to summarise) the
call is refused before sending: 400 ``context_length_exceeded``, naming the sizes. No
request is forwarded that cannot fit its model's window. A request that continues a
stored chain is never compressed (its history is the provider's): the chain's tokens as
the log knows them (``CallRequest.carried_tokens``) and its new items must fit together,
else it is refused the same way, saying how to go on.

Each outcome is recorded: ContextCompressed, SummariserFailed (with the cooldown).
"""

from collections.abc import Callable, Sequence
from datetime import datetime

from sessionwarden.config import Config
from sessionwarden.domain.admission.ahead import (
    PriceOf,
    applied,
    cache_costs,
    cold_cache,
    preparation,
    ready,
    summary_target,
)
from sessionwarden.domain.admission.pipeline import Need, Refuse, StageResult
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.boundaries import unread_tokens
from sessionwarden.domain.context.compression import (
    MIN_SAVING,
    Compaction,
    Prepared,
    builtin,
    encode_summary,
    finish,
    prepare,
)
from sessionwarden.domain.context.conversation import ItemCodec
from sessionwarden.domain.context.history import ContextUpdate, GovernedHistory
from sessionwarden.domain.context.messages import Message
from sessionwarden.domain.context.prepared import (
    AwaitPreparation,
    Preparation,
    PreparedCompression,
    applies,
    apply_prepared,
)
from sessionwarden.domain.context.summariser import (
    SummariserHealth,
    SummaryResult,
    SummaryWork,
    available,
    cooldown_seconds,
    lift_cooldown,
    record_failure,
    record_success,
    summary_request,
)
from sessionwarden.domain.context.summary import Summary, render
from sessionwarden.domain.context.transcript import content_key, content_ref
from sessionwarden.domain.context.trigger import (
    Calibration,
    CompressionGuard,
    calibrated,
    prompt_room,
    record_compression,
    should_compress,
    token_figure,
    trigger_tokens,
)
from sessionwarden.domain.cost.worst_case import requested_max_tokens
from sessionwarden.domain.session import SessionState
from sessionwarden.events import CompactionSkipped, ContextCompressed, Event, SummariserFailed

__all__ = ["Done", "compress_step"]

#: What the stage does with the (possibly compressed) history: record and proceed.
Done = Callable[[GovernedHistory, int, list[Event], ContextUpdate], StageResult]


def compress_step(config: Config, state: SessionState, request: CallRequest,
                  client_items: Sequence[bytes], codec: ItemCodec, history: GovernedHistory,
                  kept: int, events: list[Event], fixed: int, now: datetime,
                  done: Done, known: Sequence[Message] = (), *, wait: bool = True,
                  price: PriceOf | None = None) -> StageResult:
    """Compress ``history`` if due (module doc), then ``done(history, kept, events, update)``.

    ``kept`` is how many items of the previous call's history stay as they were (the
    record's ``kept``); a compression makes it 0. ``known``: the call's new items as
    governed, already read (a compression reads only the others). ``fixed`` is the
    estimate of what is not history (the fields, the system items). ``wait``: whether
    to wait for a preparation still running (not when resuming from such a wait).
    ``price`` prices the model, for the cache cost each compaction records.
    """
    compression = config.compression
    model = config.model_for(request.provider, request.model)
    threshold = trigger_tokens(model, compression)
    fields = getattr(request.body, "fields", None)
    window, reserve = prompt_room(model, requested_max_tokens(fields))
    fit = _Fit(request, window, reserve)
    context = state.context
    guard = context.guard if context is not None else CompressionGuard()
    health = context.health if context is not None else SummariserHealth()
    cal = state.calibration.get(request.model)
    # What precedes a provider's own compaction is dropped by the provider: counting it
    # would compress, or refuse, a history whose read part fits (the head keeps it, so a
    # compaction of ours leaves the same items unread).
    unread = history.unread
    if unread is None:  # once after a restart or a compression; else kept by the stage
        unread = unread_tokens(history.forwarded(client_items),
                               [item.tokens for item in history.items], codec.read_item)
        history = history._replace(unread=unread)
    figure = token_figure(cal or Calibration(), fixed + history.tokens - unread)
    requested = state.compaction
    update = ContextUpdate(history, guard, threshold, health, window, compression.enabled,
                           last_at=now, unread=unread)

    def unchanged(extra: list[Event]) -> StageResult:
        """Forward ``history`` as it is, if it fits the window."""
        if figure.tokens > fit.room:
            return fit.refuse(figure.tokens, [*events, *extra], compressed=False)
        return done(history, kept, [*events, *extra], update)

    if request.continues:
        # What the chain holds is the provider's to keep or compact, not ours: nothing
        # here to compress, but the chain and the new items must fit the window together.
        whole = figure.tokens + request.carried_tokens
        if whole > fit.room:
            return fit.refuse_chain(whole, events)
        return done(history, kept, events, update)
    if request.shape.native_compaction:
        # The client asked the provider to compact this very request: compacting it too
        # would summarise what the provider is about to summarise (and bust its cache).
        return unchanged([])
    due = compression.enabled and should_compress(guard, figure, threshold, fit.room).compress
    cold = not due and cold_cache(config, request, context, figure.tokens, threshold, now)
    trigger = "requested" if requested is not None else "cold_cache" if cold else "threshold"
    ahead, dropped = ready(state, history, request.call_id)
    rates = price(request.provider, request.model, now) if price is not None else None
    events = [*events, *dropped]

    def apply(prepared: PreparedCompression, waited_ms: int) -> StageResult | None:
        """The prepared compaction applied; None when it would not do (too little saved)."""
        compacted = apply_prepared(prepared, history)
        if compacted.tokens > history.tokens * MIN_SAVING:
            return None
        after = fixed + compacted.tokens - unread
        tokens_after = calibrated(cal, after) if cal else after
        if tokens_after > fit.room:
            return None
        event = applied(prepared, request, compacted, trigger=trigger, source=(
            "real" if figure.source == "calibrated" else "estimated"),
            tokens_before=figure.tokens, tokens_after=tokens_after, threshold=threshold,
            messages_before=len(history.items), waited_ms=waited_ms,
            costs=cache_costs(rates, tokens_after, figure.tokens - tokens_after))
        return done(compacted, 0, [*events, event], update._replace(
            history=compacted, guard=record_compression(guard)))

    if requested is None and (due or cold) and ahead is not None:
        result = apply(ahead, 0)
        if result is not None:
            return result
    elif requested is None and due and state.preparing and wait:
        # A preparation still running: wait for it a bounded while, then compact here.
        def resume_wait(result: object) -> StageResult:
            if isinstance(result, Preparation) and result.prepared is not None and applies(
                    result.prepared, history):
                outcome = apply(result.prepared, result.waited_ms)
                if outcome is not None:
                    return outcome
            return compress_step(config, state, request, client_items, codec, history, kept,
                                 events, fixed, now, done, known, wait=False, price=price)

        return Need(AwaitPreparation(request.session_id, state.preparing,
                                     compression.prepare_wait_s), resume_wait)
    if requested is None and not (due or cold):
        start = preparation(config, state, request, history, client_items, codec, threshold,
                            figure.tokens, guard, _max_chars(threshold), health, now)
        if start is None:
            return unchanged([])
        # The work travels with the admitted request; the proxy starts it once durable.
        update = update._replace(prepare=start[1])
        return unchanged([start[0]])
    prepared = prepare(history, client_items, codec, compression, threshold, known)
    if prepared is None:
        return unchanged(_skipped(request, requested, "nothing to summarise"))

    def compressed(compaction: Compaction | None, extra: list[Event],
                   health: SummariserHealth) -> StageResult:
        if compaction is None:
            why = ("the summary failed" if extra else
                   "the result would not have been 10 % smaller")
            if figure.tokens > fit.room:
                return fit.refuse(figure.tokens, [*events, *extra], compressed=False)
            return done(history, kept, [*events, *extra, *_skipped(request, requested, why)],
                        update._replace(health=health))
        after = fixed + compaction.history.tokens - unread
        tokens_after = calibrated(cal, after) if cal else after
        costs = cache_costs(rates, tokens_after, figure.tokens - tokens_after)
        event = ContextCompressed(
            call_id=request.call_id,
            trigger=trigger,
            summariser=compaction.summariser, model=compaction.model, focus=requested or "",
            source="real" if figure.source == "calibrated" else "estimated",
            tokens_before=figure.tokens, tokens_after=tokens_after,
            threshold=threshold, messages_before=compaction.messages_before,
            messages_after=len(compaction.history.items), summarised=compaction.summarised,
            pruned=compaction.pruned,
            summary=(content_key(compaction.summary_raw), len(compaction.summary_raw)),
            state=content_ref(encode_summary(compaction.history.summary)),
            cache_write_usd=costs[0], saved_usd_per_call=costs[1])
        if tokens_after > fit.room:
            return fit.refuse(tokens_after, [*events, *extra], compressed=True)
        return done(compaction.history, 0, [*events, *extra, event], update._replace(
            history=compaction.history, guard=record_compression(guard), health=health))

    if compression.summariser != "model" or not state.started:
        return compressed(builtin(prepared, codec, threshold), [], health)
    if requested is not None:
        health = lift_cooldown(health)
    target = summary_target(config, request.provider, request.model)
    if not available(health, now):
        return _failed(config, request, prepared, codec, threshold, fixed - unread, health,
                       now, compressed, target, "cooling down after failures", events,
                       tried=False)
    previous = history.summary
    previous_text = render(previous) if isinstance(previous, Summary) else (
        previous if isinstance(previous, str) else None)
    system, prompt = summary_request(prepared.middle, previous_text, requested or "",
                                     _max_chars(threshold))
    work = SummaryWork(
        session_id=request.session_id, call_id=request.call_id, provider=target[0],
        model=target[1], fallback_provider=request.provider, fallback_model=request.model,
        system=system, prompt=prompt, max_chars=_max_chars(threshold))

    def resume(result: object) -> StageResult:
        if isinstance(result, SummaryResult) and result.text and not result.failure:
            compaction = finish(prepared, result.text, codec, summariser="model",
                                model=result.model)
            return compressed(compaction, [], record_success(health))
        reason = result.failure if isinstance(result, SummaryResult) else "no summary"
        # Over a spend cap nothing was sent and the model did not fail: the builtin
        # summary stands in, with no cooldown (issue 21, item 6).
        over_cap = isinstance(result, SummaryResult) and result.over_cap
        # Cooling after another session's failures: not asked, so no failure of ours
        # (a cooldown counted again here would only lengthen the shared one).
        cooling = isinstance(result, SummaryResult) and result.cooling
        return _failed(config, request, prepared, codec, threshold, fixed - unread, health,
                       now, compressed, target, reason or "no summary", events,
                       tried=not (over_cap or cooling), builtin_anyway=over_cap)

    return Need(work, resume)


def _skipped(request: CallRequest, requested: str | None, reason: str) -> list[Event]:
    """A requested compaction not made is recorded, so it is not pending for ever."""
    if requested is None:
        return []
    return [CompactionSkipped(call_id=request.call_id, reason=reason)]


def _max_chars(threshold: int) -> int:
    return max(2_000, min(threshold * 4 // 20, 40_000))


def _failed(config: Config, request: CallRequest, prepared: Prepared, codec: ItemCodec,
            threshold: int, fixed: int, health: SummariserHealth, now: datetime,
            compressed: Callable[[Compaction | None, list[Event], SummariserHealth],
                                 StageResult],
            target: tuple[str, str], reason: str, events: list[Event], *, tried: bool,
            builtin_anyway: bool = False) -> StageResult:
    """The model gave no summary: fall back to the builtin, or abort (module doc).

    ``builtin_anyway``: the builtin summary whatever ``on_summary_failure`` says (the
    model's summary did not fit a spend cap: it was not asked, so it did not fail).
    """
    if tried:
        health = record_failure(health, now)
    action = "fallback" if builtin_anyway else config.compression.on_summary_failure
    failed = SummariserFailed(
        call_id=request.call_id, model=f"{target[0]}/{target[1]}", reason=reason[:200],
        action=action, cooldown_s=cooldown_seconds(health.failures) if tried else 0.0)
    if action == "fallback":
        compaction = builtin(prepared, codec, threshold, summariser="builtin-fallback")
        return compressed(compaction, [failed], health)
    model = config.model_for(request.provider, request.model)
    window, reserve = prompt_room(model, requested_max_tokens(
        getattr(request.body, "fields", None)))
    if fixed + prepared.history.tokens > window - reserve:
        return Refuse(503, "the session's history no longer fits the model's window and "
                      f"its summary could not be made ({reason}); nothing was sent",
                      code="summary_failed", kind="server_error", events=(*events, failed))
    return compressed(None, [failed], health)


class _Fit:
    """The window a call's prompt must fit, and the refusal when it cannot."""

    def __init__(self, request: CallRequest, window: int, reserve: int) -> None:
        self.request, self.window, self.reserve = request, window, reserve
        #: The most prompt tokens that fit beside the answer's reserve.
        self.room = window - reserve

    def refuse(self, tokens: int, events: list[Event], *, compressed: bool) -> Refuse:
        """400 ``context_length_exceeded``: the sizes, and that nothing was sent."""
        how = "even compressed" if compressed else "and compression could not shorten it"
        answer = (f" + {self.reserve:,} reserved for the answer" if self.reserve else "")
        return Refuse(
            400, f"the request does not fit {self.request.model}'s context window {how}: "
            f"~{tokens:,} prompt tokens{answer} > {self.window:,}; nothing was sent "
            "(shorten the newest messages or the tool results, or start a new session)",
            code="context_length_exceeded", events=tuple(events))

    def refuse_chain(self, tokens: int, events: list[Event]) -> Refuse:
        """400 ``context_length_exceeded`` for a chain: the sizes, and how to go on."""
        request = self.request
        answer = (f" + {self.reserve:,} reserved for the answer" if self.reserve else "")
        return Refuse(
            400, f"the request continues response {request.continues[:80]!r}, whose chain "
            f"holds ~{request.carried_tokens:,} tokens at the provider: with its new items, "
            f"~{tokens:,} prompt tokens{answer} > {request.model}'s context window of "
            f"{self.window:,}; nothing was sent. A stored chain cannot be compressed here: "
            "send the whole history with store: false (sessionwarden then compresses it), "
            "or have the provider compact it (POST /v1/responses/compact, or "
            "context_management) and continue from that",
            code="context_length_exceeded", events=tuple(events))
