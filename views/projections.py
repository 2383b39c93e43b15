"""The daemon's derived views: sessions, calls and their ledger, credentials, rate limits.

Each is a :class:`~sessionwarden.store.Projection`, applied by the store's writer in the
same transaction as the events it folds, and rebuilt identically by ``replay``. ``apply``
only reads the events it is given and its own tables: no clock, no environment, no other
view's tables (views are applied one after another over a batch, so another view's rows
may not yet reflect the batch). They double as the actors' snapshots: an actor recovering
after a restart or passivation loads its state from here instead of folding its streams.
"""

from collections.abc import Sequence
from datetime import datetime

import apsw
from sessionwarden.domain.keys.ratelimits import RateLimitBucket
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    CredentialAdded,
    CredentialRemoved,
    RateLimitsObserved,
    SessionStarted,
)
from sessionwarden.store import RecordedEvent
from sessionwarden.views.ledger_rollup import ROLLUP_TABLE, add_to_rollup, create_rollup

__all__ = ["CredentialsView", "LedgerView", "RateLimitsView", "SessionsView", "read_buckets"]

# Every stored tag of each type, retired versions included: a view rebuilt from an older
# log must count the events written before a schema change.
_ADMITTED = CODEC.tags_of(CallAdmitted)
_COMPLETED = CODEC.tags_of(CallCompleted)
_RESENT = CODEC.tags_of(CallResent)
_SESSION_TYPES = (CODEC.tags_of(SessionStarted) | _ADMITTED | CODEC.tags_of(CallRefused)
                  | _COMPLETED)
_CREDENTIAL_TYPES = (CODEC.tags_of(CredentialAdded) | CODEC.tags_of(CredentialRemoved)
                     | _COMPLETED)


