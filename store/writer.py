"""The group-commit writer: one thread, one write connection, many appenders.

Appenders put requests on a queue and wait for their acknowledgement. The writer drains
whatever has queued up, commits it in one ``BEGIN IMMEDIATE`` transaction with
``synchronous=FULL`` and only then acknowledges each request: one fsync is shared by the
whole group, which is where the throughput over one-transaction-per-event comes from.

Each request runs inside its own SAVEPOINT, so a conflicting request fails alone and the
rest of the group still commits, and a request spanning several streams is all or nothing.
Projections are applied inside the same savepoint, so views never run ahead of the log.

Other processes may append to the same file between our transactions. The head sequence
and hash are therefore read at the start of every transaction, and the cache of stream
heads is trusted only while the head is still the one this writer committed last.
"""

import queue
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import apsw
from sessionwarden.store.errors import (
    ConflictError,
    IdempotencyConflict,
    StoreClosed,
    StoreError,
    StoreProgrammingError,
    TrackingConflict,
    WrongExpectedVersion,
)
from sessionwarden.store.hashing import GENESIS, event_hash
from sessionwarden.store.projections import Projection, tracking_name
from sessionwarden.store.records import (
    AppendResult,
    RecordedEvent,
    StreamAppend,
    StreamState,
    Tracking,
)
from sessionwarden.store.retry import retry_busy
from sessionwarden.store.schema import query_int, translate

__all__ = ["AppendRequest", "GroupCommitWriter", "utc_now"]

_INSERT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_MAX_CACHED_HEADS = 100_000


def utc_now() -> datetime:
    """The current time in UTC (the default clock)."""
    return datetime.now(UTC)


class AppendRequest:
    """One atomic append waiting in the writer's queue, and its outcome."""

    __slots__ = ("_callback", "_done", "appends", "error", "results", "tracking")

    def __init__(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None,
        callback: Callable[["AppendRequest"], None] | None,
    ) -> None:
        """Create a pending request; ``callback`` runs in the writer thread when done."""
        self.appends = appends
        self.tracking = tracking
        self.results: list[AppendResult] | None = None
        self.error: StoreError | None = None
        self._callback = callback
        # A pre-acquired lock is the cheapest one-shot signal CPython offers.
        self._done = threading.Lock()
        self._done.acquire()

    def finish(self, results: list[AppendResult] | None, error: StoreError | None) -> None:
        """Record the outcome and wake the waiter (called by the writer thread)."""
        self.results, self.error = results, error
        self._done.release()
        if self._callback is not None:
            self._callback(self)

    def wait(self, timeout: float | None = None) -> list[AppendResult]:
        """Block until the request is committed; raise its error if it failed."""
        if not self._done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the append was not acknowledged in time")
        self._done.release()
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results


_STOP = object()


