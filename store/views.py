"""The store's own generic view: one row per stream with its head and event count.

It is the smallest useful projection (``status`` uses it to list streams) and the
reference for writing others: aggregate the batch in memory, then upsert once per key.
"""

from collections.abc import Sequence

import apsw
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
            " stream TEXT PRIMARY KEY, version INTEGER NOT NULL, events INTEGER NOT NULL,"
            " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
            " first_recorded_at TEXT NOT NULL, last_recorded_at TEXT NOT NULL) WITHOUT ROWID"
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
        conn.executemany(
            "INSERT INTO view_streams VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream) DO UPDATE"
            " SET version = excluded.version, events = events + excluded.events,"
            " last_seq = excluded.last_seq, last_recorded_at = excluded.last_recorded_at",
            rows.values(),
        )
