"""``CreditsView``: each key's last recorded credit state and the credit notices now up.

A :class:`~sessionwarden.store.Projection` like those of ``views/projections.py``, applied by
the store's writer in the transaction of the events it folds and rebuilt identically by
``replay``. Two tables:

- ``view_credits``: per (provider, key fingerprint) the last ``credits.observed`` payload
  as stored, and when; the rate guard's credits tracker recovers its state from it.
- ``view_credit_notices``: per (provider, key, notice key) the notice raised and not yet
  cleared; ``status`` lists them (``views/credit_status.py``). A passing notice (``ttl_ms``)
  stays in the table until it is raised again: readers drop it once its time is over.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.events import CODEC, CreditNoticeCleared, CreditNoticeRaised, CreditsObserved
from sessionwarden.store import RecordedEvent

__all__ = ["CREDITS_PREFIX", "CreditsView", "credits_stream"]

#: The prefix of a provider's credits stream.
CREDITS_PREFIX = "credits-"

_OBSERVED = CODEC.tags_of(CreditsObserved)
_RAISED = CODEC.tags_of(CreditNoticeRaised)
_CLEARED = CODEC.tags_of(CreditNoticeCleared)
_TYPES = _OBSERVED | _RAISED | _CLEARED


def credits_stream(provider: str) -> str:
    """The stream of a provider's credit observations and notices."""
    return CREDITS_PREFIX + provider


class CreditsView:
    """``view_credits`` and ``view_credit_notices`` (see the module docstring)."""

    name = "credits"
    tables: tuple[str, ...] = ("view_credits", "view_credit_notices")

    def create(self, conn: apsw.Connection) -> None:
        """Create both tables."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_credits ("
            " provider TEXT NOT NULL, credential TEXT NOT NULL, observed_at TEXT NOT NULL,"
            " type TEXT NOT NULL, data BLOB NOT NULL,"
            " PRIMARY KEY (provider, credential)) WITHOUT ROWID;"
            "CREATE TABLE IF NOT EXISTS view_credit_notices ("
            " provider TEXT NOT NULL, credential TEXT NOT NULL, key TEXT NOT NULL,"
            " level TEXT NOT NULL, message TEXT NOT NULL, band INTEGER,"
            " ttl_ms INTEGER NOT NULL, raised_at TEXT NOT NULL,"
            " PRIMARY KEY (provider, credential, key)) WITHOUT ROWID"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold the credits events of ``credits-<provider>`` streams."""
        for e in events:
            if e.type not in _TYPES or not e.stream.startswith(CREDITS_PREFIX):
                continue
            provider = e.stream[len(CREDITS_PREFIX):]
            event = CODEC.decode(e.type, e.data)
            if isinstance(event, CreditsObserved):
                conn.execute(
                    "INSERT OR REPLACE INTO view_credits VALUES (?, ?, ?, ?, ?)",
                    (provider, event.credential, e.recorded_at, e.type, e.data))
            elif isinstance(event, CreditNoticeRaised):
                conn.execute(
                    "INSERT OR REPLACE INTO view_credit_notices VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (provider, event.credential, event.key, event.level, event.message,
                     event.band, event.ttl_ms, e.recorded_at))
            elif isinstance(event, CreditNoticeCleared):
                conn.execute(
                    "DELETE FROM view_credit_notices"
                    " WHERE provider = ? AND credential = ? AND key = ?",
                    (provider, event.credential, event.key))
