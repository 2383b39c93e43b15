"""The daemon's derived views: sessions, the usage ledger, and credentials.

Each is a :class:`~sessionwarden.store.Projection`, applied by the store's writer in the
same transaction as the events it folds, and rebuilt identically by ``replay``. ``apply``
only reads the events it is given and its own tables: no clock, no environment. They
double as the actors' snapshots: an actor recovering after a restart or passivation reads
its state from here instead of folding its whole stream.
"""

from collections.abc import Sequence

import apsw
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CredentialAdded,
    CredentialRemoved,
    LeaseAcquired,
    LeaseReleased,
    SessionStarted,
    UpstreamResponded,
    UsageRecorded,
)
from sessionwarden.store import RecordedEvent

__all__ = ["CredentialsView", "LedgerView", "SessionsView"]

_SESSION_TYPES = frozenset(
    {SessionStarted.type_tag(), CallAdmitted.type_tag(), UpstreamResponded.type_tag()}
)
_CREDENTIAL_TYPES = frozenset(
    t.type_tag() for t in (CredentialAdded, CredentialRemoved, LeaseAcquired, LeaseReleased)
)
_USAGE = UsageRecorded.type_tag()


class SessionsView:
    """``view_sessions``: one row per session with its calls and last upstream status."""

    name = "sessions"
    tables: tuple[str, ...] = ("view_sessions",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_sessions``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_sessions ("
            " session_id TEXT PRIMARY KEY, model TEXT NOT NULL, client TEXT NOT NULL,"
            " started_at TEXT NOT NULL, last_at TEXT NOT NULL, calls INTEGER NOT NULL,"
            " last_status INTEGER, last_credential TEXT, last_latency_ms REAL)"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold session events."""
        for e in events:
            if e.type not in _SESSION_TYPES:
                continue
            event = CODEC.decode(e.type, e.data)
            if isinstance(event, SessionStarted):
                conn.execute(
                    "INSERT OR IGNORE INTO view_sessions"
                    " VALUES (?, ?, ?, ?, ?, 0, NULL, NULL, NULL)",
                    (event.session_id, event.model, event.client, e.recorded_at, e.recorded_at),
                )
            elif isinstance(event, CallAdmitted):
                conn.execute(
                    "UPDATE view_sessions SET calls = calls + 1, model = ?, last_at = ?"
                    " WHERE session_id = ?",
                    (event.model, e.recorded_at, event.session_id),
                )
            elif isinstance(event, UpstreamResponded):
                conn.execute(
                    "UPDATE view_sessions SET last_status = ?, last_credential = ?,"
                    " last_latency_ms = ?, last_at = ? WHERE session_id = ?",
                    (event.status, event.credential, event.latency_ms, e.recorded_at,
                     event.session_id),
                )


class LedgerView:
    """``view_ledger``: one row per proxied call with its canonical usage and cost."""

    name = "ledger"
    tables: tuple[str, ...] = ("view_ledger",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_ledger`` and the indexes ``usage`` groups by."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_ledger ("
            " call_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, session_id TEXT NOT NULL,"
            " provider TEXT NOT NULL, model TEXT NOT NULL, credential TEXT NOT NULL,"
            " status INTEGER NOT NULL, input_tokens INTEGER NOT NULL,"
            " output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,"
            " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
            " source TEXT NOT NULL, cost TEXT, cost_status TEXT NOT NULL,"
            " recorded_at TEXT NOT NULL, day TEXT NOT NULL, stream INTEGER NOT NULL,"
            " client_disconnected INTEGER NOT NULL);"
            "CREATE INDEX IF NOT EXISTS view_ledger_session ON view_ledger (session_id);"
            "CREATE INDEX IF NOT EXISTS view_ledger_recorded ON view_ledger (recorded_at);"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold ``UsageRecorded`` events."""
        rows = []
        for e in events:
            if e.type != _USAGE:
                continue
            u = CODEC.decode(e.type, e.data)
            assert isinstance(u, UsageRecorded)
            rows.append(
                (u.call_id, e.seq, u.session_id, u.provider, u.model, u.credential, u.status,
                 u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens,
                 u.reasoning_tokens, u.source, u.cost, u.cost_status, e.recorded_at,
                 e.recorded_at[:10], int(u.stream), int(u.client_disconnected))
            )
        if rows:
            # A call has exactly one UsageRecorded (its idempotency key guarantees it);
            # IGNORE keeps a replay identical even if a foreign writer broke that rule.
            conn.executemany(
                "INSERT OR IGNORE INTO view_ledger VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )


class CredentialsView:
    """``view_credentials``: each key (by fingerprint), its lease count and last status.

    Active leases are not a view: they die with the process, so only the pool actor's
    memory knows them.
    """

    name = "credentials"
    tables: tuple[str, ...] = ("view_credentials",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_credentials``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_credentials ("
            " provider TEXT NOT NULL, fingerprint TEXT NOT NULL, ref TEXT NOT NULL,"
            " state TEXT NOT NULL, leases INTEGER NOT NULL,"
            " last_status INTEGER, changed_at TEXT NOT NULL,"
            " PRIMARY KEY (provider, fingerprint))"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold credential events."""
        for e in events:
            if e.type not in _CREDENTIAL_TYPES:
                continue
            event = CODEC.decode(e.type, e.data)
            if isinstance(event, CredentialAdded):
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
            elif isinstance(event, LeaseAcquired):
                conn.execute(
                    "UPDATE view_credentials SET leases = leases + 1"
                    " WHERE provider = ? AND fingerprint = ?",
                    (event.provider, event.fingerprint),
                )
            elif isinstance(event, LeaseReleased):
                conn.execute(
                    "UPDATE view_credentials SET last_status = ?"
                    " WHERE provider = ? AND fingerprint = ?",
                    (event.status, event.provider, event.fingerprint),
                )
