"""``view_summarisers``: each summary model's record across sessions, and its cooldown.

A summary model that fails for one session is cooling for all (issue 23): the
CompressorActor asks this view before a model summary is requested, so a model that just
failed is not asked again by another session, nor after a restart.

One row per summary model (``provider/model``): a ``SummariserFailed`` that set a cooldown
counts a failure and moves ``cooldown_until`` to the later of its end and the one
recorded; a ``ContextCompressed`` by that model (a summary accepted) clears both. Applied
in the transaction of its events and rebuilt identically by ``replay``.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

import apsw
from sessionwarden.events import CODEC, ContextCompressed, SummariserFailed
from sessionwarden.store import RecordedEvent

__all__ = ["SummarisersView", "summariser_cooldown"]

_FAILED = CODEC.tags_of(SummariserFailed)
_COMPRESSED = CODEC.tags_of(ContextCompressed)


class SummarisersView:
    """``view_summarisers``: (model, failures in a row, cooling until) per summary model."""

    name = "summarisers"
    tables: tuple[str, ...] = ("view_summarisers",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_summarisers``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_summarisers ("
            " model TEXT PRIMARY KEY, failures INTEGER NOT NULL,"
            " cooldown_until TEXT) WITHOUT ROWID")

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold the summariser's failures and its accepted summaries."""
        for e in events:
            if e.type in _FAILED:
                failed = CODEC.decode(e.type, e.data)
                assert isinstance(failed, SummariserFailed)
                if failed.cooldown_s <= 0:
                    continue  # not asked (it was cooling already): nothing new about it
                until = (datetime.fromisoformat(e.recorded_at)
                         + timedelta(seconds=failed.cooldown_s)).isoformat()
                conn.execute(
                    "INSERT INTO view_summarisers VALUES (?, 1, ?) ON CONFLICT (model) DO"
                    " UPDATE SET failures = failures + 1, cooldown_until ="
                    " max(coalesce(cooldown_until, ''), excluded.cooldown_until)",
                    (failed.model, until))
            elif e.type in _COMPRESSED:
                done = CODEC.decode(e.type, e.data)
                assert isinstance(done, ContextCompressed)
                if done.summariser == "model" and done.model:
                    conn.execute("DELETE FROM view_summarisers WHERE model = ?", (done.model,))


def summariser_cooldown(conn: apsw.Connection, model: str, now: datetime) -> datetime | None:
    """Until when ``model`` is cooling after failures (any session's), or None."""
    row = conn.execute("SELECT cooldown_until FROM view_summarisers WHERE model = ?",
                       (model,)).fetchone()
    if row is None or not row[0]:
        return None
    until = datetime.fromisoformat(str(row[0]))
    return until if until > now else None
