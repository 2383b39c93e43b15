"""A proxied call's two steps through the actors: admission, then completion.

:func:`admit` takes a call through the spend caps and the admission pipeline;
:func:`complete` records how it ended. The event loop never blocks on an actor.

:func:`admit` asks the UsageLedgerActor, which reserves the call's worst case against the
spend caps (or decides its refusal) and hands it on to the session's actor to run the
admission pipeline (a daemon where no cap applies goes straight to the session's actor:
nothing needs holding; the ledger folds the log's costs when a cap is first set). When a stage needs
work it cannot do purely (a summary from a model, say), the actor answers
:class:`~sessionwarden.actors.messages.NeedsWork`; the work is done here, on the event
loop, by the runtime's performer for that kind of work, and admission resumes with the
result.

:func:`complete` records how the call ended: it gives the key back, then sends the
outcome through the rate guard to the session's actor, which appends the completion (and
any rate-limit observation) in one atomic append and replies once it is durable. An
actor that is restarting does not lose the record: the completion is retried, on its
successor, until a deadline (the idempotency key makes a retry that races the first
attempt harmless). It runs at most once per call, whichever path (normal end, upstream
error, client gone, shutdown) gets there first. Once the completion is durable, the
ledger is told its cost (:class:`~sessionwarden.actors.messages.Settle`) while a cap
applies; a call admission did not let through has its reservation released.
"""

import asyncio
import base64
import enum
import os
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loguru import logger
from sessionwarden.actors.bridge import ask, request, tell, wait
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import (
    Abandon,
    AdmissionGranted,
    AdmissionRefused,
    Admit,
    Complete,
    Lease,
    Leased,
    NeedsWork,
    Release,
    ReleaseReservation,
    Resume,
    Settle,
)
from sessionwarden.cmd.daemon.access import note_call, note_completion
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.config import ProviderConfig
from sessionwarden.domain.calls import CallAttempt, CallOutcome, CallRequest
from sessionwarden.domain.errors import UnknownCall
from sessionwarden.errors import Unavailable
from sessionwarden.events import CallCompleted, Event

__all__ = ["CallIdentity", "Next", "ProxiedCall", "admit", "complete", "new_call_id", "release_key",
           "request_lease", "return_lease", "served", "take_lease"]

#: How long a completion keeps trying to reach a (restarting) actor.
COMPLETE_DEADLINE_S = 30.0


def new_call_id() -> str:
    """A fresh call id: 16 characters of base32 (80 random bits)."""
    return base64.b32encode(os.urandom(10)).decode().lower()


