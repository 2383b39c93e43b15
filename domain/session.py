"""A session's state as the domain sees it, and how its events fold into it.

:class:`SessionState` is what the admission stages decide over and what a completion
needs: whether the session started, how many calls it has had, and its open calls (each
with what admission knew of it). :meth:`SessionState.fold` is the one place an event
changes it, so an actor that decides, appends and folds, and one that rebuilds the state
from the log, end in the same state.
"""

from typing import NamedTuple

from sessionwarden.domain.context.history import ContextUpdate
from sessionwarden.domain.context.trigger import Calibration, calibrate, record_reading
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    CompactionRequested,
    CompactionSkipped,
    ContextCompressed,
    ContextLimits,
    Event,
    SessionStarted,
)

__all__ = ["OpenCall", "SessionState", "session_id_of", "session_stream"]

_PREFIX = "session-"


def session_stream(session_id: str) -> str:
    """The stream of a session."""
    return _PREFIX + session_id


def session_id_of(stream: str) -> str | None:
    """The session a stream belongs to, or None for another kind of stream."""
    return stream[len(_PREFIX):] if stream.startswith(_PREFIX) else None


class OpenCall(NamedTuple):
    """An admitted call not yet completed: what admission knew of it."""

    provider: str
    model: str
    estimated_tokens: int
    purpose: str = ""


class SessionState:
    """One session's state; owned by exactly one actor at a time (not thread-safe).

    Attributes:
        session_id: the session.
        started: whether SessionStarted is in its stream.
        calls: calls admitted so far.
        refused: calls the pipeline refused so far.
        open: admitted calls without a completion yet, by call id.
        compaction: the focus of a compaction asked for and not yet done (None: none).
        context: the governed history, guard and trigger (memory only: None until the
            first admission of this instance; ``domain.context.history.ContextUpdate``).
        calibration: per upstream model, our estimate's correction by its last reading.
        limits: the context limits last recorded (CallAdmitted's ``limits``) by this
            instance; None until one is (a session loaded afresh records them again).
    """

    __slots__ = ("calibration", "calls", "compaction", "context", "limits", "open",
                 "refused", "session_id", "started")

    def __init__(self, session_id: str, *, started: bool = False, calls: int = 0,
                 refused: int = 0, open_calls: dict[str, OpenCall] | None = None) -> None:
        """A state as recovered from the log (a new session by default)."""
        self.session_id = session_id
        self.started = started
        self.calls = calls
        self.refused = refused
        self.open: dict[str, OpenCall] = dict(open_calls or {})
        self.compaction: str | None = None
        self.context: ContextUpdate | None = None
        self.calibration: dict[str, Calibration] = {}
        self.limits: ContextLimits | None = None

    def fold(self, event: Event) -> None:
        """Apply one of the session's events."""
        if isinstance(event, CallAdmitted):
            self.calls += 1
            self.open[event.call_id] = OpenCall(event.provider, event.model,
                                                event.estimated_tokens, event.purpose)
            if event.limits is not None:
                self.limits = event.limits
        elif isinstance(event, CallCompleted):
            call = self.open.pop(event.call_id, None)
            if call is not None and not call.purpose:
                self._read(call, event)
        elif isinstance(event, CallRefused):
            self.refused += 1
        elif isinstance(event, SessionStarted):
            self.started = True
        elif isinstance(event, CallResent) and event.provider:
            call = self.open.get(event.call_id)
            if call is not None:  # the route taken now: the completion is priced for it
                self.open[event.call_id] = call._replace(provider=event.provider,
                                                         model=event.model)
        elif isinstance(event, CompactionRequested):
            self.compaction = event.focus
        elif isinstance(event, ContextCompressed | CompactionSkipped):
            self.compaction = None

    def adopt(self, update: ContextUpdate) -> None:
        """Take the context state an admitted call decided (``domain.admission.context_stage``)."""
        self.context = update

    def _read(self, call: OpenCall, done: CallCompleted) -> None:
        """A client call's reading: calibrate the estimate, judge the last compression."""
        real = (done.input_tokens + done.cache_read_tokens + done.cache_write_tokens
                if done.source == "provider" else 0)
        if real:
            cal = self.calibration.get(call.model, Calibration())
            self.calibration[call.model] = calibrate(cal, call.estimated_tokens, real)
        context = self.context
        if context is not None:
            guard = record_reading(context.guard, real or None, context.threshold)
            self.context = context._replace(guard=guard)

    def __repr__(self) -> str:
        return (f"SessionState({self.session_id!r}, started={self.started}, "
                f"calls={self.calls}, open={len(self.open)})")
