"""SessionActor: admits a session's calls and records how they end; sessions are sharded.

The shell of the domain's session policy: a message comes in; the actor loads the
session's state, lets the domain decide (the admission pipeline, a call's completion)
with ``clock.now()``, folds the decided events into the state, appends them, and replies
once they are durable. Nothing is sent upstream before its CallAdmitted is committed, and
no response is released before its CallCompleted is: a call is recorded or refused before
it is sent, and every call that returned to a client is in the ledger.

Many sessions must not mean many threads, so a fixed number of shards share them, chosen
by a stable hash of the session id. A shard keeps recent sessions in an LRU map and
passivates the least recently used once it holds too many; a session is recovered on
demand by :meth:`SessionActor.load`, folded from its stream (its governed history too,
rebuilt from the call records and the log's contents). A session with appends in flight
is never passivated, so a recovery never reads a stream about to grow.

Stream ``session-<id>``: SessionStarted (with ``NO_STREAM``: once only), CallAdmitted,
CallRefused, CallCompleted (idempotency key ``done:<call id>``: at most one per call).
"""

import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
from loguru import logger
from sessionwarden.actors.bridge import PENDING, GovernedActor, Reply
from sessionwarden.actors.errors import ActorCrash
from sessionwarden.actors.messages import (
    Abandon,
    AdjustIterations,
    AdmissionGranted,
    AdmissionRefused,
    Admit,
    AdoptPrepared,
    Complete,
    CountChild,
    NeedsWork,
    RecordRefusal,
    RequestCompaction,
    Reroute,
    Resend,
    Resume,
    new_event,
)
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.config import Config
from sessionwarden.domain.admission.pipeline import (
    Admitted,
    Pending,
    Pipeline,
    Proceed,
    Refused,
    Stage,
    Verdict,
    verdict_events,
)
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.calls import complete_call
from sessionwarden.domain.context.prepared import (
    PreparationFailed,
    PreparedCompression,
    applies,
    prepared_event,
)
from sessionwarden.domain.context.summariser import (
    SummariserHealth,
    cooldown_seconds,
    record_failure,
)
from sessionwarden.domain.context.transcript import content_key
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.errors import UnknownCall
from sessionwarden.domain.session import (
    SessionState,
    adjusted,
    child_counted,
    recover,
    resume,
    session_stream,
)
from sessionwarden.events import (
    CODEC,
    CallResent,
    CompactionRequested,
    CompactionSkipped,
    CompressionDropped,
    ContextCompressed,
    Event,
    SessionStarted,
    SummariserFailed,
)
from sessionwarden.redact import default_redactor
from sessionwarden.store import ANY, NO_STREAM, Content, EventLog, StreamAppend
from sessionwarden.store.errors import IdempotencyConflict, StoreError, WrongExpectedVersion
from sessionwarden.store.writer import AppendRequest

__all__ = ["SessionActor", "session_shard"]

_STARTED = SessionStarted.type_tag()


def session_shard(session_id: str, shards: int) -> int:
    """The shard that owns ``session_id`` (stable across restarts)."""
    return zlib.crc32(session_id.encode()) % shards


class _Appended:
    """Told by the store's writer thread when an append of this actor failed."""

    __slots__ = ("answer", "error", "parts", "reply", "session_id")

    def __init__(self, session_id: str, error: BaseException,
                 parts: list[StreamAppend], reply: Reply, answer: object) -> None:
        self.session_id = session_id
        self.error = error
        self.parts = parts
        self.reply = reply
        self.answer = answer


