"""A compression prepared ahead, off the call's path, and applied when a call needs it.

With the model summariser, the call that crosses the trigger used to wait for a whole
summary call (seconds). Now a call past the prepare mark has its history's compression
prepared in the background (:class:`PrepareWork`), adopted by the session as a
:class:`PreparedCompression`; the call that crosses the trigger applies it
(:func:`apply_prepared`): the compacted items replace those it covers, and the items
appended since follow verbatim.

Rules:
- A prepared compression applies only while the history still starts with the items it
  was made from (:func:`applies`: a digest of their digests); a reset or another
  compression makes it stale, and it is dropped (CompressionDropped, with the reason).
- Pure: what the phases need travels in :class:`PrepareWork`; :func:`start_preparation`
  and :func:`finish_preparation` are what the CompressorActor runs.
"""

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sessionwarden.config import CompressionConfig
from sessionwarden.domain.context.compression import (
    Prepared,
    encode_summary,
    finish,
    prepare,
)
from sessionwarden.domain.context.conversation import ItemCodec
from sessionwarden.domain.context.history import GovernedHistory, Item
from sessionwarden.domain.context.summariser import SummaryResult, SummaryWork, summary_request
from sessionwarden.domain.context.summary import Summary, render
from sessionwarden.domain.context.transcript import content_ref
from sessionwarden.events import CompressionPrepared, RequestRecord

__all__ = [
    "AwaitPreparation",
    "Preparation",
    "PreparationFailed",
    "PrepareWork",
    "PreparedCompression",
    "applies",
    "apply_prepared",
    "finish_preparation",
    "prefix_digest",
    "prepared_event",
    "start_preparation",
]


def prefix_digest(items: Sequence[Item]) -> bytes:
    """A digest of ``items``' digests: what a prepared compression was made from."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(item.digest)
    return digest.digest()[:16]


class PrepareWork(NamedTuple):
    """What preparing a session's compression needs (started after ``call_id``'s admission).

    ``history`` is the history the call sent and ``client_items`` its request's items
    after the leading system ones (the bytes of the items it forwards unchanged).
    ``summary``: the summary request's target and bounds, as the stage would ask it.
    """

    session_id: str
    call_id: str
    history: GovernedHistory
    client_items: Sequence[bytes]
    codec: ItemCodec
    compression: CompressionConfig
    threshold: int
    target: tuple[str, str]
    fallback: tuple[str, str]
    max_chars: int


class AwaitPreparation(NamedTuple):
    """A call that crossed the trigger waits up to ``wait_s`` for ``call_id``'s preparation."""

    session_id: str
    call_id: str
    wait_s: float


class PreparedCompression(NamedTuple):
    """A compression ready to apply: the first ``messages`` items of a call's history, compacted.

    ``call_id``: the call it was prepared from; ``history``: the compacted items, the
    client items covered then, the summary.
    """

    call_id: str
    messages: int
    prefix: bytes
    history: GovernedHistory
    model: str
    summarised: int
    pruned: int
    tokens_before: int
    summary_raw: bytes


class Preparation(NamedTuple):
    """What a call that waited for a preparation got: the compression (None: none in time)."""

    prepared: PreparedCompression | None
    waited_ms: int


def start_preparation(work: PrepareWork) -> tuple[Prepared, SummaryWork] | str:
    """Phases 1 and 2, and the summary to ask for; or why there is nothing to prepare."""
    prepared = prepare(work.history, work.client_items, work.codec, work.compression,
                       work.threshold)
    if prepared is None:
        return "nothing to summarise"
    previous = work.history.summary
    previous_text = render(previous) if isinstance(previous, Summary) else (
        previous if isinstance(previous, str) else None)
    system, prompt = summary_request(prepared.middle, previous_text, "", work.max_chars)
    return prepared, SummaryWork(
        session_id=work.session_id, call_id=work.call_id, provider=work.target[0],
        model=work.target[1], fallback_provider=work.fallback[0],
        fallback_model=work.fallback[1], system=system, prompt=prompt,
        max_chars=work.max_chars)


class PreparationFailed(NamedTuple):
    """The summary model failed a preparation (asked, not over a cap nor cooling)."""

    model: str
    reason: str


def finish_preparation(work: PrepareWork, prepared: Prepared, result: object
                       ) -> PreparedCompression | PreparationFailed | str:
    """Phase 4 around the model's summary; or why there is no prepared compression."""
    if not isinstance(result, SummaryResult) or not result.text or result.failure:
        if isinstance(result, SummaryResult) and result.failure and not (
                result.over_cap or result.cooling):
            return PreparationFailed(result.model, result.failure)
        reason = result.failure if isinstance(result, SummaryResult) else ""
        return f"no summary: {reason or 'none'}"
    compression = finish(prepared, result.text, work.codec, summariser="model",
                        model=result.model)
    if compression is None:
        return "the result would not have been 10 % smaller"
    history = work.history
    return PreparedCompression(
        call_id=work.call_id, messages=len(history.items), prefix=prefix_digest(history.items),
        history=compression.history, model=compression.model, summarised=compression.summarised,
        pruned=compression.pruned, tokens_before=history.tokens,
        summary_raw=compression.summary_raw)


def applies(prepared: PreparedCompression, history: GovernedHistory) -> bool:
    """Whether ``history`` still starts with the items ``prepared`` was made from."""
    covered = prepared.history.client
    return (len(history.items) >= prepared.messages
            and history.client[:len(covered)] == covered
            and prefix_digest(history.items[:prepared.messages]) == prepared.prefix)


def apply_prepared(prepared: PreparedCompression, history: GovernedHistory) -> GovernedHistory:
    """``history`` with ``prepared`` in place of the items it covers (see :func:`applies`)."""
    items = (*prepared.history.items, *history.items[prepared.messages:])
    return history._replace(items=items, tokens=sum(item.tokens for item in items),
                            compressed=history.compressed + 1,
                            summary=prepared.history.summary)


def prepared_event(prepared: PreparedCompression, keep: Callable[[bytes], bool] | None = None
                   ) -> tuple[CompressionPrepared, tuple[tuple[str, bytes], ...]]:
    """The event recording ``prepared``, and the contents to store with it.

    ``keep`` says whether a content may be stored (None: recording is off, none is;
    one holding a key the daemon uses is not): the event names those left out as
    ``withheld``, as a call's record does.
    """
    history = prepared.history
    items = history.items
    state = encode_summary(history.summary)
    state_ref = content_ref(state)
    candidates = dict.fromkeys(
        [(item.digest.hex(), item.raw) for item in items if item.raw is not None]
        + [(state_ref[0], state)])
    contents = tuple(c for c in candidates if keep is not None and keep(c[1]))
    kept = {key for key, _ in contents}
    record = RequestRecord(
        appended=tuple((item.digest.hex(), item.size) for item in items),
        tokens=tuple(item.tokens for item in items),
        sources=tuple(item.source for item in items), covers=len(history.client),
        stored=keep is not None,
        withheld=tuple(key for key, _ in candidates if keep is not None and key not in kept))
    event = CompressionPrepared(
        call_id=prepared.call_id, prefix=prepared.prefix.hex(),
        messages_before=prepared.messages, compacted=record, model=prepared.model,
        summarised=prepared.summarised, pruned=prepared.pruned,
        tokens_before=prepared.tokens_before, tokens_after=history.tokens,
        summary=content_ref(prepared.summary_raw), state=state_ref)
    return event, contents
