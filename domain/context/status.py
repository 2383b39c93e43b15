"""What a session's context looks like, folded from its events: the figure behind ``status``.

:func:`fold_context` reads one session's events, oldest first, each with the time it was
recorded, and answers what ``sessionwarden status --session`` and the control API's
``GET /v1/sessions/{id}`` show:

- the calls: a client's calls, and separately the daemon's own side calls (``purpose``
  set: the model summariser), which are metered but never govern the context figure;
- the context figure of the latest client call: ``real`` when that call completed with
  the provider's usage (its prompt tokens: input + cache read + cache write, the
  canonical buckets being disjoint), else ``estimated`` (our estimate at admission: the
  call is in flight, or the provider reported no usage);
- compressions (the last one's savings; the latest ten with their trigger, whether
  prepared ahead, the wait, and their cache cost vs savings), a compression being prepared
  or ready, spills (bytes, and how many fell back to inline
  truncation), history resets, summariser failures (the last one's cooldown end), and a
  compaction requested through the control API that no compression has served yet.

The threshold and the window come from the events too: CallAdmitted records the limits
a call was governed under whenever they change (``ContextLimits``), so ``status`` needs
no configuration to say what applied. Only a log written before they were recorded
falls back to the configuration's (:func:`with_threshold`, resolved by the caller). Pure:
time comes in with the events.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal

import msgspec
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CompactionRequested,
    CompactionSkipped,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
    ContextLimits,
    Event,
    HistoryReset,
    SessionStarted,
    SummariserFailed,
    ToolResultSpilled,
)

__all__ = [
    "RECENT",
    "ContextFigure",
    "ContextStatus",
    "FigureSource",
    "LastCompression",
    "LastFailure",
    "PendingCompaction",
    "fold_context",
    "with_threshold",
]

#: How many of the latest compressions ``status`` lists.
RECENT = 10
#: ``real``: the provider's prompt tokens; ``estimated``: our estimate at admission.
FigureSource = Literal["real", "estimated"]


class ContextFigure(msgspec.Struct, frozen=True):
    """The prompt size of the session's latest client call ``call_id``."""

    tokens: int
    source: FigureSource
    call_id: str


class LastCompression(msgspec.Struct, frozen=True):
    """The session's latest compression (a ``ContextCompressed``) and what it saved."""

    call_id: str
    at: datetime
    trigger: str
    summariser: str
    model: str
    focus: str
    source: str
    tokens_before: int
    tokens_after: int
    saved_tokens: int
    saved_percent: float
    messages_before: int
    messages_after: int
    summarised: int
    #: Prepared ahead, off the call's path (and how long the call waited for it).
    prepared: bool = False
    waited_ms: int = 0
    #: The estimated cost of the cache write it caused, and what each later call saves
    #: (``""``: the model has no price).
    cache_write_usd: str = ""
    saved_usd_per_call: str = ""


class LastFailure(msgspec.Struct, frozen=True):
    """The latest model-summariser failure; the model summariser rests until ``cooldown_until``."""

    call_id: str
    at: datetime
    model: str
    reason: str
    action: str
    cooldown_until: datetime


class PendingCompaction(msgspec.Struct, frozen=True):
    """A compaction asked for through the control API, done at the session's next call."""

    focus: str
    requested_at: datetime


class ContextStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One session's context, as :func:`fold_context` folds it (see the module docstring).

    ``provider`` and ``model`` are the latest call's (``model`` as sent upstream).
    ``threshold_tokens``, ``window_tokens`` and ``compression_enabled`` are the limits the
    latest call was governed under (``limits_recorded``), else None until
    :func:`with_threshold` sets them from the configuration.
    """

    session_id: str
    provider: str = ""
    model: str = ""
    started_at: datetime | None = None
    last_at: datetime | None = None
    calls: int = 0
    summariser_calls: int = 0
    refused: int = 0
    context: ContextFigure | None = None
    threshold_tokens: int | None = None
    window_tokens: int | None = None
    compression_enabled: bool = True
    limits_recorded: bool = False
    compressions: int = 0
    last_compression: LastCompression | None = None
    spills: int = 0
    spilled_bytes: int = 0
    spills_truncated: int = 0
    history_resets: int = 0
    summariser_failures: int = 0
    last_failure: LastFailure | None = None
    pending_compaction: PendingCompaction | None = None
    #: The share of the client calls' prompt tokens the provider read from its cache, in
    #: percent (None until a call reported its usage): what compressions cost in cache.
    cache_read_percent: float | None = None
    #: The latest compressions, oldest first (at most :data:`RECENT`).
    recent_compressions: tuple[LastCompression, ...] = ()
    #: A compression prepared ahead: ``"running"`` (its preparation), ``"ready"``, or "".
    preparation: str = ""
    #: The call it is (being) prepared from.
    preparation_call: str = ""


def with_threshold(status: ContextStatus, threshold_tokens: int, *, enabled: bool = True,
                   window_tokens: int | None = None) -> ContextStatus:
    """``status`` with the configuration's limits, unless the log recorded the call's own."""
    if status.limits_recorded:
        return status
    return msgspec.structs.replace(status, threshold_tokens=threshold_tokens,
                                   compression_enabled=enabled, window_tokens=window_tokens)


def _compression(event: ContextCompressed, at: datetime) -> LastCompression:
    saved = event.tokens_before - event.tokens_after
    percent = round(100.0 * saved / event.tokens_before, 1) if event.tokens_before > 0 else 0.0
    return LastCompression(
        call_id=event.call_id, at=at, trigger=event.trigger, summariser=event.summariser,
        model=event.model, focus=event.focus, source=event.source,
        tokens_before=event.tokens_before, tokens_after=event.tokens_after,
        saved_tokens=saved, saved_percent=percent, messages_before=event.messages_before,
        messages_after=event.messages_after, summarised=event.summarised,
        prepared=event.prepared, waited_ms=event.waited_ms,
        cache_write_usd=event.cache_write_usd, saved_usd_per_call=event.saved_usd_per_call)


def fold_context(session_id: str,
                 events: Iterable[tuple[Event, datetime]]) -> ContextStatus:
    """Fold ``session_id``'s events, oldest first, each with its recorded time.

    Events of other kinds are ignored, so the whole stream can be passed.
    """
    fold = _Fold()
    for event, at in events:
        fold.add(event, at)
    return fold.status(session_id)


class _Fold:
    """The running state of :func:`fold_context`."""

    def __init__(self) -> None:
        self.provider = self.model = ""
        self.started: datetime | None = None
        self.last: datetime | None = None
        self.calls = self.side_calls = self.refused = self.compressions = 0
        self.spills = self.spilled_bytes = self.truncated = self.resets = self.failures = 0
        self.latest_call = ""  # the latest client call: its completion makes the figure real
        self.context: ContextFigure | None = None
        self.compression: LastCompression | None = None
        self.failure: LastFailure | None = None
        self.pending: PendingCompaction | None = None
        self.limits: ContextLimits | None = None
        self.client_calls: set[str] = set()
        self.prompt_tokens = self.cache_read_tokens = 0
        self.recent: tuple[LastCompression, ...] = ()
        self.preparation = self.preparation_call = ""

    def add(self, event: Event, at: datetime) -> None:
        self.started = self.started or at
        self.last = at
        if isinstance(event, SessionStarted):
            if not self.model:
                self.provider, _, self.model = event.model.partition("/")
        elif isinstance(event, CallAdmitted):
            if event.purpose:
                self.side_calls += 1
                return
            self.calls += 1
            self.client_calls.add(event.call_id)
            self.latest_call = event.call_id
            self.provider, self.model = event.provider, event.model
            self.context = ContextFigure(event.estimated_tokens, "estimated", event.call_id)
            self.limits = event.limits or self.limits
        elif isinstance(event, CallCompleted):
            prompt = event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
            if event.call_id in self.client_calls and event.source == "provider":
                self.prompt_tokens += prompt
                self.cache_read_tokens += event.cache_read_tokens
            if event.call_id == self.latest_call and event.source == "provider":
                self.context = ContextFigure(prompt, "real", event.call_id)
        elif isinstance(event, CallRefused):
            self.refused += 1
        elif isinstance(event, ContextCompressed):
            self.compressions += 1
            self.compression = _compression(event, at)
            self.recent = (*self.recent, self.compression)[-RECENT:]
            self.pending = None  # a compression serves any request made before it
            self.preparation = self.preparation_call = ""  # used, or stale now
        elif isinstance(event, CompressionPreparing):
            self.preparation, self.preparation_call = "running", event.call_id
        elif isinstance(event, CompressionPrepared):
            self.preparation, self.preparation_call = "ready", event.call_id
        elif isinstance(event, CompressionDropped):
            if event.call_id == self.preparation_call:
                self.preparation = self.preparation_call = ""
        elif isinstance(event, CompactionRequested):
            self.pending = PendingCompaction(event.focus, at)
        elif isinstance(event, CompactionSkipped):
            self.pending = None
        elif isinstance(event, ToolResultSpilled):
            self.spills += 1
            self.spilled_bytes += event.bytes
            self.truncated += event.truncated
        elif isinstance(event, HistoryReset):
            self.resets += 1
        elif isinstance(event, SummariserFailed):
            self.failures += 1
            self.failure = LastFailure(
                call_id=event.call_id, at=at, model=event.model, reason=event.reason,
                action=event.action, cooldown_until=at + timedelta(seconds=event.cooldown_s))

    def status(self, session_id: str) -> ContextStatus:
        return ContextStatus(
            session_id=session_id, provider=self.provider, model=self.model,
            started_at=self.started, last_at=self.last, calls=self.calls,
            summariser_calls=self.side_calls, refused=self.refused, context=self.context,
            compressions=self.compressions, last_compression=self.compression,
            spills=self.spills, spilled_bytes=self.spilled_bytes,
            spills_truncated=self.truncated, history_resets=self.resets,
            summariser_failures=self.failures, last_failure=self.failure,
            pending_compaction=self.pending,
            threshold_tokens=self.limits.threshold if self.limits else None,
            window_tokens=self.limits.window if self.limits else None,
            compression_enabled=self.limits.compression if self.limits else True,
            limits_recorded=self.limits is not None,
            cache_read_percent=(round(100.0 * self.cache_read_tokens / self.prompt_tokens, 1)
                                if self.prompt_tokens else None),
            recent_compressions=self.recent, preparation=self.preparation,
            preparation_call=self.preparation_call)
