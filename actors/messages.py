"""The typed messages the daemon's HTTP layer and the actors exchange, and their replies.

Frozen msgspec Structs: pykka does not copy messages between threads, so none may be
changed once sent. Two carry more than plain data: a ``CallRequest`` holds the decoded
request body, handed over to admission (the proxy does not touch it
until the reply), and :class:`Leased` carries a secret, so its ``repr`` never shows it.
"""

from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from sessionwarden.domain.calls import CallOutcome, CallRequest
from sessionwarden.domain.keys.key_states import KeyFailure
from sessionwarden.domain.keys.ratelimits import RateLimitSnapshot
from sessionwarden.events import CODEC, Event, RequestRecord
from sessionwarden.store import NewEvent, StreamAppend

__all__ = [
    "Abandon",
    "AdjustIterations",
    "AdmissionGranted",
    "AdmissionRefused",
    "Admit",
    "AdoptPrepared",
    "BudgetOf",
    "Committed",
    "Complete",
    "CountChild",
    "HasCaps",
    "KeyFailed",
    "Lease",
    "Leased",
    "LeasesInFlight",
    "NeedsWork",
    "RecordRefusal",
    "Release",
    "ReleaseReservation",
    "RequestCompaction",
    "Reroute",
    "Resend",
    "ReserveRoute",
    "Resume",
    "SetSessionCap",
    "Settle",
    "UnusableProviders",
    "new_event",
]


def new_event(event: Event, idempotency_key: str | None = None) -> NewEvent:
    """Encode a typed event into the record the store appends."""
    encoded = CODEC.encode(event)
    return NewEvent(encoded.type, encoded.data, encoded.schema_version, idempotency_key)


class Admit(msgspec.Struct, frozen=True):
    """Ask the session's actor to admit a call (runs the admission pipeline)."""

    request: CallRequest


class RecordRefusal(msgspec.Struct, frozen=True):
    """Record a call the proxy refused before admission could run (no route for its model).

    The session's actor records it as a ``CallRefused`` of stage ``stage`` (its session
    started if new), so every refused call has its trace in the log, and replies None.
    """

    request: CallRequest
    stage: str
    status: int
    message: str
    code: str = ""


class Resume(msgspec.Struct, frozen=True):
    """The work a pending admission needed is done: continue with ``result``."""

    session_id: str
    call_id: str
    result: Any


class Resend(msgspec.Struct, frozen=True):
    """The upstream said an admitted call was too long: govern it again, more compressed.

    ``request`` is the client's request as first asked (before governance), under the
    admitted call's id; ``reason`` the error's class. Reply: an :class:`AdmissionGranted`
    with the new governed ``CallRequest`` and the compression decided for it, once
    CallResent is durable, or None when there is nothing more to compress (the error is
    then relayed as it came).
    """

    request: CallRequest
    reason: str


class Reroute(msgspec.Struct, frozen=True):
    """An admitted call goes to its model's fallback route: record it before it is sent.

    ``record`` is the call's admitted request record; ``fields`` the request's fields
    re-encoded for ``provider``'s ``model``. Reply: True once CallResent is durable.
    """

    session_id: str
    call_id: str
    record: RequestRecord
    provider: str
    model: str
    fields: bytes
    reason: str


class Abandon(msgspec.Struct, frozen=True):
    """A pending admission will not be resumed (the client left, the work failed)."""

    call_id: str


class AdmissionGranted(msgspec.Struct, frozen=True):
    """Reply: the call is admitted, durably; forward ``request`` (possibly rewritten).

    ``decided``: the events the admission stages decided for the call, as appended (its
    spills, its compression, its iteration count, ...): the call's trace span shows them
    without reading the log back (``cmd/daemon/tracing``).
    """

    request: CallRequest
    decided: tuple[Event, ...] = ()


class AdmissionRefused(msgspec.Struct, frozen=True):
    """Reply: the pipeline refused the call (recorded durably); tell the client why.

    ``retry_after_s``: when waiting helps (a daily cap used up), the ``Retry-After``.
    """

    status: int
    message: str
    code: str
    kind: str
    retry_after_s: int | None = None


class NeedsWork(msgspec.Struct, frozen=True):
    """Reply: admission waits for ``work``; do it, then send :class:`Resume`."""

    call_id: str
    work: Any


class Complete(msgspec.Struct, frozen=True):
    """Record how an admitted call ended; the reply, the CallCompleted, comes once durable.

    Sent to the RateGuardActor, which reads the rate-limit headers into ``limits``, adds
    its own part when they are worth recording (``parts``), and forwards it to the
    session's actor, which decides the completion and appends everything at once. Sent
    straight to the session's actor when the rate guard is unavailable.
    """

    outcome: CallOutcome
    limits: RateLimitSnapshot | None = None
    parts: tuple[StreamAppend, ...] = ()


class RequestCompaction(msgspec.Struct, frozen=True):
    """Compress ``session_id`` at its next call, around ``focus`` (the control API).

    Reply: True once CompactionRequested is durable; False if the session is unknown.
    The daemon holds hashes of a stateless client's history, not the history itself, so
    "now" is the next call: the request that brings the history.
    """

    session_id: str
    focus: str = ""


class CountChild(msgspec.Struct, frozen=True):
    """Count a child session's call in ``session_id``'s (its parent's) current turn.

    Told, not asked: the child's call goes on whatever the parent records. No reply.
    """

    session_id: str
    child: str
    call_id: str


