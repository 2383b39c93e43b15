"""The event log: append events to streams, read them back, in one SQLite file.

:class:`EventLog` is the store's facade. Writes go through the process's single
:class:`~sessionwarden.store.writer.GroupCommitWriter` (with the contents an append
carries, content-addressed, in the same transaction); reads use one read-only
connection per thread, each read a short transaction, so readers never hold the WAL back
and never block the writer. A log opened with ``readonly=True`` has no writer at all and
never creates or changes a file; that is how the CLI reads a log a daemon is writing.
"""

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import apsw
from sessionwarden.store.aio import append_batch_async
from sessionwarden.store.contents import ContentRow, encode_contents, read_stored
from sessionwarden.store.errors import StoreClosed, StoreProgrammingError
from sessionwarden.store.hashing import GENESIS
from sessionwarden.store.projections import Projection
from sessionwarden.store.records import (
    ANY,
    AppendResult,
    ExpectedVersion,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    StreamState,
    Tracking,
)
from sessionwarden.store.retry import retry_busy
from sessionwarden.store.schema import (
    EVENT_COLUMNS,
    connect,
    ensure_schema,
    presize_wal,
    translate,
)
from sessionwarden.store.writer import AppendRequest, GroupCommitWriter, utc_now

__all__ = ["EventLog"]

_PAGE = 5000


