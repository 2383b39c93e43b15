"""The store's own generic view: one row per stream with its head and event count.

It is the smallest useful projection (``status`` uses it to list streams) and the
reference for writing others: aggregate the batch in memory, then upsert all keys with
one multi-row statement (``sessionwarden.store.bulk``).

Rows are keyed by ``first_seq``, not by the stream name: the table is then ordered by
first appearance, so the streams of sessions started around the same time share pages,
and a commit touching the busy streams dirties a few pages instead of one random page
per stream. The name is still unique, and it is the upsert's conflict target.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.store.bulk import insert_rows
from sessionwarden.store.records import RecordedEvent

__all__ = ["StreamsView"]


class StreamsView:
    """Projection into ``view_streams``: head version, count and times per stream."""

    name = "streams"
    tables: tuple[str, ...] = ("view_streams",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_streams``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_streams ("
            " stream TEXT NOT NULL UNIQUE, version INTEGER NOT NULL, events INTEGER NOT NULL,"
            " first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL,"
            " first_recorded_at TEXT NOT NULL, last_recorded_at TEXT NOT NULL)"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold a batch of events into the per-stream rows."""
        rows: dict[str, list[object]] = {}
        for e in events:
            row = rows.get(e.stream)
            if row is None:
                at = e.recorded_at
                rows[e.stream] = [e.stream, e.version, 1, e.seq, e.seq, at, at]
            else:
                row[1], row[4], row[6] = e.version, e.seq, e.recorded_at
                row[2] += 1  # type: ignore[operator]
        insert_rows(
            conn,
            "INSERT INTO view_streams (stream, version, events, first_seq, last_seq,"
            " first_recorded_at, last_recorded_at)",
            list(rows.values()),
            tail=" ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
            " events = events + excluded.events, last_seq = excluded.last_seq,"
            " last_recorded_at = excluded.last_recorded_at",
        )