class Next(enum.Enum):
    """What a step of a call's path leaves the call to do.

    Named, not a boolean: as booleans, "relayed" and "failed over" were both True and
    meant opposite things.
    """

    #: The request goes upstream again: another key, a retry, a fallback route, a resend.
    SEND_AGAIN = "send again"
    #: No recovery applies: the caller answers the client with what it has.
    ANSWER = "answer"
    #: The client has its answer (or the call ended): nothing more to do.
    DONE = "done"

    def __bool__(self) -> bool:
        """Refused: every member would be true, so ``if step():`` would always hold."""
        raise TypeError("compare a Next with `is`, never as a truth value")


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Who a call is, fixed when it arrives: nothing on its path may change it."""

    call_id: str
    session_id: str
    #: The parent session (``X-Session-Parent``), "" for a root session.
    parent: str
    stream: bool
    #: ``time.perf_counter()`` at arrival: the call's latency counts from here.
    started: float


class ProxiedCall:
    """What the proxy knows about one call while it is in flight.

    Two parts: its :class:`CallIdentity` (immutable: read through the properties below)
    and the state its attempts change — the route (provider, model, key), the request
    sent, the failed attempts and retries, and what the last error was. A new call
    notes itself in the access line of the request it serves.
    """

    __slots__ = (
        "admitted",
        "attempts",
        "body",
        "bounded",
        "client_request",
        "decided",
        "endpoint",
        "error_class",
        "identity",
        "lease",
        "model",
        "provider",
        "recorded",
        "released",
        "resent",
        "retries",
        "sent_at",
        "side",
        "tried",
    )

    def __init__(self, session_id: str, provider: ProviderConfig, model: str,
                 stream: bool, parent: str = "", endpoint: str = "") -> None:
        """A new call of ``session_id`` (child of ``parent``) to ``provider``'s ``model``.

        ``endpoint``: what follows the adapter's upstream path (a side endpoint, the
        client's query string), "" for the format's main path.
        """
        self.identity = CallIdentity(new_call_id(), session_id, parent, stream,
                                     time.perf_counter())
        self.endpoint = endpoint
        # -- the route: a fallback route or a failover changes these
        self.provider = provider
        self.model = model
        self.lease: Leased | None = None
        #: Whether :attr:`lease` went back to the pool (a failover takes a new one).
        self.released = False
        # -- the request
        #: The client's request as asked (governed again if the upstream finds it too
        #: long, once: ``resent``) and the body sent upstream now.
        self.client_request: CallRequest | None = None
        #: The request as admitted (its fallback route is taken from it mid-call too).
        self.admitted: CallRequest | None = None
        self.resent = False
        #: A side call's request (a summary), None for a client's call (its span's parent).
        self.side: CallRequest | None = None
        #: The events admission decided for the call (spills, a compression, ...), and
        #: those of a resend governed again: what its trace span shows of them.
        self.decided: tuple[Event, ...] = ()
        self.body = b""
        # -- the attempts
        #: When the request last went upstream (a success ends benches set before it).
        self.sent_at: datetime | None = None
        #: The keys tried and failed over from, and each failed attempt.
        self.tried: list[str] = []
        self.attempts: list[CallAttempt] = []
        #: Retries of the same request after an overload, a 5xx or a timeout (at most 2).
        self.retries = 0
        #: The class of the last upstream error (``domain.classify.classifier``), "" if none.
        self.error_class = ""
        # -- the end
        #: Its stream was cut at the output bound its reservation holds: the ledger
        #: charges it that reservation at most.
        self.bounded = False
        #: Its completion was recorded (so it is never recorded twice).
        self.recorded = False
        note_call(self.call_id, session_id, provider.name, model)

    @property
    def call_id(self) -> str:
        """The call's id (``x-sessionwarden-call-id``)."""
        return self.identity.call_id

    @property
    def session_id(self) -> str:
        """The session the call belongs to."""
        return self.identity.session_id

    @property
    def parent(self) -> str:
        """The parent session, "" for a root session."""
        return self.identity.parent

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream."""
        return self.identity.stream

    @property
    def started(self) -> float:
        """``time.perf_counter()`` when the call arrived."""
        return self.identity.started

    def outcome(self, outcome: str, **facts: Any) -> CallOutcome:
        """The call's outcome with ``facts`` (status, usage, …) and its latency so far."""
        return CallOutcome(
            call_id=self.call_id, session_id=self.session_id, outcome=outcome,
            provider=self.provider.name, api_mode=self.provider.api_mode,
            latency_ms=(time.perf_counter() - self.started) * 1000,
            credential=self.lease.fingerprint if self.lease else "", model=self.model,
            attempts=tuple(self.attempts), **{"error_class": self.error_class, **facts},
        )


async def admit(rt: Runtime, request: CallRequest) -> AdmissionGranted | AdmissionRefused:
    """Run the call through its session's admission pipeline, doing any work it needs.

    Raises:
        ActorUnavailable: the session's actor is not running or did not answer.
    """
    session_id, call_id = request.session_id, request.call_id
    reply: object = None
    try:
        if not rt.caps_active:  # no cap can apply: the ledger is told at settle
            reply = await ask(rt.session_ref(session_id), Admit(request))
        else:
            reply = await ask(rt.ledger, Admit(request))
        while isinstance(reply, NeedsWork):
            perform = rt.performers.get(type(reply.work))
            if perform is None:
                raise ActorUnavailable(f"no performer for {type(reply.work).__name__}")
            result = await perform(reply.work)
            reply = await ask(rt.session_ref(session_id), Resume(session_id, call_id, result))
    except BaseException:
        if isinstance(reply, NeedsWork):  # the actor would wait for a resume for ever
            try:
                tell(rt.session_ref(session_id), Abandon(call_id))
            except Exception:
                pass
        _release_reservation(rt, call_id)
        raise
    assert isinstance(reply, AdmissionGranted | AdmissionRefused), reply
    if isinstance(reply, AdmissionRefused):
        _release_reservation(rt, call_id)
    else:
        # Work the admission asked for in the background (a compaction prepared ahead):
        # started now that its CompressionPreparing is durable, never awaited here.
        work = getattr(reply.request.context, "prepare", None)
        start = rt.starters.get(type(work)) if work is not None else None
        if start is not None:
            start(work)
    return reply


def _release_reservation(rt: Runtime, call_id: str) -> None:
    """The call will not be sent: free what the ledger reserved for it (if anything)."""
    try:
        tell(rt.ledger, ReleaseReservation(call_id))
    except Exception:
        pass  # a restarted ledger rebuilt its spend from the log: nothing is held


def request_lease(rt: Runtime, call: ProxiedCall) -> "asyncio.Future[Leased] | None":
    """Ask the pool for the call's key without waiting (None: the pool is not running).

    Asked while admission runs, so neither waits for the other.
    """
    try:
        return request(rt.credentials, Lease(call.provider.name, call.call_id))
    except ActorUnavailable:
        return None


