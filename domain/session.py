"""A session's state as the domain sees it, and how its events fold into it.

:class:`SessionState` is what the admission stages decide over and what a completion
needs: whether the session started, how many calls it has had, and its open calls (each
with what admission knew of it). :meth:`SessionState.fold` is the one place an event
changes it, so an actor that decides, appends and folds, and one that rebuilds the state
from the log, end in the same state.
"""

from typing import NamedTuple

from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CompactionRequested,
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


class SessionState:
    """One session's state; owned by exactly one actor at a time (not thread-safe).

    Attributes:
        session_id: the session.
        started: whether SessionStarted is in its stream.
        calls: calls admitted so far.
        refused: calls the pipeline refused so far.
        open: admitted calls without a completion yet, by call id.
        compaction: the focus of a compaction asked for and not yet done (None: none).
    """

    __slots__ = ("calls", "compaction", "open", "refused", "session_id", "started")

    def __init__(self, session_id: str, *, started: bool = False, calls: int = 0,
                 refused: int = 0, open_calls: dict[str, OpenCall] | None = None) -> None:
        """A state as recovered from the log (a new session by default)."""
        self.session_id = session_id
        self.started = started
        self.calls = calls
        self.refused = refused
        self.open: dict[str, OpenCall] = dict(open_calls or {})
        self.compaction: str | None = None

    def fold(self, event: Event) -> None:
        """Apply one of the session's events."""
        if isinstance(event, CallAdmitted):
            self.calls += 1
            self.open[event.call_id] = OpenCall(event.provider, event.model,
                                                event.estimated_tokens)
        elif isinstance(event, CallCompleted):
            self.open.pop(event.call_id, None)
        elif isinstance(event, CallRefused):
            self.refused += 1
        elif isinstance(event, SessionStarted):
            self.started = True
        elif isinstance(event, CompactionRequested):
            self.compaction = event.focus

    def __repr__(self) -> str:
        return (f"SessionState({self.session_id!r}, started={self.started}, "
                f"calls={self.calls}, open={len(self.open)})")
