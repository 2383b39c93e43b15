"""Replay: rebuild every view from the log into a scratch database, verify, compare.

The live database is only ever read. Live views and their tracked positions are read in
one short read transaction (a consistent snapshot); the log is then replayed up to that
position into a scratch database created in a private temporary directory, and the
rebuilt tables are compared with the live ones row by row (through digests, so memory
stays flat whatever the size of a view).

With ``verify`` the stored contents are audited too: every row's bytes must hash to its
key (``content_modified``), and every content an event refers to must be stored
(``content_missing``). Which events refer to contents, and to which, is the caller's
knowledge (``references``): the store knows events only as tags and bytes.
"""

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import apsw
import msgspec
from sessionwarden.events import CODEC, Event, EventCodec, EventError
from sessionwarden.store.contents import intact, iter_contents, missing_contents
from sessionwarden.store.errors import CorruptStore
from sessionwarden.store.log import EventLog
from sessionwarden.store.projections import Projection, dump_table, table_digest, tracking_name
from sessionwarden.store.records import RecordedEvent
from sessionwarden.store.schema import query_int
from sessionwarden.store.verify import verify_chain

__all__ = [
    "References",
    "ReplayReport",
    "first_damaged_content",
    "first_misindexed",
    "rebuild_views",
    "replay",
]

_BATCH = 2000

#: The content keys an event refers to (none for most events).
References = Callable[[Event], Iterable[str]]


class ReplayReport(msgspec.Struct, frozen=True):
    """What ``sessionwarden replay`` prints (``--json`` emits the first five fields)."""

    ok: bool
    events: int
    first_bad_seq: int | None = None
    kind: str | None = None
    detail: str = ""
    head_hash: str = ""
    seconds: float = 0.0
    views: dict[str, int] = {}


def rebuild_views(
    log: EventLog,
    projections: Sequence[Projection],
    scratch: apsw.Connection,
    until: int,
    codec: EventCodec | None = None,
    references: References | None = None,
    referenced: dict[str, int] | None = None,
) -> int:
    """Replay ``log`` up to ``until`` into fresh tables on ``scratch``; return the count.

    With a ``codec`` every event is also decoded, so an undecodable event stops the
    replay with :class:`~sessionwarden.events.EventError` naming its type; with
    ``references`` too, each content key a decoded event refers to is noted in
    ``referenced`` with the first event that refers to it.
    """
    for projection in projections:
        projection.create(scratch)
    count = 0
    batch: list[RecordedEvent] = []
    with scratch:
        for event in log.read_all(until=until):
            if codec is not None:
                try:
                    decoded = codec.decode(event.type, event.data)
                except EventError as exc:
                    raise _Undecodable(event.seq, str(exc)) from None
                if references is not None and referenced is not None:
                    for key in references(decoded):
                        referenced.setdefault(key, event.seq)
            batch.append(event)
            if len(batch) >= _BATCH:
                for projection in projections:
                    projection.apply(scratch, batch)
                count += len(batch)
                batch = []
        if batch:
            for projection in projections:
                projection.apply(scratch, batch)
            count += len(batch)
    return count


class _Undecodable(Exception):
    def __init__(self, seq: int, detail: str) -> None:
        super().__init__(detail)
        self.seq = seq


def _live_snapshot(
    log: EventLog, projections: Sequence[Projection]
) -> tuple[int, dict[str, tuple[int, str]]]:
    """Positions and table digests of the live views, read in one transaction."""
    conn = log.read_connection()
    with conn:  # one read transaction: positions and rows from the same snapshot
        positions = {
            query_int(
                conn, "SELECT position FROM tracking WHERE name = ?", (tracking_name(p),)
            )
            for p in projections
        }
        digests = {
            t: table_digest(conn, t) if _exists(conn, t) else (-1, "missing")
            for p in projections for t in p.tables
        }
    if any(rows < 0 for rows, _ in digests.values()):
        # Views that were never built (the log was written without them): a rebuild
        # covers the whole log.
        return log.head()[0], digests
    if len(positions) > 1:
        raise CorruptStore(f"live views are at different positions: {sorted(positions)}")
    return (positions.pop() if positions else log.head()[0]), digests


def _exists(conn: apsw.Connection, table: str) -> bool:
    return query_int(
        conn, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
    ) > 0


def _first_difference(live: apsw.Connection, scratch: apsw.Connection, table: str) -> str:
    if not _exists(live, table):
        return "the live database has no such table (written without this projection?)"
    for a, b in zip(dump_table(live, table), dump_table(scratch, table), strict=False):
        if a != b:
            return f"live row {a!r} != rebuilt row {b!r}"
    return "row counts differ"