class SessionsView:
    """``view_sessions``: one row per session: its calls, refusals and last outcome."""

    name = "sessions"
    tables: tuple[str, ...] = ("view_sessions",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_sessions``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_sessions ("
            " session_id TEXT PRIMARY KEY, model TEXT NOT NULL, client TEXT NOT NULL,"
            " started_at TEXT NOT NULL, last_at TEXT NOT NULL, calls INTEGER NOT NULL,"
            " refused INTEGER NOT NULL, last_status INTEGER, last_outcome TEXT,"
            " last_credential TEXT, last_latency_ms REAL)"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold session events."""
        for e in events:
            kind = e.type
            if kind not in _SESSION_TYPES:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(kind, e.data)
            if isinstance(event, CallAdmitted) and event.purpose:
                # A side call (the summariser's) counts, but names another model.
                conn.execute("UPDATE view_sessions SET calls = calls + 1, last_at = ?"
                             " WHERE session_id = ?", (e.recorded_at, session_id))
            elif isinstance(event, CallAdmitted):
                conn.execute(
                    "UPDATE view_sessions SET calls = calls + 1, model = ?, last_at = ?"
                    " WHERE session_id = ?",
                    (f"{event.provider}/{event.model}", e.recorded_at, session_id),
                )
            elif isinstance(event, CallCompleted):
                conn.execute(
                    "UPDATE view_sessions SET last_status = ?, last_outcome = ?,"
                    " last_credential = ?, last_latency_ms = ?, last_at = ?"
                    " WHERE session_id = ?",
                    (event.status, event.outcome, event.credential, event.latency_ms,
                     e.recorded_at, session_id),
                )
            elif isinstance(event, SessionStarted):
                conn.execute(
                    "INSERT OR IGNORE INTO view_sessions VALUES"
                    " (?, ?, ?, ?, ?, 0, 0, NULL, NULL, NULL, NULL)",
                    (session_id, event.model, event.client, e.recorded_at, e.recorded_at),
                )
            elif isinstance(event, CallRefused):
                conn.execute(
                    "UPDATE view_sessions SET refused = refused + 1, last_at = ?"
                    " WHERE session_id = ?", (e.recorded_at, session_id),
                )


class LedgerView:
    """``view_calls_open`` (admitted, not yet completed) and ``view_ledger`` (completed).

    A call's row moves from the first to the second at its completion; what admission
    knew (provider, model, stream) comes along, so the completion need not repeat it.
    Each row added to ``view_ledger`` is summed into ``view_ledger_daily`` too
    (``views/ledger_rollup.py``), which ``usage`` reads when it can.
    """

    name = "ledger"
    tables: tuple[str, ...] = ("view_calls_open", "view_ledger", ROLLUP_TABLE)

    def create(self, conn: apsw.Connection) -> None:
        """Create both tables and the indexes ``usage`` groups by."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_calls_open ("
            " call_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, provider TEXT NOT NULL,"
            " model TEXT NOT NULL, estimated_tokens INTEGER NOT NULL,"
            " stream INTEGER NOT NULL, admitted_at TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS view_ledger ("
            " call_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, session_id TEXT NOT NULL,"
            " provider TEXT NOT NULL, model TEXT NOT NULL, credential TEXT NOT NULL,"
            " status INTEGER NOT NULL, outcome TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
            " output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,"
            " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
            " source TEXT NOT NULL, cost TEXT, cost_status TEXT NOT NULL,"
            " recorded_at TEXT NOT NULL, day TEXT NOT NULL, stream INTEGER NOT NULL);"
            "CREATE INDEX IF NOT EXISTS view_ledger_session ON view_ledger (session_id);"
            "CREATE INDEX IF NOT EXISTS view_ledger_recorded ON view_ledger (recorded_at);"
        )
        create_rollup(conn)

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold CallAdmitted and CallCompleted."""
        for e in events:
            kind = e.type
            if kind not in _ADMITTED and kind not in _COMPLETED and kind not in _RESENT:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(kind, e.data)
            if isinstance(event, CallResent):
                if event.provider:  # sent elsewhere (a fallback route): its ledger row too
                    conn.execute("UPDATE view_calls_open SET provider = ?, model = ?"
                                 " WHERE call_id = ?",
                                 (event.provider, event.model, event.call_id))
                continue
            if isinstance(event, CallAdmitted):
                conn.execute(
                    "INSERT OR IGNORE INTO view_calls_open VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (event.call_id, session_id, event.provider, event.model,
                     event.estimated_tokens, int(event.stream), e.recorded_at),
                )
                continue
            assert isinstance(event, CallCompleted)
            row = conn.execute(
                "SELECT provider, model, stream FROM view_calls_open WHERE call_id = ?",
                (event.call_id,),
            ).fetchone()
            provider, model, stream = row if row is not None else ("", "", 0)
            # A call has one completion (its idempotency key guarantees it); IGNORE keeps
            # a replay identical even if a foreign writer broke that rule.
            conn.execute(
                "INSERT OR IGNORE INTO view_ledger VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (event.call_id, e.seq, session_id, provider, model, event.credential,
                 event.status, event.outcome, event.input_tokens, event.output_tokens,
                 event.cache_read_tokens, event.cache_write_tokens, event.reasoning_tokens,
                 event.source, event.cost, event.cost_status, e.recorded_at,
                 e.recorded_at[:10], stream),
            )
            if conn.changes():
                add_to_rollup(
                    conn, (e.recorded_at[:10], session_id, provider, model, event.credential,
                           event.source, event.cost_status),
                    (event.input_tokens, event.output_tokens, event.cache_read_tokens,
                     event.cache_write_tokens, event.reasoning_tokens),
                    event.cost, e.recorded_at)
            if row is not None:
                conn.execute("DELETE FROM view_calls_open WHERE call_id = ?", (event.call_id,))


class CredentialsView:
    """``view_credentials``: each key (by fingerprint), the calls it served, its last status.

    Leases in flight are not a view: they die with the process, so only the pool actor's
    memory knows them. A completion names its key by fingerprint alone; every entry with
    that fingerprint counts it, since two entries holding the same secret are one key.
    """

    name = "credentials"
    tables: tuple[str, ...] = ("view_credentials",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_credentials``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_credentials ("
            " provider TEXT NOT NULL, fingerprint TEXT NOT NULL, ref TEXT NOT NULL,"
            " state TEXT NOT NULL, calls INTEGER NOT NULL,"
            " last_status INTEGER, changed_at TEXT NOT NULL,"
            " PRIMARY KEY (provider, fingerprint))"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold credential events and the key outcome of completions."""
        for e in events:
            if e.type not in _CREDENTIAL_TYPES:
                continue
            event = CODEC.decode(e.type, e.data)
            if isinstance(event, CallCompleted):
                if event.credential:
                    conn.execute(
                        "UPDATE view_credentials SET calls = calls + 1, last_status = ?"
                        " WHERE fingerprint = ?", (event.status, event.credential),
                    )
            elif isinstance(event, CredentialAdded):
                conn.execute(
                    "INSERT INTO view_credentials VALUES (?, ?, ?, 'active', 0, NULL, ?)"
                    " ON CONFLICT (provider, fingerprint) DO UPDATE SET state = 'active',"
                    " ref = excluded.ref, changed_at = excluded.changed_at",
                    (event.provider, event.fingerprint, event.ref, e.recorded_at),
                )
            elif isinstance(event, CredentialRemoved):
                conn.execute(
                    "UPDATE view_credentials SET state = 'removed', changed_at = ?"
                    " WHERE provider = ? AND fingerprint = ?",
                    (e.recorded_at, event.provider, event.fingerprint),
                )


class RateLimitsView:
    """``view_ratelimits``: the last recorded buckets of each key of each provider."""

    name = "ratelimits"
    tables: tuple[str, ...] = ("view_ratelimits",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_ratelimits``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_ratelimits ("
            " provider TEXT NOT NULL, credential TEXT NOT NULL, bucket TEXT NOT NULL,"
            " lim INTEGER, remaining INTEGER, reset_seconds REAL, observed_at TEXT NOT NULL,"
            " PRIMARY KEY (provider, credential, bucket)) WITHOUT ROWID"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Replace a key's buckets with each observation."""
        tag = RateLimitsObserved.type_tag()
        for e in events:
            if e.type != tag or not e.stream.startswith("ratelimits-"):
                continue
            event = CODEC.decode(tag, e.data)
            assert isinstance(event, RateLimitsObserved)
            provider = e.stream[len("ratelimits-"):]
            conn.execute("DELETE FROM view_ratelimits WHERE provider = ? AND credential = ?",
                         (provider, event.credential))
            conn.executemany(
                "INSERT OR REPLACE INTO view_ratelimits VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(provider, event.credential, b.name, b.limit, b.remaining, b.reset_seconds,
                  e.recorded_at) for b in event.buckets],
            )


def read_buckets(conn: apsw.Connection, provider: str,
                 credential: str) -> list[tuple[RateLimitBucket, datetime]]:
    """A key's last recorded buckets, each with when it was observed (by bucket name).

    Empty for a key with none, or a database written without the view (no table).
    """
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                    " AND name = 'view_ratelimits'").fetchone() is None:
        return []
    rows = conn.execute(
        "SELECT bucket, lim, remaining, reset_seconds, observed_at FROM view_ratelimits"
        " WHERE provider = ? AND credential = ? ORDER BY bucket", (provider, credential))
    return [(RateLimitBucket(name=str(name), limit=None if limit is None else int(limit),
                             remaining=None if remaining is None else int(remaining),
                             reset_seconds=None if reset is None else float(reset)),
             datetime.fromisoformat(str(at)))
            for name, limit, remaining, reset, at in rows]
