"""The compression step's moments ahead of the trigger (issue 23): prepare, apply, cold cache.

``domain.admission.compression_stage`` asks, at each governed call: is a compression
prepared for this history (:func:`ready`; a stale one is dropped, recorded), should one
be prepared from it (:func:`preparation`; the work goes with the admitted request, the
proxy starts it once the admission is durable), what records its use (:func:`applied`),
and is the prompt cache cold anyway, so compressing now costs no cache (:func:`cold_cache`).

Rules:
- Only the model summariser prepares ahead: the builtin summary takes milliseconds, a
  model's seconds. A compression asked for through the control API is made at its call
  (its focus is the caller's), never taken from a preparation.
- Nothing is prepared while the guard holds compressions back (after ineffective
  ones, or before the last one was judged by a reading), nor while the summary model
  is cooling after failures.
"""

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal

from sessionwarden.config import Config, UnknownModel, find_model
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.compression import encode_summary
from sessionwarden.domain.context.conversation import ItemCodec
from sessionwarden.domain.context.history import ContextUpdate, GovernedHistory
from sessionwarden.domain.context.prepared import PreparedCompression, PrepareWork, applies
from sessionwarden.domain.context.summariser import SummariserHealth, available
from sessionwarden.domain.context.transcript import content_ref
from sessionwarden.domain.context.trigger import MAX_UNFIT_COMPRESSIONS, CompressionGuard
from sessionwarden.domain.cost.pricing import Price
from sessionwarden.domain.session import SessionState
from sessionwarden.events import (
    CompressionDropped,
    CompressionPreparing,
    ContextCompressed,
    Event,
)

__all__ = ["PriceOf", "applied", "cache_costs", "cold_cache", "preparation", "ready",
           "summary_target"]

#: The price of ``(provider, model)`` at a time, None if unknown (the runtime's price book).
PriceOf = Callable[[str, str, datetime], Price | None]
_MILLION = Decimal(1_000_000)
_USD = Decimal("0.000001")


def cache_costs(price: Price | None, written: int, saved: int) -> tuple[str, str]:
    """What a compression costs in cache and saves per later call, in USD (``""``: no price).

    The compacted prompt is written to the provider's cache afresh (``written`` tokens at
    its cache-write rate, else its input rate); each later call reads ``saved`` tokens
    fewer from the cache (at its cache-read rate, else its input rate).
    """
    if price is None:
        return "", ""
    write = price.cache_write if price.cache_write is not None else price.input
    read = price.cache_read if price.cache_read is not None else price.input
    if write is None or read is None:
        return "", ""
    return (str((write * written / _MILLION).quantize(_USD)),
            str((read * max(saved, 0) / _MILLION).quantize(_USD)))


def ready(state: SessionState, history: GovernedHistory, call_id: str
          ) -> tuple[PreparedCompression | None, list[Event]]:
    """The session's prepared compression if it applies to ``history``; else the drop."""
    prepared = state.prepared
    if prepared is None:
        return None, []
    if applies(prepared, history):
        return prepared, []
    return None, [CompressionDropped(call_id=prepared.call_id,
                                    reason=f"stale at call {call_id}: the history changed")]


def preparation(config: Config, state: SessionState, request: CallRequest,
                history: GovernedHistory, client_items: Sequence[bytes], codec: ItemCodec,
                threshold: int, tokens: int, guard: CompressionGuard, max_chars: int,
                health: SummariserHealth, now: datetime
                ) -> tuple[CompressionPreparing, PrepareWork] | None:
    """What starts a preparation from ``history`` now, if one is due (module doc)."""
    compression = config.compression
    if (not compression.enabled or compression.summariser != "model" or not state.started
            or not available(health, now)
            or not compression.prepare_ahead
            or state.preparing or state.prepared is not None
            or tokens < compression.prepare_ratio * threshold
            or guard.unfit >= MAX_UNFIT_COMPRESSIONS or guard.awaiting_reading
            or not history.items):
        return None
    event = CompressionPreparing(call_id=request.call_id, messages=len(history.items),
                                tokens=tokens)
    work = PrepareWork(
        session_id=request.session_id, call_id=request.call_id, history=history,
        client_items=client_items, codec=codec, compression=compression,
        threshold=threshold, target=summary_target(config, request.provider, request.model),
        fallback=(request.provider, request.model), max_chars=max_chars)
    return event, work


def cold_cache(config: Config, request: CallRequest, context: ContextUpdate | None,
                tokens: int, threshold: int, now: datetime) -> bool:
    """Whether to compress now because the prompt cache is cold anyway.

    A session past the prepare mark (``prepare_ratio`` of its trigger) whose previous
    call is older than its provider's prompt-cache lifetime: its next prompt is written
    to the cache afresh whatever we do, so a compression now costs no cache it would
    have kept, where waiting for the trigger would bust a warm one. Only when the guard
    would let a compression through (not after ineffective ones, not before a reading).
    """
    if context is None or context.last_at is None or not config.compression.enabled:
        return False
    ttl = config.prompt_cache_ttl(request.provider)
    if ttl is None or tokens < config.compression.prepare_ratio * threshold:
        return False
    guard = context.guard
    if guard.unfit >= MAX_UNFIT_COMPRESSIONS or guard.awaiting_reading:
        return False
    return (now - context.last_at).total_seconds() > ttl


def summary_target(config: Config, provider: str, model: str) -> tuple[str, str]:
    """``(provider, upstream model)`` of ``summary_model``, else the session's own."""
    name = config.compression.summary_model
    if name:
        try:
            found, upstream = find_model(config, name)
            return found.name, upstream
        except UnknownModel:
            pass  # checked when the config was loaded; the session's model will do
    return provider, model


def applied(prepared: PreparedCompression, request: CallRequest, compacted: GovernedHistory,
            *, trigger: str, source: str, tokens_before: int, tokens_after: int,
            threshold: int, messages_before: int, waited_ms: int,
            costs: tuple[str, str] = ("", "")) -> ContextCompressed:
    """The ContextCompressed that records ``prepared`` applied to the call's history."""
    return ContextCompressed(
        call_id=request.call_id, trigger=trigger, summariser="model", model=prepared.model,
        source=source, tokens_before=tokens_before, tokens_after=tokens_after,
        threshold=threshold, messages_before=messages_before,
        messages_after=len(compacted.items), summarised=prepared.summarised,
        pruned=prepared.pruned, summary=content_ref(prepared.summary_raw),
        state=content_ref(encode_summary(compacted.summary)), prepared=True,
        waited_ms=waited_ms, cache_write_usd=costs[0], saved_usd_per_call=costs[1])
