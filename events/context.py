"""Events of context governance: what the daemon did to a session's history, and why.

Stream ``session-<id>``: the events of a call's governance are appended in the same
atomic append as its CallAdmitted, before it (they are decided by the same admission),
so a call that was sent has its decisions recorded.

- :class:`RequestRecord` (a field of CallAdmitted, not an event) says exactly what
  went upstream, by content keys (the content itself is stored once,
  content-addressed, in the same transaction);
- :class:`ToolResultSpilled` a tool result replaced by a preview (or, when the spill
  file could not be written, truncated inline);
- :class:`HistoryReset` a resent history that no longer matched the governed one;
- :class:`ContextCompressed` a compression and what it saved;
- :class:`SummariserFailed` the model summariser failing, and the cooldown it caused;
- :class:`CompactionRequested` a compaction asked for through the control API, and
  :class:`CompactionSkipped` one that found nothing worth doing at the next call;
- :class:`CompressionPreparing`, :class:`CompressionPrepared`, :class:`CompressionDropped`
  a compression prepared ahead, off the call's path (applied: a ContextCompressed with
  ``prepared``).

Stream :data:`SPILL_STREAM` (``spill``), the spill directory's, not a session's:
:class:`SpillEvicted`, a spill file deleted to keep the directory under its quota,
appended (durable) before the file is deleted.

Content keys are :func:`sessionwarden.domain.context.transcript.content_key` of the bytes (32
hex characters); a message is referred to as ``(key, size in bytes)``.
"""

from typing import ClassVar

import msgspec
from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster

__all__ = [
    "CONTEXT_UPCASTERS",
    "SPILL_STREAM",
    "CompactionRequested",
    "CompactionSkipped",
    "CompressionDropped",
    "CompressionPrepared",
    "CompressionPreparing",
    "ContentRef",
    "ContextCompressed",
    "ContextLimits",
    "HistoryReset",
    "RequestRecord",
    "SpillEvicted",
    "SummariserFailed",
    "ToolResultSpilled",
]

#: A stored content: its key and its size in bytes.
ContentRef = tuple[str, int]
#: The spill directory's stream: its evictions.
SPILL_STREAM = "spill"


class RequestRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """The request a call sent upstream, by content keys (a field of CallAdmitted).

    The forwarded body is ``fields`` (a JSON object: every field but the conversation)
    with ``items_key`` (``"messages"``) set to the system messages of the request, then
    the governed history: the first ``kept`` governed messages of the call ``base``
    (its own record, recursively) followed by ``appended``. Between two compressions the
    governed history only grows, so each call records only what it added: the log grows
    with the session's distinct content, not with its square. ``base`` is ``""`` for a
    call whose governed history starts afresh (the first, after a reset, after a
    compression). ``fields`` / ``system`` None: the same as ``base``'s (most calls).
    ``stored`` is False when message recording is off: then only keys and sizes are
    known. ``withheld`` lists the keys of contents not stored because they held an API
    key the daemon uses (the log never stores one).

    What a restart needs to rebuild the governed history without reading an item again
    (``domain.context.rebuild``; empty in records written before CallAdmitted v5):
    ``tokens`` and ``sources`` run beside ``appended``: each item's token estimate, and
    the client item it forwards unchanged (its index among the client's non-system
    items; -1 for a stand-in: a spill's preview, a pruned form, a summary). ``covers``
    is how many client items the governed history stands for after this call, and
    ``replaced`` the digests (hex) of the client items it newly covers that no appended
    item forwards unchanged (spilled, or summarised at once), in order. ``marked`` names
    the appended items forwarded unchanged whose bytes carry a prompt-cache marker: their
    content key is not the identity that recognises them (their bytes without markers,
    ``domain.context.markers``), given here as (position in ``appended``, digest hex).
    """

    fields: ContentRef | None = None
    items_key: str = "messages"
    system: tuple[ContentRef, ...] | None = None
    base: str = ""
    kept: int = 0
    appended: tuple[ContentRef, ...] = ()
    stored: bool = True
    withheld: tuple[str, ...] = ()
    tokens: tuple[int, ...] = ()
    sources: tuple[int, ...] = ()
    covers: int = 0
    replaced: tuple[str, ...] = ()
    marked: tuple[tuple[int, str], ...] = ()


class ContextLimits(msgspec.Struct, frozen=True, omit_defaults=True):
    """The limits a call was governed under (a field of CallAdmitted).

    ``threshold``: the prompt tokens at which the session is compressed; ``window``: the
    model's context window in tokens; ``compression``: whether compression was on. Recorded
    when they differ from the session's last recorded ones (its first call, a model or a
    configuration change, the first call after a restart), so ``status`` says what applied
    without reading the configuration, and a call's record stays small.
    """

    threshold: int
    window: int
    compression: bool = True


class ToolResultSpilled(Event, frozen=True):
    """A tool result over its limit was replaced by a preview and a note.

    ``message`` is its position in the client's request; ``tool`` the tool's name;
    ``reason`` ``"result"`` (over its own limit) or ``"turn"`` (the turn's budget);
    ``file`` the spill file's name (its content hash, never a client-supplied id),
    ``chars`` / ``bytes`` the full result's size; ``preview_chars`` what was kept.
    ``truncated`` True: the spill file could not be written (``error`` says why), so the
    result was cut inline with an explicit marker instead.
    """

    TAG: ClassVar[str] = "context.tool_result_spilled.v1"

    call_id: str
    message: int
    tool: str = ""
    reason: str = "result"
    file: str = ""
    chars: int = 0
    bytes: int = 0
    preview_chars: int = 0
    truncated: bool = False
    error: str = ""


