"""The records of the event log: what is appended, what is stored, what an append returns.

The vocabulary is KurrentDB's: records are nouns (:class:`NewEvent`,
:class:`RecordedEvent`), operations say what happens to data (``append``,
``read_stream``, ``read_all``, an expected version); the guarantees are eventsourcing's
(its conformance tests run against this store). Stream versions start at 1; a stream
with no events is at version 0. A :class:`Content` is a piece of content-addressed data
stored with an append (see ``sessionwarden.store.contents``).
"""

import enum

import msgspec

__all__ = [
    "ANY",
    "EXISTS",
    "NO_STREAM",
    "AppendResult",
    "Content",
    "ExpectedVersion",
    "NewEvent",
    "RecordedEvent",
    "StreamAppend",
    "StreamState",
    "Tracking",
]


class StreamState(enum.Enum):
    """Expected-version sentinels for :meth:`EventLog.append`."""

    ANY = "any"  # no check
    NO_STREAM = "no_stream"  # the stream must have no events
    EXISTS = "exists"  # the stream must have at least one event

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


ANY = StreamState.ANY
NO_STREAM = StreamState.NO_STREAM
EXISTS = StreamState.EXISTS

#: An exact head version (0 means no events) or a :class:`StreamState`.
ExpectedVersion = int | StreamState


class NewEvent(msgspec.Struct, frozen=True):
    """An event to append: its type tag, schema version, payload and idempotency key.

    The payload is stored byte for byte and hashed as stored. An idempotency key makes a
    retried append return the original positions instead of writing again.
    """

    type: str
    data: bytes
    schema_version: int = 1
    idempotency_key: str | None = None


class Content(msgspec.Struct, frozen=True):
    """Data stored once under its key, :func:`~sessionwarden.store.hashing.content_key`.

    Events refer to it by key (a message a call sent upstream, say); the store checks on
    append that ``key`` is the key of ``data``.
    """

    key: str
    data: bytes


class StreamAppend(msgspec.Struct, frozen=True):
    """The part of an atomic batch that goes to one stream.

    ``versions`` is for importers and the eventsourcing conformance adapter only: it gives
    each event an explicit, strictly increasing version above the head instead of
    ``head + 1, head + 2, …``. ``contents`` are stored in the same transaction as the
    events, each key once (a content already stored is not written again): if the append
    is refused, none of them is written.
    """

    stream: str
    events: tuple[NewEvent, ...]
    expected_version: ExpectedVersion = ANY
    versions: tuple[int, ...] | None = None
    contents: tuple[Content, ...] = ()


class Tracking(msgspec.Struct, frozen=True):
    """A consumer's position, recorded atomically with an append; it must strictly advance."""

    name: str
    position: int


class AppendResult(msgspec.Struct, frozen=True):
    """Where an append landed: global sequence numbers and the stream's new head.

    ``first_seq`` and ``last_seq`` are 0 for an append of no events.
    """

    stream: str
    first_seq: int
    last_seq: int
    version: int
    duplicate: bool = False

    @property
    def seqs(self) -> range:
        """The global sequence numbers of the appended events."""
        return range(self.first_seq, self.last_seq + 1) if self.first_seq else range(0)


class RecordedEvent(msgspec.Struct, frozen=True, gc=False):
    """An event as stored: its positions, stored bytes and hash-chain links."""

    seq: int
    stream: str
    version: int
    type: str
    schema_version: int
    recorded_at: str
    idempotency_key: str | None
    data: bytes
    prev_hash: bytes
    hash: bytes
