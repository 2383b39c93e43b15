"""Test-only adapter: eventsourcing's ``ProcessRecorder`` over our ``EventLog``.

It lets eventsourcing's own recorder conformance suite (``eventsourcing.tests.persistence``)
run against the store. The mapping is:

- ``originator_id`` <-> stream: a UUID is stored as ``"uuid:<canonical form>"`` and a text id
  as ``"str:<text>"``, so the mapping is reversible and a UUID never comes back as a str
  (the suite compares ids with ``==``);
- ``originator_version`` -> the stream version, given explicitly through
  ``StreamAppend.versions`` (the suite starts streams at 0 and at 1);
- ``topic`` -> event type, ``state`` -> data, notification id -> global ``seq``;
- ``Tracking(application_name, notification_id)`` -> ``Tracking(name, position)``, recorded in
  the same atomic append as the events.

Conflicts (``ConflictError`` and its subclasses) become ``IntegrityError``, retriable errors
``OperationalError`` and programming errors ``ProgrammingError``, as eventsourcing expects.
"""

from collections.abc import Iterator, Sequence
from itertools import groupby, islice
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    Notification,
    OperationalError,
    ProcessRecorder,
    ProgrammingError,
    StoredEvent,
    Subscription,
    Tracking,
)
from eventsourcing.persistence import (
    InterfaceError as ESInterfaceError,
)
from eventsourcing.persistence import (
    PersistenceError as ESPersistenceError,
)
from sessionwarden.store import ANY, EventLog, NewEvent, RecordedEvent, StreamAppend
from sessionwarden.store import Tracking as StoreTracking
from sessionwarden.store.errors import (
    ConflictError,
    RetriableError,
    StoreClosed,
    StoreError,
    StoreProgrammingError,
)

__all__ = ["EventLogAggregateRecorder", "EventLogProcessRecorder", "originator_id", "stream_id"]

_UUID_PREFIX = "uuid:"
_STR_PREFIX = "str:"


def stream_id(originator_id: UUID | str) -> str:
    """The stream name of an eventsourcing originator id (reversible)."""
    if isinstance(originator_id, UUID):
        return _UUID_PREFIX + str(originator_id)
    return _STR_PREFIX + originator_id


def originator_id(stream: str) -> UUID | str:
    """The originator id a stream name was made from."""
    if stream.startswith(_UUID_PREFIX):
        return UUID(stream[len(_UUID_PREFIX) :])
    if stream.startswith(_STR_PREFIX):
        return stream[len(_STR_PREFIX) :]
    raise ValueError(f"stream {stream!r} was not written by the eventsourcing adapter")


def _translate(exc: StoreError) -> ESPersistenceError:
    if isinstance(exc, ConflictError):
        return IntegrityError(str(exc))
    if isinstance(exc, RetriableError):
        return OperationalError(str(exc))
    if isinstance(exc, StoreProgrammingError):
        return ProgrammingError(str(exc))
    if isinstance(exc, StoreClosed):
        return ESInterfaceError(str(exc))
    return OperationalError(str(exc))


def _stored(event: RecordedEvent) -> StoredEvent:
    return StoredEvent(
        originator_id=originator_id(event.stream),
        originator_version=event.version,
        topic=event.type,
        state=event.data,
    )


def _notification(event: RecordedEvent) -> Notification:
    return Notification(
        id=event.seq,
        originator_id=originator_id(event.stream),
        originator_version=event.version,
        topic=event.type,
        state=event.data,
    )


class EventLogProcessRecorder(ProcessRecorder):
    """A ``ProcessRecorder`` (so also Application, Aggregate and Tracking) over ``EventLog``."""

    def __init__(self, path: Path | str, **log_kwargs: Any) -> None:
        self.log = EventLog(path, **log_kwargs)

    def close(self) -> None:
        self.log.close()

    # -- AggregateRecorder ---------------------------------------------------------------

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        tracking: Tracking | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        # One StreamAppend per run of consecutive events of one originator, so the global
        # order of the batch is the order of ``stored_events``.
        appends = [
            StreamAppend(
                stream_id(oid),
                tuple(NewEvent(e.topic, bytes(e.state)) for e in run),
                ANY,
                tuple(e.originator_version for e in run),
            )
            for oid, group in groupby(stored_events, key=lambda e: e.originator_id)
            for run in [list(group)]
        ]
        store_tracking = (
            None
            if tracking is None
            else StoreTracking(tracking.application_name, tracking.notification_id)
        )
        if not appends and store_tracking is None:
            return []
        try:
            results = self.log.append_batch(appends, store_tracking)
        except StoreError as exc:
            raise _translate(exc) from exc
        return [seq for result in results for seq in result.seqs]

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        # Versions may start at 0, so "no lower bound" is after_version=-1.
        after = -1 if gt is None else gt
        try:
            events = [
                e
                for e in self.log.read_stream(stream_id(originator_id), after_version=after)
                if lte is None or e.version <= lte
            ]
        except StoreError as exc:
            raise _translate(exc) from exc
        if desc:
            events.reverse()
        if limit is not None:
            events = events[:limit]
        return [_stored(e) for e in events]

    # -- ApplicationRecorder -------------------------------------------------------------

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        # read_all takes an exclusive lower bound: "start" inclusive is "after start - 1".
        after = 0 if start is None else start - 1 if inclusive_of_start else start
        after = max(after, 0)
        try:
            if topics:
                wanted = frozenset(topics)
                matching: Iterator[RecordedEvent] = (
                    e for e in self.log.read_all(after, until=stop) if e.type in wanted
                )
                events = list(islice(matching, limit))
            else:
                events = list(self.log.read_all(after, until=stop, limit=limit))
        except StoreError as exc:
            raise _translate(exc) from exc
        return [_notification(e) for e in events]

    def max_notification_id(self) -> int | None:
        try:
            seq, _ = self.log.head()
        except StoreError as exc:
            raise _translate(exc) from exc
        return seq or None

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[Any]:
        raise NotImplementedError("the EventLog adapter has no subscriptions")

    # -- TrackingRecorder ----------------------------------------------------------------

    def insert_tracking(self, tracking: Tracking) -> None:
        self.insert_events([], tracking=tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        try:
            return self.log.tracking_position(application_name)
        except StoreError as exc:
            raise _translate(exc) from exc


class EventLogAggregateRecorder(EventLogProcessRecorder):
    """The aggregate-recorder view: ``insert_events`` returns ``None``, as the suite asserts."""

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        tracking: Tracking | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        super().insert_events(stored_events, tracking=tracking, **kwargs)
        return None
