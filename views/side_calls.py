"""``view_side_calls``: which calls of the ledger the daemon made itself, and for which call.

A side call (the model summariser's, ``purpose: "summary"``; any probe to come) is
admitted in the stream of the session that caused it, so ``view_ledger`` already counts
it in that session; this view says which of the session's calls it was, so ``usage
--by session`` can show it as its own row under the session (issue 12: "side calls
appear as their own rows linked to the session that caused them").

One row per side
call, from its ``CallAdmitted``; a call's purpose never changes. Its own projection,
beside ``views/projections.py``, so the ledger's table keeps its shape; like every view it is
applied in the transaction of its events and rebuilt identically by ``replay``.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import CODEC, CallAdmitted
from sessionwarden.store import RecordedEvent

__all__ = ["SideCallsView"]

_ADMITTED = CODEC.tags_of(CallAdmitted)


class SideCallsView:
    """``view_side_calls``: (call id, session, purpose, the call it served) per side call."""

    name = "side_calls"
    tables: tuple[str, ...] = ("view_side_calls",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_side_calls`` and its index by purpose."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_side_calls ("
            " call_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, purpose TEXT NOT NULL,"
            " parent_call TEXT NOT NULL) WITHOUT ROWID;"
            # ``usage`` asks for the side calls of one purpose (then joins the ledger).
            "CREATE INDEX IF NOT EXISTS view_side_calls_purpose"
            " ON view_side_calls (purpose, session_id);"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold the CallAdmitted of side calls (a client's own calls have no purpose)."""
        for e in events:
            if e.type not in _ADMITTED:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(e.type, e.data)
            assert isinstance(event, CallAdmitted)
            if event.purpose:
                conn.execute("INSERT OR IGNORE INTO view_side_calls VALUES (?, ?, ?, ?)",
                             (event.call_id, session_id, event.purpose, event.parent_call))
