"""The view the UsageLedgerActor recovers its sessions' lineage from.

``view_session_parents``: each session named with a parent (``X-Session-Parent`` on its
first call, recorded in SessionStarted) and that parent. The ledger folds it into its
spend at start (``domain.cost.caps.rebuild``: a session's cap holds its whole subtree),
and ``status --session`` reads it to sum a subtree's spend. Like every view it folds
only the events it is given, so a rebuild from zero gives the same rows.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import RecordedEvent

__all__ = ["BUDGET_COST", "SessionParentsView"]

#: A ``view_ledger`` row's cost as the spend caps count it: a call without usage that got
#: an error answer or never reached the upstream cost $0 (the proxy releases its
#: reservation), not an unknown amount; anything else is its recorded cost.
BUDGET_COST = ("CASE WHEN source = 'missing' AND (status >= 400 OR outcome IN"
               " ('unreachable', 'no_credential')) THEN '0' ELSE cost END")

_STARTED = CODEC.tags_of(SessionStarted)


class SessionParentsView:
    """``view_session_parents``: ``(session_id, parent)`` for sessions started with one."""

    name = "session_parents"
    tables: tuple[str, ...] = ("view_session_parents",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_session_parents`` and its index by parent (a subtree's walk)."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_session_parents ("
            " session_id TEXT PRIMARY KEY, parent TEXT NOT NULL) WITHOUT ROWID;"
            "CREATE INDEX IF NOT EXISTS view_session_parents_parent"
            " ON view_session_parents (parent, session_id);"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Record the parent a session started with (a session starts once)."""
        for e in events:
            if e.type not in _STARTED:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(e.type, e.data)
            assert isinstance(event, SessionStarted)
            if event.parent_session_id:
                conn.execute("INSERT OR IGNORE INTO view_session_parents VALUES (?, ?)",
                             (session_id, event.parent_session_id))