def first_misindexed(conn: apsw.Connection) -> int | None:
    """The first event whose ``stream_no`` does not name its ``stream``, if any.

    The hash chain covers the stream's name, not its number; this is what vouches for
    the ``(stream_no, version)`` index that ``read_stream`` goes through.
    """
    row = conn.execute(
        "SELECT min(e.seq) FROM events AS e LEFT JOIN streams AS s ON s.no = e.stream_no"
        " WHERE s.name IS NOT e.stream"
    ).fetchone()
    value = None if row is None else row[0]
    return value if isinstance(value, int) else None


def first_damaged_content(conn: apsw.Connection) -> str | None:
    """The key of the first stored content whose bytes do not hash to it, if any."""
    for key, stored, compressed in iter_contents(conn):
        if intact(key, stored, compressed) is None:
            return repr(key) if not isinstance(key, str) else key
    return None


def replay(
    db_path: Path,
    projections: Sequence[Projection],
    *,
    verify: bool = False,
    codec: EventCodec = CODEC,
    references: References | None = None,
) -> ReplayReport:
    """Rebuild every view of the log at ``db_path``; with ``verify``, audit it too.

    ``references`` names the content keys an event refers to; with ``verify``, each
    must be stored.

    Raises:
        StoreUnavailable: the database cannot be opened.
    """
    started = time.perf_counter()
    scratch_dir = Path(tempfile.mkdtemp(prefix="sessionwarden-replay-"))
    with EventLog(db_path, readonly=True) as log:
        try:
            position, live = _live_snapshot(log, projections) if projections else (0, {})
            head_seq, head_hash = log.head()
            if verify:
                chain = verify_chain(log.read_all())
                if not chain.ok:
                    return ReplayReport(
                        ok=False, events=chain.events, first_bad_seq=chain.first_bad_seq,
                        kind=chain.kind, detail=chain.detail, head_hash=chain.head_hash,
                        seconds=time.perf_counter() - started,
                    )
                bad = first_misindexed(log.read_connection())
                if bad is not None:
                    return ReplayReport(
                        ok=False, events=bad - 1, first_bad_seq=bad, kind="misindexed",
                        detail=f"event {bad} is filed under a stream number whose name is not"
                        " its stream: read_stream would return the wrong events",
                        head_hash=head_hash.hex(), seconds=time.perf_counter() - started,
                    )
                damaged = first_damaged_content(log.read_connection())
                if damaged is not None:
                    return ReplayReport(
                        ok=False, events=head_seq, kind="content_modified",
                        detail=f"stored content {damaged}: its bytes do not match its key",
                        head_hash=head_hash.hex(), seconds=time.perf_counter() - started,
                    )
            referenced: dict[str, int] = {}
            scratch = apsw.Connection(str(scratch_dir / "views.db"))
            try:
                scratch.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF")
                try:
                    count = rebuild_views(
                        log, projections, scratch, position if projections else head_seq,
                        codec if verify else None, references, referenced,
                    )
                except _Undecodable as exc:
                    return ReplayReport(
                        ok=False, events=exc.seq - 1, first_bad_seq=exc.seq, kind="undecodable",
                        detail=str(exc), head_hash=head_hash.hex(),
                        seconds=time.perf_counter() - started,
                    )
                missing = missing_contents(log.read_connection(), referenced)
                if missing:
                    key, seq = min(((k, referenced[k]) for k in missing), key=lambda m: m[1])
                    return ReplayReport(
                        ok=False, events=seq - 1, first_bad_seq=seq, kind="content_missing",
                        detail=f"event {seq} refers to content {key}, which is not stored",
                        head_hash=head_hash.hex(), seconds=time.perf_counter() - started,
                    )
                sizes: dict[str, int] = {}
                for table, (rows, digest) in live.items():
                    rebuilt = table_digest(scratch, table)
                    sizes[table] = rebuilt[0]
                    if verify and rebuilt != (rows, digest):
                        return ReplayReport(
                            ok=False, events=count, kind="view_mismatch",
                            detail=f"view {table}: "
                            + _first_difference(log.read_connection(), scratch, table),
                            head_hash=head_hash.hex(), seconds=time.perf_counter() - started,
                            views=sizes,
                        )
            finally:
                scratch.close()
            return ReplayReport(
                ok=True, events=head_seq, head_hash=head_hash.hex(),
                seconds=time.perf_counter() - started, views=sizes,
            )
        finally:
            shutil.rmtree(scratch_dir, ignore_errors=True)