class GroupCommitWriter:
    """Owns the single write connection of a process and commits appends in groups."""

    def __init__(
        self,
        conn: apsw.Connection,
        path: Path,
        projections: Sequence[Projection],
        *,
        clock: Callable[[], datetime] = utc_now,
        max_group: int = 1024,
        busy_budget_s: float = 30.0,
    ) -> None:
        """Take ownership of ``conn`` (already opened with the log's pragmas)."""
        self._conn = conn
        self._path = path
        self._projections = tuple(projections)
        self._clock = clock
        self._max_group = max_group
        self._busy_budget_s = busy_budget_s
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._heads: dict[str, int] = {}
        self._last_seq = -1  # unknown until our first commit
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="sw-store-writer", daemon=True)
        self._thread.start()

    def submit(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None = None,
        callback: Callable[[AppendRequest], None] | None = None,
    ) -> AppendRequest:
        """Queue an atomic append; returns at once with the pending request."""
        request = AppendRequest(appends, tracking, callback)
        if self._closed:
            request.finish(None, StoreClosed("the event log is closed"))
        else:
            self._queue.put(request)
        return request

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued, stop the thread and close the connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is _STOP:
                break
            assert isinstance(item, AppendRequest)
            group = [item]
            while len(group) < self._max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                assert isinstance(item, AppendRequest)
                group.append(item)
            self._commit(group)
        while True:  # appends that raced with close() are refused, never dropped silently
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, AppendRequest):
                item.finish(None, StoreClosed("the event log is closed"))
        self._conn.close()

    def _commit(self, group: list[AppendRequest]) -> None:
        try:
            outcomes = retry_busy(lambda: self._transaction(group), budget_s=self._busy_budget_s)
        except StoreError as exc:
            outcomes = [(None, exc)] * len(group)
        except apsw.Error as exc:
            outcomes = [(None, translate(exc, self._path))] * len(group)
        except Exception as exc:  # a bug must fail the appends, never kill the writer
            err = StoreProgrammingError(f"append failed: {type(exc).__name__}: {exc}")
            outcomes = [(None, err)] * len(group)
        for request, (results, error) in zip(group, outcomes, strict=True):
            request.finish(results, error)

    def _transaction(
        self, group: list[AppendRequest]
    ) -> list[tuple[list[AppendResult] | None, StoreError | None]]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (row[0], row[1]) if row else (0, GENESIS)
            start = seq
            if seq != self._last_seq:
                self._heads.clear()
                self._catch_up_views(seq)
            if len(self._heads) > _MAX_CACHED_HEADS:
                self._heads.clear()
            now = self._clock().astimezone(UTC).isoformat(timespec="microseconds")
            outcomes: list[tuple[list[AppendResult] | None, StoreError | None]] = []
            for request in group:
                conn.execute("SAVEPOINT request")
                try:
                    results, seq, prev = self._apply(request, seq, prev, now)
                except (ConflictError, StoreProgrammingError) as exc:
                    conn.execute("ROLLBACK TO request")
                    conn.execute("RELEASE request")
                    self._heads.clear()  # entries added by the failed request are void
                    outcomes.append((None, exc))
                    continue
                conn.execute("RELEASE request")
                outcomes.append((results, None))
            if seq != start:
                conn.executemany(
                    "INSERT INTO tracking VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                    [(tracking_name(p), seq) for p in self._projections],
                )
            conn.execute("COMMIT")
        except BaseException:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            self._heads.clear()
            self._last_seq = -1
            raise
        self._last_seq = seq
        return outcomes

    def _apply(
        self, request: AppendRequest, seq: int, prev: bytes, now: str
    ) -> tuple[list[AppendResult], int, bytes]:
        conn = self._conn
        results: list[AppendResult] = []
        recorded: list[RecordedEvent] = []
        for part in request.appends:
            duplicate = self._find_retry(part)
            if duplicate is not None:
                results.append(duplicate)
                continue
            head = self._head(part.stream)
            _check_expected(part, head)
            versions = part.versions or range(head + 1, head + 1 + len(part.events))
            if part.versions is not None and (
                len(part.versions) != len(part.events)
                or any(b <= a for a, b in zip(part.versions, part.versions[1:], strict=False))
                or (part.versions and part.versions[0] <= head)
            ):
                raise WrongExpectedVersion(part.stream, part.versions, head)
            if not part.events:
                results.append(AppendResult(part.stream, 0, 0, head))
                continue
            rows = []
            for event, version in zip(part.events, versions, strict=True):
                seq += 1
                digest = event_hash(
                    prev, seq, part.stream, version, event.type, event.schema_version, now,
                    event.idempotency_key, event.data,
                )
                rows.append(
                    (seq, part.stream, version, event.type, event.schema_version, now,
                     event.idempotency_key, event.data, prev, digest)
                )
                prev = digest
            try:
                conn.executemany(_INSERT, rows)
            except apsw.ConstraintError as exc:
                if "idempotency_key" in str(exc):
                    raise IdempotencyConflict("?", "is used twice in one append") from None
                raise WrongExpectedVersion(part.stream, part.expected_version, head) from None
            recorded.extend(RecordedEvent(*r) for r in rows)
            self._heads[part.stream] = rows[-1][2]
            results.append(AppendResult(part.stream, rows[0][0], seq, rows[-1][2]))
        if request.tracking is not None:
            self._track(request.tracking)
        if recorded:
            for projection in self._projections:
                try:
                    projection.apply(conn, recorded)
                except Exception as exc:
                    raise StoreProgrammingError(
                        f"projection {projection.name!r} failed: {type(exc).__name__}: {exc}"
                    ) from exc
        return results, seq, prev

    def _head(self, stream: str) -> int:
        head = self._heads.get(stream)
        if head is None:
            head = query_int(
                self._conn, "SELECT max(version) FROM events WHERE stream = ?", (stream,)
            )
            self._heads[stream] = head
        return head

    def _find_retry(self, part: StreamAppend) -> AppendResult | None:
        keys = [e.idempotency_key for e in part.events if e.idempotency_key is not None]
        if not keys:
            return None
        stored = []
        for key in keys:
            row = self._conn.execute(
                "SELECT seq, stream, version, type, data FROM events WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
            if row is not None:
                stored.append((key, row))
        if not stored:
            return None
        if len(stored) != len(part.events):
            raise IdempotencyConflict(stored[0][0], "was stored by an append of other events")
        for event, (key, (_, stream, _, type_tag, data)) in zip(part.events, stored, strict=True):
            if stream != part.stream or type_tag != event.type or data != event.data:
                raise IdempotencyConflict(key, "was stored with different content")
        first, last = stored[0][1], stored[-1][1]
        return AppendResult(part.stream, first[0], last[0], last[2], duplicate=True)

    def _track(self, tracking: Tracking) -> None:
        row = self._conn.execute(
            "INSERT INTO tracking VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
            "SET position = excluded.position WHERE excluded.position > tracking.position "
            "RETURNING position",
            (tracking.name, tracking.position),
        ).fetchone()
        if row is None:
            current = query_int(
                self._conn, "SELECT position FROM tracking WHERE name = ?", (tracking.name,)
            )
            raise TrackingConflict(tracking.name, tracking.position, current)

    def _catch_up_views(self, head: int) -> None:
        """Fold events appended by other processes into views that lag behind."""
        for projection in self._projections:
            position = query_int(
                self._conn, "SELECT position FROM tracking WHERE name = ?",
                (tracking_name(projection),),
            )
            while position < head:
                page = [
                    RecordedEvent(*r)
                    for r in self._conn.execute(
                        "SELECT * FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 5000",
                        (position, head),
                    )
                ]
                projection.apply(self._conn, page)
                position = page[-1].seq
            self._conn.execute(
                "INSERT INTO tracking VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                (tracking_name(projection), head),
            )


def _check_expected(part: StreamAppend, head: int) -> None:
    expected = part.expected_version
    if expected is StreamState.ANY:
        return
    if expected is StreamState.NO_STREAM:
        ok = head == 0
    elif expected is StreamState.EXISTS:
        ok = head > 0
    else:
        ok = head == expected
    if not ok:
        raise WrongExpectedVersion(part.stream, expected, head)