async def take_lease(call: ProxiedCall, leasing: "asyncio.Future[Leased] | None") -> Leased:
    """Wait for the key asked for by :func:`request_lease`; ``call`` holds it too.

    Raises:
        NoCredential: the provider has no usable key.
        ActorUnavailable: the credential pool is not running.
    """
    if leasing is None:
        raise ActorUnavailable("the credential pool is not running")
    call.lease = await wait(leasing)
    return call.lease


def return_lease(rt: Runtime, call: ProxiedCall,
                 leasing: "asyncio.Future[Leased] | None") -> None:
    """Give back the key of a call that will not be sent, whenever the lease arrives."""
    if leasing is None:
        return

    def done(future: "asyncio.Future[Leased]") -> None:
        if not future.cancelled() and future.exception() is None:
            call.lease = future.result()
            release_key(rt, call)

    leasing.add_done_callback(done)


def release_key(rt: Runtime, call: ProxiedCall, served: bool = False) -> None:
    """Give the call's key back to the pool (once per lease; the pool's count is memory).

    ``served``: the upstream answered with that key (not a key failure), so a bench the
    key got before the call was sent is over.
    """
    lease = call.lease
    if lease is not None and not call.released:
        call.released = True
        try:
            tell(rt.credentials, Release(lease.provider, lease.fingerprint,
                                               served=served, sent_at=call.sent_at,
                                               call_id=call.call_id))
        except Exception:
            logger.warning("call {}: could not release its key", call.call_id)


async def complete(rt: Runtime, call: ProxiedCall, outcome: CallOutcome) -> bool:
    """Record ``outcome`` durably; True once it is (or already was) in the log.

    The recorded CallCompleted (its tokens, as the ledger has them) goes to the request's
    access line: the session's actor replies with it, so this costs no extra message.

    False means the record could not be written before the deadline: the call stays open
    in its session, and the next start completes it as ``unknown``.
    """
    if call.recorded:
        return True
    call.recorded = True
    release_key(rt, call, served=served(outcome))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMPLETE_DEADLINE_S
    attempt = 0
    while True:
        attempt += 1
        try:
            if attempt == 1:
                done = await ask(rt.rateguard, Complete(outcome), timeout=10.0)
            else:  # the rate guard may be the one in trouble: go straight to the session
                done = await ask(rt.session_ref(call.session_id), Complete(outcome),
                                 timeout=10.0)
            if isinstance(done, CallCompleted):
                note_completion(done)
                if rt.caps_active:  # else the ledger folds the log when a cap is set
                    _settle(rt, call, done, outcome)
            if rt.tracing is not None:
                rt.tracing.record(call, done if isinstance(done, CallCompleted) else None,
                                  outcome)
            return True
        except UnknownCall:
            if attempt > 1:
                return True  # an earlier attempt was recorded after all
            logger.error("call {}: its session does not know it as open", call.call_id)
            return False
        except Unavailable as exc:
            # A store failure restarts the session's actor from the log, where the call
            # is still open: a later attempt can succeed.
            if loop.time() >= deadline or rt.stopping:
                logger.error("call {}: completion not recorded: {}", call.call_id, exc)
                return False
            logger.warning("call {}: completion attempt {} failed ({}); retrying",
                           call.call_id, attempt, exc)
            await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))


def served(outcome: CallOutcome) -> bool:
    """Whether the upstream served the call: it answered, and not with a key's failure.

    An overload or a server error is not the key's fault but is not a service either.
    """
    if outcome.outcome in ("ok", "client_disconnected", "truncated"):
        return outcome.status != 0
    return outcome.outcome == "upstream_error" and outcome.status < 500 \
        and outcome.status not in (401, 402, 403, 429)


def _settle(rt: Runtime, call: ProxiedCall, done: CallCompleted, outcome: CallOutcome) -> None:
    """Tell the ledger what the recorded call cost (its reservation becomes that).

    A call without usage (``missing``) that got an error answer, or never reached the
    upstream, cost nothing: its reservation is released. One the upstream had without
    answering (the client left first, a timeout) may be billed in full: its worst case
    stays spent, as an unknown cost — released, it let a client that leaves at once
    send calls the cap never counted.
    """
    try:
        if done.source == "missing" and (
                outcome.status >= 400 or call.sent_at is None
                or outcome.outcome in ("unreachable", "no_credential")):
            tell(rt.ledger, ReleaseReservation(done.call_id))
            return
        tell(rt.ledger, Settle(done.call_id, outcome.session_id, outcome.provider,
                                     done.cost if done.cost_status != "unknown" else None,
                                     call.parent, bounded=call.bounded))
    except Exception:
        logger.warning("call {}: the ledger was not told its cost; its reservation stays "
                       "held until the next start", done.call_id)
