"""Projections: derived views kept in tables of the log's own database.

A projection folds events into tables. The writer applies every registered projection
inside the same transaction as the events it reflects and records its position in the
``tracking`` table under ``view:<name>``, so a view is never ahead of the log and never
behind it after a crash.

If another process appended without running the projections,
the next write transaction first catches the views up to the head. ``rebuild`` (see
``sessionwarden.store.replay``) replays the log into a scratch database and must produce
identical tables; :func:`table_digest` is how the two are compared.
"""

import hashlib
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import apsw
from sessionwarden.store.records import RecordedEvent
from sessionwarden.store.schema import EVENT_COLUMNS, query_int

__all__ = [
    "Projection", "catch_up", "dump_table", "record_positions", "table_digest", "tracking_name",
]

_CATCH_UP_PAGE = 5000


@runtime_checkable
class Projection(Protocol):
    """A derived view maintained from the log.

    ``apply`` must be deterministic: it may read its own tables and the events given, but
    not the clock, the environment or other tables, so that a rebuild from zero produces
    identical rows. It runs inside the writer's transaction; raising fails the append
    that carried the events.
    """

    #: Stable name; the tracking position is stored under ``view:<name>``.
    name: str
    #: The tables it owns, compared row by row by ``replay --verify``.
    tables: tuple[str, ...]

    def create(self, conn: apsw.Connection) -> None:
        """Create the projection's tables if they do not exist."""

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold ``events`` (consecutive, in sequence order) into the tables."""


def tracking_name(projection: Projection) -> str:
    """The name under which a projection's position is tracked."""
    return f"view:{projection.name}"


def record_positions(conn: apsw.Connection, positions: Sequence[tuple[str, int]]) -> None:
    """Store ``(name, position)`` pairs in ``tracking`` (inside the caller's transaction)."""
    conn.executemany(
        "INSERT INTO tracking VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
        positions,
    )


def catch_up(conn: apsw.Connection, projections: Sequence[Projection], head: int) -> None:
    """Fold the events up to ``head`` into every projection that lags behind it.

    Another process may have appended without running our projections; the writer calls
    this inside its transaction, before it applies its own group.
    """
    for projection in projections:
        name = tracking_name(projection)
        position = query_int(conn, "SELECT position FROM tracking WHERE name = ?", (name,))
        if position >= head:
            continue
        while position < head:
            page = [
                RecordedEvent(*r)
                for r in conn.execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND seq <= ?"
                    " ORDER BY seq LIMIT ?",
                    (position, head, _CATCH_UP_PAGE),
                )
            ]
            projection.apply(conn, page)
            position = page[-1].seq
        record_positions(conn, [(name, head)])


def _columns(conn: apsw.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def dump_table(conn: apsw.Connection, table: str) -> Iterator[tuple[object, ...]]:
    """Every row of ``table`` in a total order (all columns), for comparison."""
    cols = ", ".join(f'"{c}"' for c in _columns(conn, table))
    yield from conn.execute(f'SELECT {cols} FROM "{table}" ORDER BY {cols}')


def table_digest(conn: apsw.Connection, table: str) -> tuple[int, str]:
    """Row count and SHA-256 over the table's rows in total order."""
    digest = hashlib.sha256()
    count = 0
    for row in dump_table(conn, table):
        digest.update(repr(row).encode())
        count += 1
    return count, digest.hexdigest()
