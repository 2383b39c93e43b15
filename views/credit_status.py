"""The credit notices up now, read from the log: for ``status`` and any other reader.

:func:`active_notices` lists what ``view_credit_notices`` (``views/credits.py``)
holds, minus the passing notices whose time is over, on any connection to the log (a
read-only one in the CLI). :func:`notice_line` is the one-line text ``status`` prints.
"""

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import apsw

__all__ = ["active_notices", "notice_line"]


def _expired(raised_at: str, ttl_ms: int, now: datetime) -> bool:
    if ttl_ms <= 0:
        return False
    moment = datetime.fromisoformat(raised_at)
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return moment + timedelta(milliseconds=ttl_ms) <= now


def active_notices(conn: apsw.Connection, now: datetime,
                   provider: str | None = None) -> list[dict[str, Any]]:
    """The credit notices up at ``now``, of every provider or of ``provider`` only.

    Each is ``{"provider", "credential", "key", "level", "message", "band", "raised_at"}``
    (``band`` None but for a usage band), sorted by provider, key fingerprint and notice
    key. A log without the view yet (older than credit notices) has none.
    """
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                          " AND name = 'view_credit_notices'").fetchone()
    if exists is None:
        return []
    where, params = ("WHERE provider = ?", (provider,)) if provider is not None else ("", ())
    rows: Iterable[tuple[Any, ...]] = conn.execute(
        "SELECT provider, credential, key, level, message, band, ttl_ms, raised_at"
        f" FROM view_credit_notices {where} ORDER BY provider, credential, key", params)
    return [
        {"provider": p, "credential": c, "key": k, "level": level, "message": message,
         "band": band, "raised_at": raised_at}
        for p, c, k, level, message, band, ttl_ms, raised_at in rows
        if not _expired(raised_at, ttl_ms, now)
    ]


def notice_line(notice: dict[str, Any]) -> str:
    """``<provider> <key fingerprint>: <level> <notice key>: <message>``."""
    return (f"{notice['provider']} {notice['credential']}: {notice['level']} "
            f"{notice['key']}: {notice['message']}")
