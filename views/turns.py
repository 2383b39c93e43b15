"""``view_turns``: each session's current turn — its iterations used and its budget.

A child session (``X-Session-Parent``) must not escape its parent's budget: before a
child's call is admitted, the proxy reads the parent's turn here (the parent's actor may
be busy, or on another shard; the log is the shared truth), and a child whose parent's
turn is spent is wound down like a spent turn of its own.

One row per session, from its IterationCounted (a child's calls counted in the parent's
turn included) and IterationsAdjusted (the control API). Like every view it is applied in
the transaction of its events and rebuilt identically by ``replay``.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import CODEC, IterationCounted, IterationsAdjusted
from sessionwarden.store import RecordedEvent

__all__ = ["TurnsView", "turn_of"]

_COUNTED = CODEC.tags_of(IterationCounted)
_ADJUSTED = CODEC.tags_of(IterationsAdjusted)


class TurnsView:
    """``view_turns``: (session, turn, iterations used, budget) per session."""

    name = "turns"
    tables: tuple[str, ...] = ("view_turns",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_turns``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_turns ("
            " session_id TEXT PRIMARY KEY, turn TEXT NOT NULL, used INTEGER NOT NULL,"
            " budget INTEGER NOT NULL) WITHOUT ROWID"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold IterationCounted and IterationsAdjusted."""
        for e in events:
            if e.type not in _COUNTED and e.type not in _ADJUSTED:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(e.type, e.data)
            if isinstance(event, IterationCounted):
                conn.execute("INSERT OR REPLACE INTO view_turns VALUES (?, ?, ?, ?)",
                             (session_id, event.turn, event.used, event.limit))
            elif isinstance(event, IterationsAdjusted):
                conn.execute("UPDATE view_turns SET used = ? WHERE session_id = ?",
                             (event.used, session_id))


def turn_of(conn: apsw.Connection, session_id: str) -> tuple[int, int] | None:
    """The session's current turn as ``(used, budget)``; None before its first count."""
    row = conn.execute("SELECT used, budget FROM view_turns WHERE session_id = ?",
                       (session_id,)).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))