class HistoryReset(Event, frozen=True):
    """A resent history no longer matched the governed one: governance starts afresh.

    ``matched`` is how many of the governed history's client messages still matched;
    ``reason`` says what differed (edited, compacted by the client, shorter, the daemon
    restarted).
    """

    TAG: ClassVar[str] = "context.history_reset.v1"

    call_id: str
    reason: str
    matched: int = 0


class ContextCompressed(Event, frozen=True):
    """The session's history was compressed before this call was sent.

    ``trigger``: ``"threshold"`` or ``"requested"`` (control API, with ``focus``);
    ``summariser``: ``"builtin"`` or ``"model"`` (``model`` names it), or
    ``"builtin-fallback"`` when the model failed; ``tokens_before`` / ``tokens_after``
    are the best figures (``source`` ``real`` or ``estimated``) against ``threshold``;
    ``summarised`` messages went into the summary (``summary``: its content key),
    ``pruned`` tool outputs were shortened in phase 1. Version 2 added ``state``: the
    summary a later compression updates (the builtin's structure as JSON, or a model's
    text as a JSON string), stored so a restart rebuilds it; and ``prepared``, whether
    the compression was prepared ahead (off the call's path), with ``waited_ms``, how long
    the call waited for it; ``cache_write_usd``, the estimated cost of writing the
    compacted prompt to the provider's cache (``tokens_after`` at its cache-write rate),
    and ``saved_usd_per_call``, what each later call saves (the tokens saved at the
    cache-read rate); ``""`` when the model has no price.
    """

    TAG: ClassVar[str] = "context.compressed.v2"

    call_id: str
    trigger: str = "threshold"
    summariser: str = "builtin"
    model: str = ""
    focus: str = ""
    source: str = "estimated"
    tokens_before: int = 0
    tokens_after: int = 0
    threshold: int = 0
    messages_before: int = 0
    messages_after: int = 0
    summarised: int = 0
    pruned: int = 0
    summary: ContentRef = ("", 0)
    state: ContentRef = ("", 0)
    prepared: bool = False
    waited_ms: int = 0
    cache_write_usd: str = ""
    saved_usd_per_call: str = ""


class SummariserFailed(Event, frozen=True):
    """The model summariser failed: ``action`` ``"fallback"`` or ``"abort"`` was taken.

    ``"dropped"``: it failed a compression prepared ahead, which is dropped (recorded after
    the preparing call's admission, with a CompressionDropped).

    ``cooldown_s``: the model summariser is not tried again for this long.
    """

    TAG: ClassVar[str] = "context.summariser_failed.v1"

    call_id: str
    model: str
    reason: str
    action: str = "fallback"
    cooldown_s: float = 0.0


class CompactionRequested(Event, frozen=True):
    """The control API asked to compress the session at its next call (``focus``: a topic)."""

    TAG: ClassVar[str] = "context.compaction_requested.v1"

    focus: str = ""


class CompactionSkipped(Event, frozen=True):
    """A requested compaction was not made at ``call_id``: ``reason`` says why.

    Nothing to summarise (the whole history is the protected head and the current
    turn), a result not 10 % smaller, or the summariser failed with
    ``on_summary_failure = "abort"``. The request is served either way: it is not
    pending any more.
    """

    TAG: ClassVar[str] = "context.compaction_skipped.v1"

    call_id: str
    reason: str


class SpillEvicted(Event, frozen=True):
    """A spill file was deleted to keep the spill directory under ``[tools] spill_max_mib``.

    ``file`` is its name (the SHA-256 of its content, ``.txt``), ``bytes`` its size;
    ``reason`` ``"quota"`` (a new file needed the room) or ``"quota_at_start"`` (the
    directory was over its quota when the daemon started: the setting was lowered);
    ``quota_bytes`` the bound, ``used_bytes`` what the directory held just before this
    eviction. The least recently referenced file goes first (``domain.context.spill_quota``).
    """

    TAG: ClassVar[str] = "context.spill_evicted.v1"

    file: str
    bytes: int
    reason: str = "quota"
    quota_bytes: int = 0
    used_bytes: int = 0


class CompressionPreparing(Event, frozen=True):
    """Call ``call_id`` crossed the prepare mark: its history's compression is prepared.

    The history it sent (``messages`` items, ~``tokens``) is compacted ahead, off the
    call's path.
    """

    TAG: ClassVar[str] = "context.compression_preparing.v1"

    call_id: str
    messages: int = 0
    tokens: int = 0


class CompressionPrepared(Event, frozen=True):
    """The compression prepared from call ``call_id``'s history is ready to apply.

    It replaces the first ``messages_before`` items of that history (``prefix``: a digest
    of their digests, so a later call knows they are still its own); ``compacted``
    records the compacted items as a call's record does (its stand-ins stored with this
    event); the rest as ContextCompressed's fields.
    """

    TAG: ClassVar[str] = "context.compression_prepared.v1"

    call_id: str
    prefix: str
    messages_before: int
    compacted: RequestRecord
    summariser: str = "model"
    model: str = ""
    summarised: int = 0
    pruned: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary: ContentRef = ("", 0)
    state: ContentRef = ("", 0)


class CompressionDropped(Event, frozen=True):
    """The compression prepared from call ``call_id``'s history is dropped (``reason``)."""

    TAG: ClassVar[str] = "context.compression_dropped.v1"

    call_id: str
    reason: str = ""


CONTEXT_UPCASTERS = (Upcaster("context.compressed.v1", "context.compressed.v2", dict),)