class AdjustIterations(msgspec.Struct, frozen=True):
    """Consume and refund iterations of ``session_id``'s current turn (the control API).

    Reply: the session's ``domain.session.Turn`` once IterationsAdjusted is durable; None
    when the session is unknown or has no turn yet.
    """

    session_id: str
    consume: int = 0
    refund: int = 0


class AdoptPrepared(msgspec.Struct, frozen=True):
    """A compression prepared ahead from call ``call_id``'s history is done (``outcome``).

    ``outcome`` is a ``domain.context.prepared.PreparedCompression``, or the reason there
    is none. Reply: the compression once CompressionPrepared is durable, or None when it is
    dropped (CompressionDropped: failed, or stale: the history changed meanwhile).
    """

    session_id: str
    call_id: str
    outcome: Any


class UnusableProviders(msgspec.Struct, frozen=True):
    """Ask the CredentialPoolActor which providers have no usable key.

    Reply: ``{provider: why}``, ``why`` naming the variables to set (or the missing keys).
    """


class LeasesInFlight(msgspec.Struct, frozen=True):
    """Ask the CredentialPoolActor how many calls each key serves right now.

    Reply: ``{provider: {fingerprint: leases in flight}}``, every key of every pool.
    This is the running pool's memory (the log records calls, not leases): the control
    API's ``GET /v1/keys`` serves it to ``sessionwarden keys list``.
    """


class Lease(msgspec.Struct, frozen=True):
    """Ask the CredentialPoolActor for a key of ``provider`` to serve ``call_id``.

    ``exclude`` names the fingerprints the call already tried (failover: at most once
    per key). Fails with ``KeysBenched`` when no key may be used now (fail fast).
    """

    provider: str
    call_id: str
    exclude: tuple[str, ...] = ()


class KeyFailed(msgspec.Struct, frozen=True):
    """An upstream failure with the key ``fingerprint``: bench it (or count an overload).

    Reply: True once the key's (and the breaker's) new state is folded (its append is
    submitted), so the call's next lease, asked right after, already avoids the key.
    """

    provider: str
    fingerprint: str
    failure: KeyFailure


class Leased:
    """A leased key. ``secret`` lives only in memory and never appears in a repr."""

    __slots__ = ("fingerprint", "provider", "secret")

    def __init__(self, provider: str, fingerprint: str, secret: str) -> None:
        """Hold a lease of the key ``fingerprint`` of ``provider``."""
        self.provider = provider
        self.fingerprint = fingerprint
        self.secret = secret

    def __repr__(self) -> str:
        return f"Leased({self.provider!r}, {self.fingerprint!r})"


class Release(msgspec.Struct, frozen=True):
    """A call is done with its key (the pool's in-flight count goes down).

    ``served`` says the upstream answered the call (not a key failure): a key benched
    before ``sent_at`` is back, and a half-open breaker closes. Not served, the call
    ``call_id`` frees the breaker's probe slot if it held it (its client left).
    """

    provider: str
    fingerprint: str
    served: bool = False
    sent_at: datetime | None = None
    call_id: str = ""


class Settle(msgspec.Struct, frozen=True):
    """Tell the UsageLedgerActor what a recorded call cost (``cost`` None: unknown).

    Its reservation becomes the cost; a call that held none (a side call, or any call
    while no cap applies) is charged, its session adopted by ``parent`` if it is new.
    ``bounded``: the call's stream was cut at its reserved output bound, so it is charged
    its reservation at most (its recorded cost is our estimate, which may count a few
    input tokens more than the reservation's).
    """

    call_id: str
    session_id: str
    provider: str
    cost: str | None
    parent: str = ""
    bounded: bool = False


class HasCaps(msgspec.Struct, frozen=True):
    """Ask the UsageLedgerActor whether any session has a cap set through the control API."""


class ReleaseReservation(msgspec.Struct, frozen=True):
    """Tell the UsageLedgerActor that ``call_id`` will not be sent: free its reservation."""

    call_id: str


class ReserveRoute(msgspec.Struct, frozen=True):
    """Ask the UsageLedgerActor to hold a call's worst case on a route before sending it.

    Two callers: the proxy before a call goes to its model's fallback route, and the
    model summariser before its side call (the route then is the summary model).
    ``request`` is the call as admitted; ``provider`` and ``model`` the route. The route's
    worst case (its model's price and output bound) replaces the call's reservation, in
    the route's scopes (``domain.cost.caps.move``). Reply: the new ``Reservation``, or the
    ``Refusal`` when it does not fit (the call keeps the one it holds).
    """

    request: CallRequest
    provider: str
    model: str


class SetSessionCap(msgspec.Struct, frozen=True):
    """Set the cap of ``session_id`` (None: no cap for it); reply its ``SessionBudget``.

    The reply comes once SessionCapSet is durable.
    """

    session_id: str
    usd: Decimal | None


class BudgetOf(msgspec.Struct, frozen=True):
    """Ask the UsageLedgerActor for ``session_id``'s ``SessionBudget`` (live figures)."""

    session_id: str


class Committed(msgspec.Struct, frozen=True):
    """The store committed ``commits`` more groups (the CheckpointActor counts them)."""

    commits: int = 1
