"""The admission pipeline: ordered, pure stages that pass, rewrite, refuse or need work.

Every call asks its session's actor to be admitted; the actor runs :class:`Pipeline` over
the session's state and the request. Each stage is a function
``stage(state, request, now) -> Proceed | Refuse | Need``:

- :class:`Proceed` passes the (possibly rewritten) request on, with the events that
  explain what the stage decided (a spilled tool result, a compression);
- :class:`Refuse` ends admission with a status and a message for the client;
- :class:`Need` asks for work the stage cannot do purely (the model summariser calls an
  upstream model): the actor replies :class:`Pending`; the proxy does the work on its
  event loop, never blocking it on an actor, and the actor resumes the pipeline with the
  result through ``need.resume(result)``, which returns a stage result again.

The verdict is :class:`Admitted` or :class:`Refused`, carrying every stage's events;
:func:`verdict_events` adds the events that record it (SessionStarted for a new session,
then CallAdmitted or CallRefused). How to add a stage: docs/architecture/admission.md,
"How to add a stage".
"""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.history import ContextUpdate
from sessionwarden.domain.session import SessionState
from sessionwarden.events import (
    CallAdmitted,
    CallRefused,
    ContextLimits,
    Event,
    GuardrailTripped,
    IterationCounted,
    SessionStarted,
)

__all__ = [
    "Admitted",
    "Need",
    "Pending",
    "Pipeline",
    "Proceed",
    "Refuse",
    "Refused",
    "Stage",
    "StageFn",
    "StageResult",
    "Verdict",
    "stage",
    "verdict_events",
]


class Proceed(NamedTuple):
    """Pass ``request`` (possibly rewritten) to the next stage; ``events`` explain why."""

    request: CallRequest
    events: tuple[Event, ...] = ()


class Refuse(NamedTuple):
    """Refuse the call: the client gets ``status`` and an error saying ``message``."""

    status: int
    message: str
    code: str = ""
    kind: str = "invalid_request_error"
    events: tuple[Event, ...] = ()
    retry_after_s: int | None = None


class Need(NamedTuple):
    """Do ``work`` (a plain struct naming the work) and call ``resume`` with its result.

    ``resume`` must be pure too: it closes over what the stage had decided so far.
    """

    work: object
    resume: Callable[[object], "StageResult"]


StageResult = Proceed | Refuse | Need


class Stage(Protocol):
    """One admission stage; ``name`` is recorded when it refuses."""

    name: str

    def __call__(self, state: SessionState, request: CallRequest, now: datetime
                 ) -> StageResult:
        """Decide over the session's ``state`` and the ``request`` at ``now``."""
        ...


StageFn = Callable[[SessionState, CallRequest, datetime], StageResult]


class _NamedStage:
    __slots__ = ("fn", "name")

    def __init__(self, name: str, fn: StageFn) -> None:
        self.name = name
        self.fn = fn

    def __call__(self, state: SessionState, request: CallRequest, now: datetime
                 ) -> StageResult:
        return self.fn(state, request, now)

    def __repr__(self) -> str:
        return f"stage({self.name!r})"


def stage(name: str) -> Callable[[StageFn], Stage]:
    """Decorator: a pure function ``(state, request, now) -> result`` as a named stage."""

    def wrap(fn: StageFn) -> Stage:
        return _NamedStage(name, fn)

    return wrap


class Admitted(NamedTuple):
    """The request to forward, and the events every stage decided."""

    request: CallRequest
    events: tuple[Event, ...]


class Refused(NamedTuple):
    """The refusal a stage decided, and the events decided before it."""

    stage: str
    status: int
    message: str
    code: str
    kind: str
    request: CallRequest
    events: tuple[Event, ...]
    retry_after_s: int | None = None


class Pending(NamedTuple):
    """Admission waits for ``work``; :meth:`Pipeline.resume` continues it."""

    work: object
    stage_index: int
    resume: Callable[[object], StageResult]
    request: CallRequest
    events: tuple[Event, ...]


Verdict = Admitted | Refused | Pending


class Pipeline:
    """An ordered list of stages, run until one refuses or asks for work, or all pass."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        """The stages, in the order they run."""
        self.stages = tuple(stages)

    def run(self, state: SessionState, request: CallRequest, now: datetime) -> Verdict:
        """Run every stage from the first; a side call of the daemon's own skips them all.

        A side call (the model summariser's) is admitted so it is recorded before it is
        sent and metered like any call, but it is not governed: its request is the
        daemon's, built within bounds, and governing it would recurse.
        """
        if request.purpose:
            return Admitted(request, ())
        return self._from(0, state, request, (), now)

    def resume(self, pending: Pending, result: object, state: SessionState,
               now: datetime) -> Verdict:
        """Continue a :class:`Pending` admission with the result of its work."""
        outcome = pending.resume(result)
        return self._step(outcome, pending.stage_index, state, pending.request, pending.events, now)

    def _from(self, index: int, state: SessionState, request: CallRequest,
              events: tuple[Event, ...], now: datetime) -> Verdict:
        if index >= len(self.stages):
            return Admitted(request, events)
        outcome = self.stages[index](state, request, now)
        return self._step(outcome, index, state, request, events, now)

    def _step(self, outcome: StageResult, index: int, state: SessionState,
              request: CallRequest, events: tuple[Event, ...], now: datetime) -> Verdict:
        if isinstance(outcome, Proceed):
            return self._from(index + 1, state, outcome.request, events + outcome.events, now)
        if isinstance(outcome, Need):
            return Pending(outcome.work, index, outcome.resume, request, events)
        return Refused(self.stages[index].name, outcome.status, outcome.message, outcome.code,
                       outcome.kind, request, events + outcome.events, outcome.retry_after_s)


def _changed_limits(state: SessionState, context: object) -> ContextLimits | None:
    """The limits the context stage governed under, if this state has not recorded them."""
    if not isinstance(context, ContextUpdate) or not context.window:
        return None
    limits = ContextLimits(context.threshold, context.window, context.compression)
    return None if limits == state.limits else limits


def verdict_events(state: SessionState, verdict: Admitted | Refused) -> list[Event]:
    """The events that record ``verdict``, in order.

    SessionStarted first when the session is new (the caller appends with ``NO_STREAM``),
    then the stages' events, then CallAdmitted or CallRefused.
    """
    request = verdict.request
    events: list[Event] = []
    if not state.started:
        model = f"{request.provider}/{request.model}" if request.provider else request.model
        events.append(SessionStarted(model=model,
                                     client=request.client,
                                     parent_session_id=request.parent_session or None))
    if isinstance(verdict, Admitted):
        events.extend(verdict.events)
    else:
        # A refused call was never sent: it is no iteration of its turn, and what the
        # guards found is found again at the next call (events.runaway).
        events.extend(e for e in verdict.events
                      if not isinstance(e, IterationCounted | GuardrailTripped))
    if isinstance(verdict, Admitted):
        events.append(CallAdmitted(
            call_id=request.call_id, provider=request.provider, model=request.model,
            message_count=request.shape.message_count,
            estimated_tokens=request.estimated_tokens, stream=request.shape.stream,
            purpose=request.purpose, parent_call=request.parent_call, request=request.record,
            limits=_changed_limits(state, request.context),
        ))
    else:
        events.append(CallRefused(call_id=request.call_id, stage=verdict.stage,
                                  status=verdict.status, reason=verdict.message,
                                  code=verdict.code))
    return events