class EventLog:
    """An append-only, hash-chained event log in one SQLite file."""

    def __init__(
        self,
        path: Path | str,
        *,
        readonly: bool = False,
        projections: Sequence[Projection] = (),
        clock: Callable[[], datetime] = utc_now,
        busy_budget_s: float = 30.0,
        autocheckpoint: bool = True,
    ) -> None:
        """Open (and, unless ``readonly``, create) the log at ``path``.

        ``autocheckpoint=False`` leaves WAL checkpoints entirely to the caller. Only
        do that with a plan for restarting the WAL: checkpoints from another connection
        rarely complete between two commits, and a WAL that never restarts grows, which
        makes every commit's fsync dearer (see docs/architecture/store.md, Checkpoints).

        Raises:
            StoreUnavailable: the file cannot be opened (or is missing when read-only).
            CorruptStore: the file is not an event log.
        """
        self.path = Path(path)
        self.readonly = readonly
        self.projections = tuple(projections)
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._writer: GroupCommitWriter | None = None
        if readonly:
            self._reader()  # fail now, not at first read, when the file is missing
            return
        conn = connect(self.path)
        if not autocheckpoint:
            conn.wal_autocheckpoint(0)
        try:
            retry_busy(lambda: ensure_schema(conn, self.path), budget_s=busy_budget_s)
            retry_busy(lambda: self._create_views(conn), budget_s=busy_budget_s)
            if autocheckpoint:  # without it the WAL never restarts: nothing to presize
                retry_busy(lambda: self._presize(conn), budget_s=busy_budget_s)
        except BaseException:
            conn.close()
            raise
        self._writer = GroupCommitWriter(
            conn, self.path, self.projections, clock=clock, busy_budget_s=busy_budget_s
        )

    def _presize(self, conn: apsw.Connection) -> None:
        # A read-only file or a full disk is the store's error, one line for the user;
        # busy stays apsw's, for retry_busy to wait on.
        try:
            presize_wal(conn)
        except apsw.BusyError:
            raise
        except apsw.Error as exc:
            raise translate(exc, self.path) from None

    def _create_views(self, conn: apsw.Connection) -> None:
        if not self.projections:
            return
        try:
            with conn:
                for projection in self.projections:
                    projection.create(conn)
        except apsw.BusyError:
            raise
        except apsw.Error as exc:
            raise translate(exc, self.path) from None

    # -- writing -----------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[NewEvent],
        expected_version: ExpectedVersion = ANY,
        *,
        timeout: float | None = None,
    ) -> AppendResult:
        """Append ``events`` to ``stream`` atomically; return once committed durably.

        Raises:
            WrongExpectedVersion: the stream's head is not ``expected_version``.
            IdempotencyConflict: an idempotency key is stored with other content.
            StoreBusy: the write lock stayed taken for the whole retry budget.
        """
        part = StreamAppend(stream, tuple(events), expected_version)
        return self.append_batch([part], timeout=timeout)[0]

    def append_batch(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None = None,
        *,
        timeout: float | None = None,
    ) -> list[AppendResult]:
        """Append to several streams (and record ``tracking``) in one atomic commit."""
        writer, contents = self._checked_writer(appends, tracking)
        return writer.submit(
            appends, tracking, will_wait=True, contents=contents).wait(timeout)

    def submit(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None = None,
        callback: Callable[[AppendRequest], None] | None = None,
    ) -> AppendRequest:
        """Queue an atomic append without waiting; ``callback`` runs when it is done.

        The callback runs in the writer thread and must be quick (e.g. hand the result to
        an event loop with ``call_soon_threadsafe``).
        """
        writer, contents = self._checked_writer(appends, tracking)
        return writer.submit(appends, tracking, callback, contents=contents)

    async def append_async(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        """As :meth:`append`, awaited from asyncio without blocking the event loop."""
        part = StreamAppend(stream, tuple(events), expected_version)
        return (await self.append_batch_async([part]))[0]

    async def append_batch_async(
        self, appends: Sequence[StreamAppend], tracking: Tracking | None = None
    ) -> list[AppendResult]:
        """As :meth:`append_batch`, awaited from asyncio (see ``sessionwarden.store.aio``).

        Cancelling the awaiting task does not cancel the append: it may still commit.
        """
        writer, contents = self._checked_writer(appends, tracking)
        return await append_batch_async(writer, appends, tracking, contents)

    def _checked_writer(
        self, appends: Sequence[StreamAppend], tracking: Tracking | None
    ) -> tuple[GroupCommitWriter, list[ContentRow]]:
        """The writer and the contents' rows, once the request is known valid.

        Runs in the caller's thread, so hashing and compressing contents never holds up
        the writer, which every appender shares.
        """
        if self._writer is None:
            raise StoreProgrammingError("this event log was opened read-only")
        _validate(appends, tracking)
        return self._writer, encode_contents(appends)

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(events)`` from the writer thread after every commit that wrote.

        The listener must be quick and must not append synchronously (it runs in the
        writer's thread).
        """
        if self._writer is None:
            raise StoreProgrammingError("this event log was opened read-only")
        self._writer.add_commit_listener(listener)

    def commit_stats(self) -> tuple[int, float]:
        """The commits that wrote since this log was opened, and the seconds they took."""
        if self._writer is None:
            return 0, 0.0
        return self._writer.commits, self._writer.commit_seconds

    # -- reading -----------------------------------------------------------------------

    def _reader(self) -> apsw.Connection:
        if self._closed:
            raise StoreClosed("the event log is closed")
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            return self._reader().execute(sql, args).fetchall()
        except apsw.Error as exc:
            raise translate(exc, self.path) from None

    def head(self) -> tuple[int, bytes]:
        """The last global sequence number and its hash (0 and the genesis when empty)."""
        rows = self._query("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
        if not rows:
            return 0, GENESIS
        seq, digest = rows[0]
        assert isinstance(seq, int) and isinstance(digest, bytes)
        return seq, digest

    def stream_version(self, stream: str) -> int:
        """The head version of ``stream`` (0 when it has no events)."""
        rows = self._query(
            "SELECT max(version) FROM events WHERE stream_no = "
            "(SELECT no FROM streams WHERE name = ?)",
            (stream,),
        )
        value = rows[0][0]
        return value if isinstance(value, int) else 0

    def read_all(
        self, after: int = 0, *, until: int | None = None, limit: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream events with ``after < seq <= until`` in sequence order.

        Pages are read in short transactions, so a long read never pins the WAL.
        """
        upper = _clamp(until) if until is not None else _INT64_MAX
        return self._paged(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            lambda position: (position, upper), after, 0, limit,
        )

    def read_stream(
        self, stream: str, after_version: int = 0, *, limit: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream the events of ``stream`` with ``version > after_version`` in order."""
        return self._paged(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream_no = "
            "(SELECT no FROM streams WHERE name = ?) AND version > ? ORDER BY version LIMIT ?",
            lambda position: (stream, position), after_version, 2, limit,
        )

    def _paged(
        self,
        sql: str,
        args: Callable[[int], tuple[object, ...]],
        position: int,
        column: int,
        limit: int | None,
    ) -> Iterator[RecordedEvent]:
        """Run ``sql`` page by page, resuming after ``column`` of each page's last row."""
        remaining = limit
        position = _clamp(position)
        while remaining is None or remaining > 0:
            page_size = _PAGE if remaining is None else min(_PAGE, remaining)
            rows = self._query(sql, (*args(position), page_size))
            for row in rows:
                yield RecordedEvent(*row)  # type: ignore[arg-type]
            if len(rows) < page_size:
                return
            position = rows[-1][column]  # type: ignore[assignment]
            if remaining is not None:
                remaining -= len(rows)

    def tracking_position(self, name: str) -> int | None:
        """The recorded position of consumer ``name``, or None if it never recorded one."""
        rows = self._query("SELECT position FROM tracking WHERE name = ?", (name,))
        value = rows[0][0] if rows else None
        return value if isinstance(value, int) else None

    def read_contents(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The stored contents among ``keys``, by key; keys not stored are left out."""
        try:
            return read_stored(self._reader(), keys)
        except apsw.Error as exc:
            raise translate(exc, self.path) from None

    def read_connection(self) -> apsw.Connection:
        """This thread's read-only connection, for projections' own queries."""
        return self._reader()

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Commit queued appends, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._readers_lock:
            for conn in self._readers:
                _close_reader(conn)
            self._readers.clear()
        if self._writer is not None:
            # Last: the last connection to close checkpoints the WAL and deletes it.
            self._writer.close()

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_INT64_MAX = 2**63 - 1


def _clamp(position: int) -> int:
    """A position SQLite can bind (64-bit): a bound beyond every stored one means the same."""
    return max(-_INT64_MAX, min(position, _INT64_MAX))


def _close_reader(conn: apsw.Connection, budget_s: float = 5.0) -> None:
    """Close a reader another thread may be using: interrupt its query, then retry."""
    deadline = time.monotonic() + budget_s
    while True:
        try:
            conn.close()
            return
        except apsw.ThreadingViolationError:
            if time.monotonic() > deadline:
                raise
            conn.interrupt()
            time.sleep(0.005)


def _validate(appends: Sequence[StreamAppend], tracking: Tracking | None) -> None:
    """Reject malformed requests in the caller's thread, before they reach the writer.

    What passes here cannot fail inside the writer for its shape, and that matters: the
    writer plans a whole group at once, so a request it could not even encode would have
    failed every append grouped with it.
    """
    if not appends and tracking is None:
        raise StoreProgrammingError("an append needs at least one stream or a tracking record")
    for part in appends:
        if not isinstance(part, StreamAppend):
            raise StoreProgrammingError(f"expected StreamAppend, got {type(part).__name__}")
        if not _is_text(part.stream) or not part.stream:
            raise StoreProgrammingError("a stream name must be a non-empty string of UTF-8 text")
        expected = part.expected_version
        if not isinstance(expected, StreamState) and not _is_count(expected, 0):
            raise StoreProgrammingError(f"invalid expected version {expected!r}")
        for event in part.events:
            if not isinstance(event, NewEvent) or not isinstance(event.data, bytes):
                raise StoreProgrammingError("events must be NewEvent with bytes data")
            if not _is_text(event.type) or not event.type:
                raise StoreProgrammingError(
                    "an event type must be a non-empty string of UTF-8 text")
            if not _is_count(event.schema_version, 1):
                raise StoreProgrammingError(
                    f"invalid schema version {event.schema_version!r} (an int from 1)")
            key = event.idempotency_key
            if key is not None and not _is_text(key):
                raise StoreProgrammingError("an idempotency key must be a string of UTF-8 text")
    if tracking is not None:
        if not _is_text(tracking.name) or not tracking.name:
            raise StoreProgrammingError("a tracking name must be a non-empty string of UTF-8 text")
        if not _is_count(tracking.position, 0):
            raise StoreProgrammingError("a tracking position must be a 64-bit int, not negative")


def _is_text(value: object) -> bool:
    """A ``str`` that SQLite can store: one that encodes to UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _is_count(value: object, least: int) -> bool:
    """An ``int`` (not a ``bool``) from ``least`` up to what SQLite stores (64 bits)."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and least <= value <= _INT64_MAX
    )
