"""The typed messages the daemon's HTTP layer and the actors exchange.

Frozen msgspec Structs with immutable fields: pykka does not copy messages between
threads, so they must not be mutable. :class:`Leased` is the one exception to "plain
data": it carries a secret, so its ``repr`` never shows it.
"""

import msgspec
from sessionwarden.events import CallAdmitted, Event, UpstreamResponded, UsageRecorded
from sessionwarden.store import NewEvent, StreamAppend

__all__ = [
    "Admit",
    "Committed",
    "Lease",
    "Leased",
    "RecordUsage",
    "Release",
    "Responded",
    "new_event",
]


def new_event(event: Event, idempotency_key: str | None = None) -> NewEvent:
    """Encode a typed event into the record the store appends."""
    from sessionwarden.events import CODEC  # local: keeps this module's imports light

    encoded = CODEC.encode(event)
    return NewEvent(encoded.type, encoded.data, encoded.schema_version, idempotency_key)


class Admit(msgspec.Struct, frozen=True):
    """A call enters a session (SessionActor); ``client`` names the caller's software."""

    event: CallAdmitted
    client: str = ""


class Responded(msgspec.Struct, frozen=True):
    """The upstream answered a call (SessionActor records it).

    With ``usage``, the SessionActor forwards it to the UsageLedgerActor and the reply
    arrives once the usage row is durable.
    """

    event: UpstreamResponded
    usage: UsageRecorded | None = None


class Lease(msgspec.Struct, frozen=True):
    """Ask the CredentialPoolActor for a key of ``provider`` to serve ``call_id``."""

    provider: str
    call_id: str


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
    """A call is done with its key; ``status`` is the upstream status (0: no response)."""

    provider: str
    fingerprint: str
    call_id: str
    status: int


class RecordUsage(msgspec.Struct, frozen=True):
    """Record a call's usage; the UsageLedgerActor replies once it is durable.

    ``with_parts`` are other actors' appends that must commit atomically with the usage
    row (the SessionActor's UpstreamResponded): one commit, one fsync, one reply.
    """

    event: UsageRecorded
    with_parts: tuple[StreamAppend, ...] = ()


class Committed(msgspec.Struct, frozen=True):
    """The store committed a group of ``events`` events (CheckpointActor counts them)."""

    events: int