class SessionActor(GovernedActor):
    """One shard of the sessions: runs admissions and completions of their calls."""

    def __init__(
        self,
        log: EventLog,
        *,
        pipeline: Pipeline | None = None,
        clock: Clock | None = None,
        redact: Callable[[str], str] = default_redactor.redact,
        max_sessions: int = 2000,
        max_pending: int = 10_000,
        on_failure: Callable[[BaseException], None] | None = None,
        prices: PriceBook | None = None,
        resend: Stage | None = None,
        keep_content: Callable[[bytes], bool] | None = None,
    ) -> None:
        """Serve sessions from ``log``, keeping at most ``max_sessions`` in memory.

        ``max_pending`` bounds admissions waiting for work: a proxy that never resumes
        (its task died) must not grow the map for ever; the oldest is forgotten first.
        ``prices`` prices each completion (without it every cost is ``unknown``).
        ``resend`` is the context stage a call the upstream found too long is governed
        again with (a lower compression target, the builtin summariser); without it such
        a call is not resent. ``keep_content`` says whether a content the actor records
        itself (a compression prepared ahead) may be stored: None when message recording
        is off; False for one holding a key the daemon uses.
        """
        super().__init__(on_failure)
        self._log = log
        self._pipeline = pipeline or default_pipeline(Config())
        self._clock = clock or SystemClock()
        self._redact = redact
        self._prices = prices
        self._resend = resend
        self._keep_content = keep_content
        self._max = max_sessions
        self._max_pending = max_pending
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        # The appends of each session not known to be finished: a session with one is not
        # passivated. Finished ones are pruned when looked at, so a successful append
        # costs the actor no message at all (the writer replies to the caller directly).
        self._in_flight: dict[str, list[AppendRequest]] = {}
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self.passivated = 0

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch Admit, Resume, Abandon, Complete, RequestCompaction, RecordRefusal, ...

        ... Resend, Reroute and the writer's reports.
        """
        if isinstance(message, Admit):
            state = self._get(message.request.session_id)
            verdict = self._pipeline.run(state, message.request, self._clock.now())
            return self._conclude(state, verdict, reply)
        if isinstance(message, Complete):
            return self._complete(message, reply)
        if isinstance(message, Resume):
            pending = self._pending.pop(message.call_id, None)
            if pending is None:
                raise UnknownCall(message.call_id, "has no admission waiting for work")
            state = self._get(message.session_id)
            verdict = self._pipeline.resume(pending, message.result, state, self._clock.now())
            return self._conclude(state, verdict, reply)
        if isinstance(message, RequestCompaction):
            return self._request_compaction(message, reply)
        if isinstance(message, AdoptPrepared):
            return self._adopt_prepared(message, reply)
        if isinstance(message, CountChild | AdjustIterations):
            return self._count(message, reply)
        if isinstance(message, RecordRefusal):
            state = self._get(message.request.session_id)
            return self._conclude(state, Refused(
                message.stage, message.status, message.message, message.code,
                "invalid_request_error", message.request, ()), reply)
        if isinstance(message, Resend):
            return self._resend_call(message, reply)
        if isinstance(message, Reroute):
            return self._reroute(message, reply)
        if isinstance(message, Abandon):
            self._pending.pop(message.call_id, None)
            return None
        if isinstance(message, _Appended):
            self._appended(message)
            return None
        raise TypeError(f"SessionActor cannot handle {type(message).__name__}")

    # -- state ---------------------------------------------------------------------------

    def load(self, session_id: str) -> SessionState:
        """The one loader: a session's state folded from its stream (new if never seen).

        Its governed history too (``domain.context.rebuild``), with the stand-ins and
        the summary state read from the log's contents: the next resend goes upstream
        byte for byte as it would have without the restart or the passivation.
        """
        stream = session_stream(session_id)
        state, history = recover(session_id, (
            (CODEC.decode(record.type, record.data), record.recorded_at)
            for record in self._log.read_stream(stream)))
        needs = history.needs()
        resume(state, history, self._log.read_contents(needs) if needs else {})
        return state

    def _get(self, session_id: str) -> SessionState:
        state = self._sessions.get(session_id)
        if state is None:
            state = self.load(session_id)
            self._passivate(room=1)  # before inserting: never evict the session being added
            self._sessions[session_id] = state
        else:
            self._sessions.move_to_end(session_id)
            if len(self._sessions) > self._max:  # over, while appends were in flight
                self._passivate(keep=session_id)
        return state

    def _passivate(self, room: int = 0, keep: str | None = None) -> None:
        """Passivate idle sessions, least recently used first, leaving ``room`` free.

        Sessions with appends in flight stay (their views are about to change), and so
        does ``keep``, the session being served; so the map may hold more than
        ``max_sessions`` for a while; it is trimmed whenever a session is next served.
        """
        limit = self._max - room
        if len(self._sessions) <= limit:
            return
        for session_id in list(self._sessions):
            if len(self._sessions) <= limit:
                break
            if session_id != keep and not self._busy(session_id):
                del self._sessions[session_id]
                self.passivated += 1

    def _busy(self, session_id: str) -> bool:
        """Whether the session has an append not yet finished."""
        requests = self._in_flight.get(session_id)
        if requests is None:
            return False
        requests[:] = [r for r in requests if not r.finished]
        if requests:
            return True
        del self._in_flight[session_id]
        return False

    # -- decisions -------------------------------------------------------------------------

    def _conclude(self, state: SessionState, verdict: Verdict, reply: Reply) -> object:
        if isinstance(verdict, Pending):
            call_id = verdict.request.call_id
            self._pending[call_id] = verdict
            while len(self._pending) > self._max_pending:
                self._pending.popitem(last=False)
            return NeedsWork(call_id, verdict.work)
        expected = ANY if state.started else NO_STREAM
        events = verdict_events(state, verdict)
        for event in events:
            state.fold(event)
        answer: object
        if isinstance(verdict, Admitted):
            if verdict.request.context is not None:
                # Adopted with the events: should the append fail, the actor restarts
                # and the session is loaded afresh, without it.
                state.adopt(verdict.request.context)
            if verdict.request.guards is not None:
                state.guards = verdict.request.guards
            answer = AdmissionGranted(verdict.request, verdict.events)
        else:
            answer = AdmissionRefused(verdict.status, verdict.message, verdict.code,
                                      verdict.kind, verdict.retry_after_s)
        # The contents CallAdmitted's record names go in the same append: a call is never
        # recorded as sent with contents the log does not have.
        contents = (tuple(Content(key, data) for key, data in verdict.request.contents)
                    if isinstance(verdict, Admitted) else ())
        part = StreamAppend(session_stream(state.session_id),
                            tuple(new_event(e) for e in events), expected, contents=contents)
        self._append(state.session_id, [part], reply, answer)
        return PENDING

    def _complete(self, message: Complete, reply: Reply) -> object:
        outcome = message.outcome
        state = self._get(outcome.session_id)
        event = complete_call(state, outcome, self._clock.now(), self._redact, message.limits,
                              self._prices)
        state.fold(event)
        # The key makes a completion retried across a restart harmless: stored once.
        part = StreamAppend(session_stream(state.session_id),
                            (new_event(event, idempotency_key=f"done:{event.call_id}"),), ANY)
        self._append(state.session_id, [part, *message.parts], reply, event)
        return PENDING

    def _request_compaction(self, message: RequestCompaction, reply: Reply) -> object:
        state = self._get(message.session_id)
        if not state.started:
            return False
        event = CompactionRequested(focus=message.focus)
        state.fold(event)
        part = StreamAppend(session_stream(state.session_id), (new_event(event),), ANY)
        self._append(state.session_id, [part], reply, True)
        return PENDING

    def _count(self, message: CountChild | AdjustIterations, reply: Reply) -> object:
        """A child's call counted in this turn, or the control API's adjustment."""
        state = self._get(message.session_id)
        event: Event | None
        if isinstance(message, CountChild):
            event = child_counted(state.turn, message.call_id, message.child)
        else:
            event = adjusted(state.turn, message.consume, message.refund)
        if event is None or not state.started:
            return None
        state.fold(event)
        part = StreamAppend(session_stream(state.session_id), (new_event(event),), ANY)
        self._append(state.session_id, [part], reply, state.turn)
        return PENDING

    def _adopt_prepared(self, message: AdoptPrepared, reply: Reply) -> object:
        """Record a compression prepared ahead, ready for the call that needs it; or drop it.

        It is kept only while it is the preparation the session waits for and the
        history still starts with what it was made from (a call may have compressed or
        reset it meanwhile).
        """
        state = self._get(message.session_id)
        outcome = message.outcome
        context = state.context
        history = context.history if context is not None else None
        failed: tuple[Event, ...] = ()
        if isinstance(outcome, PreparationFailed):
            # The model failed: recorded as any summary failure, so it cools for this
            # session (the crossing call compacts without asking it again) and for all.
            health = record_failure(context.health if context else SummariserHealth(),
                                    self._clock.now())
            if context is not None:
                state.context = context._replace(health=health)
            failed = (SummariserFailed(
                call_id=message.call_id, model=outcome.model, reason=outcome.reason[:200],
                action="dropped", cooldown_s=cooldown_seconds(health.failures)),)
            outcome = f"the summary failed: {outcome.reason}"
        reason = outcome if isinstance(outcome, str) else (
            "stale: the history changed while it was prepared"
            if state.preparing != message.call_id or history is None
            or not isinstance(outcome, PreparedCompression) or not applies(outcome, history)
            else "")
        events: tuple[Event, ...]
        contents: tuple[Content, ...] = ()
        if reason:
            events, answer = (*failed, CompressionDropped(call_id=message.call_id,
                                                          reason=reason)), None
        else:
            event, stored = prepared_event(outcome, self._keep_content)
            events, answer = (event,), outcome
            contents = tuple(Content(key, data) for key, data in stored)
        for e in events:
            state.fold(e)
        if answer is not None:
            state.prepared = answer
        part = StreamAppend(session_stream(state.session_id),
                            tuple(new_event(e) for e in events), ANY, contents=contents)
        self._append(state.session_id, [part], reply, answer)
        return PENDING

    def _resend_call(self, message: Resend, reply: Reply) -> object:
        """Compress the call's history further and record what goes upstream the second time.

        The stage runs over the client's request again, with a compaction asked for: the
        governed history adopted at admission recognises it whole, so the only change is
        the compression, at a lower target. Nothing is recorded when it saved nothing.
        """
        request = message.request
        state = self._get(request.session_id)
        if self._resend is None or request.call_id not in state.open:
            return None
        asked = CompactionRequested(focus="the upstream said the request is too long")
        state.fold(asked)
        outcome = self._resend(state, request, self._clock.now())
        if not isinstance(outcome, Proceed) or not any(
                isinstance(e, ContextCompressed) for e in outcome.events):
            state.fold(CompactionSkipped(call_id=request.call_id, reason="resend: nothing "
                                         "more to compress"))
            return None
        governed = outcome.request
        events = [asked, *outcome.events,
                  CallResent(call_id=request.call_id, reason=message.reason,
                             request=governed.record)]
        for event in events[1:]:
            state.fold(event)
        if governed.context is not None:
            state.adopt(governed.context)
        part = StreamAppend(session_stream(state.session_id),
                            tuple(new_event(e) for e in events), ANY,
                            contents=tuple(Content(k, d) for k, d in governed.contents))
        self._append(state.session_id, [part], reply,
                     AdmissionGranted(governed, tuple(outcome.events)))
        return PENDING

    def _reroute(self, message: Reroute, reply: Reply) -> object:
        """Record that a call goes to its fallback route, with the fields sent there."""
        state = self._get(message.session_id)
        if message.call_id not in state.open:
            return False
        fields = message.fields
        ref = (content_key(fields), len(fields))
        record = msgspec.structs.replace(message.record, fields=ref)
        event = CallResent(call_id=message.call_id, reason=message.reason, request=record,
                           provider=message.provider, model=message.model)
        state.fold(event)
        contents = (Content(ref[0], fields),) if record.stored else ()
        part = StreamAppend(session_stream(state.session_id), (new_event(event),), ANY,
                            contents=contents)
        self._append(state.session_id, [part], reply, True)
        return PENDING

    # -- appends ---------------------------------------------------------------------------

    def _append(self, session_id: str, parts: list[StreamAppend], reply: Reply,
                answer: object) -> None:
        """Submit ``parts`` atomically; ``reply(answer)`` once they are durable."""
        ref = self.actor_ref

        def committed(request: AppendRequest) -> None:
            # The writer's thread: reply at once when all went well (the caller is waiting
            # on it). A failure goes to the actor's own thread, which decides what to do.
            if request.error is None:
                reply(answer, None)
                return
            try:
                ref.tell(_Appended(session_id, request.error, parts, reply, answer))
            except Exception:  # the actor is gone; its successor reloads from the views
                reply(None, request.error)

        try:
            request = self._log.submit(parts, callback=committed)
        except StoreError as exc:
            # The state already folded these events: it cannot be trusted any more.
            raise ActorCrash(f"cannot append: {exc}") from exc
        pending = self._in_flight.get(session_id)
        if pending is None:
            self._in_flight[session_id] = [request]
        else:  # pruned here too, so a busy session's list stays as short as its queue
            pending[:] = [r for r in pending if not r.finished]
            pending.append(request)

    def _appended(self, done: _Appended) -> None:
        """An append failed (the writer's report, in the actor's thread)."""
        error = done.error
        if isinstance(error, WrongExpectedVersion) and self._drop_start(done):
            return
        if isinstance(error, IdempotencyConflict):
            # This call's completion is already in the log (a retry across a restart that
            # saw the response at another instant): the first record stands.
            done.reply(done.answer, None)
            return
        done.reply(None, error)
        if isinstance(error, StoreError):
            # The state folded what was never written: start again from the log.
            logger.error("session {}: append failed: {}", done.session_id, error)
            raise ActorCrash(f"append failed: {error}") from error

    def _drop_start(self, done: _Appended) -> bool:
        """The session's stream exists after all: append the same events minus the start.

        That happens when an earlier instance's start was still in flight when this one
        loaded the session. Nothing was written, so the facts are re-appended as they are.
        """
        first = done.parts[0]
        if first.expected_version is not NO_STREAM:
            return False
        rest = tuple(e for e in first.events if e.type != _STARTED)
        parts = [StreamAppend(first.stream, rest, ANY, contents=first.contents),
                 *done.parts[1:]]
        self._append(done.session_id, parts, done.reply, done.answer)
        return True

    def snapshot(self) -> dict[str, Any]:
        """Counts for status and tests: sessions in memory, admissions waiting for work."""
        return {"sessions": len(self._sessions), "pending": len(self._pending),
                "passivated": self.passivated}
