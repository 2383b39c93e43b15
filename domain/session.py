"""A session's state as the domain sees it, and how its events fold into it.

:class:`SessionState` is what the admission stages decide over and what a completion
needs: whether the session started, how many calls it has had, and its open calls (each
with what admission knew of it). :meth:`SessionState.fold` is the one place an event
changes it, so an actor that decides, appends and folds, and one that rebuilds the state
from the log, end in the same state.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from sessionwarden.domain.context.history import ContextUpdate, GovernedHistory
from sessionwarden.domain.context.prepared import PreparedCompression
from sessionwarden.domain.context.rebuild import HistoryFold
from sessionwarden.domain.context.summariser import (
    SummariserHealth,
    record_failure,
    record_success,
)
from sessionwarden.domain.context.trigger import (
    Calibration,
    CompressionGuard,
    calibrate,
    record_compression,
    record_reading,
)
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    CompactionRequested,
    CompactionSkipped,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
    ContextLimits,
    Event,
    IterationCounted,
    IterationsAdjusted,
    SessionStarted,
    SummariserFailed,
)
from sessionwarden.events.times import parse_time

__all__ = ["OpenCall", "SessionState", "Turn", "adjusted", "child_counted", "recover",
           "session_id_of", "session_stream"]

_PREFIX = "session-"


def session_stream(session_id: str) -> str:
    """The stream of a session."""
    return _PREFIX + session_id


def session_id_of(stream: str) -> str | None:
    """The session a stream belongs to, or None for another kind of stream."""
    return stream[len(_PREFIX):] if stream.startswith(_PREFIX) else None


class Turn(NamedTuple):
    """The session's current turn as its IterationCounted events left it (events.runaway).

    ``items`` and ``last``: the client's items at the last counted call (how many, and
    the identity of the last), by which a resend is recognised and new items are found.
    """

    turn: str
    used: int
    limit: int
    decision: str
    items: int
    last: str


def child_counted(turn: Turn | None, call_id: str, child: str) -> IterationCounted | None:
    """A child session's call, counted in this (its parent's) turn; None with no turn yet."""
    if turn is None:
        return None
    return IterationCounted(call_id=call_id, turn=turn.turn, used=turn.used + 1,
                            limit=turn.limit, decision=turn.decision, items=turn.items,
                            last=turn.last, child=child)


def adjusted(turn: Turn | None, consume: int, refund: int) -> IterationsAdjusted | None:
    """The turn's count after the control API consumed and refunded; None with no turn.

    Never below zero: a refund of more than was used leaves none used.
    """
    if turn is None:
        return None
    used = max(0, turn.used + consume - refund)
    return IterationsAdjusted(consumed=consume, refunded=refund, used=used)


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
        limits: the context limits last recorded (CallAdmitted's ``limits``).
        lost: why the governed history could not be rebuilt from the log ("": it was,
            or there was none); the next call's HistoryReset says it.
        preparing: the call whose compression is being prepared ahead ("": none).
        prepared: a compaction prepared ahead, ready to apply
            (``domain.context.prepared``; None: none).
        turn: the current turn's iterations (``domain.admission.runaway_stage``; None
            before the first counted call).
        guards: the turn's tool-loop guard state (memory only: rebuilt from the turn's
            items at its next call; ``domain.runaway.guardrails``).
    """

    __slots__ = ("calibration", "calls", "compaction", "context", "guards", "limits", "lost",
                 "open", "prepared", "preparing", "refused", "session_id", "started", "turn")

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
        self.lost = ""
        self.preparing = ""
        self.prepared: PreparedCompression | None = None
        self.turn: Turn | None = None
        self.guards: object = None

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
        elif isinstance(event, IterationCounted) and not event.child:
            self.turn = Turn(event.turn, event.used, event.limit, event.decision, event.items,
                             event.last)
        elif isinstance(event, IterationCounted) and self.turn is not None:
            # A child's call counts in this turn; what the client sent here is unchanged.
            self.turn = self.turn._replace(used=event.used)
        elif isinstance(event, IterationsAdjusted) and self.turn is not None:
            self.turn = self.turn._replace(used=event.used)
        elif isinstance(event, CompactionRequested):
            self.compaction = event.focus
        elif isinstance(event, CompactionSkipped):
            self.compaction = None
        elif isinstance(event, ContextCompressed):
            # Whatever compressed the history, what was prepared from it is stale now.
            self.compaction, self.prepared, self.preparing = None, None, ""
        elif isinstance(event, CompressionPreparing):
            self.preparing = event.call_id
        elif isinstance(event, CompressionPrepared | CompressionDropped):
            if self.preparing == event.call_id:
                self.preparing = ""
            if isinstance(event, CompressionDropped) and self.prepared is not None and (
                    self.prepared.call_id == event.call_id):
                self.prepared = None

    def adopt(self, update: ContextUpdate) -> None:
        """Take the context state an admitted call decided (``domain.admission.context_stage``)."""
        # The preparation's work holds the request's items: the proxy has it; we must not.
        self.context = update._replace(prepare=None) if update.prepare is not None else update

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


def recover(session_id: str, recorded: Iterable[tuple[Event, str]]
            ) -> tuple[SessionState, HistoryFold]:
    """A session's state folded from its events ``(event, recorded_at)``, in log order.

    Everything but the governed history's bytes: the caller reads the contents the
    returned fold :meth:`~HistoryFold.needs` and finishes with :func:`resume`. The guard
    counts the compressions admitted and the readings that judged them, the summariser's
    health its failures and successes, and ``last_at`` is the last governed admission's
    time, as the live admissions left them.
    """
    state = SessionState(session_id)
    history = HistoryFold()
    context = ContextUpdate(GovernedHistory(), CompressionGuard(), threshold=0)
    state.context = context  # so the readings folded below judge the compressions
    health = SummariserHealth()
    last_at = ""
    for event, at in recorded:
        for decided in history.fold(event):
            if isinstance(decided, ContextCompressed):
                context = state.context
                state.context = context._replace(guard=record_compression(context.guard))
                if decided.summariser == "model":
                    health = record_success(health)
            elif isinstance(decided, SummariserFailed) and decided.cooldown_s:
                health = record_failure(health, parse_time(at) or datetime.min)
        state.fold(event)
        if isinstance(event, CallAdmitted) and not event.purpose and event.request:
            last_at = at
        if isinstance(event, CallAdmitted) and event.limits is not None:
            limits = event.limits
            state.context = state.context._replace(
                threshold=limits.threshold, window=limits.window,
                compression=limits.compression)
    state.context = state.context._replace(health=health, last_at=parse_time(last_at))
    return state, history


def resume(state: SessionState, history: HistoryFold, contents: Mapping[str, bytes]) -> None:
    """Give ``state`` the governed history ``history`` rebuilds from ``contents``."""
    context = state.context
    if context is None:
        return
    rebuilt = history.result(contents)
    # A preparation in flight was memory only: the next call past the mark starts another.
    state.preparing = ""
    if isinstance(rebuilt, str):
        state.context, state.lost = None, rebuilt
    elif not rebuilt.call_id and not state.calls:
        state.context = None  # never governed a call: as a new session
    else:
        state.context = context._replace(history=rebuilt)
        state.prepared = history.prepared_result(rebuilt, contents)
