"""``view_ledger_daily``: the ledger summed per (day, session, model, provider, credential).

Part of :class:`~sessionwarden.views.projections.LedgerView`, which owns it: every row it
inserts into ``view_ledger`` is added here too, in the same transaction, so ``usage``
can answer from a few rows per session and day instead of every call (issue 12: ``usage
--by day --json`` over 1,000,000 calls in ≤ 1 s). The table is a pure function of
``view_ledger``'s rows, so a rebuild from zero (``replay --verify``) gives identical rows.

A row is one (day, session, provider, model, credential, usage ``source``,
``cost_status``): a group keeps what ``usage`` prints per source and status. ``calls``
counts them, the token columns are sums, ``unpriced`` counts calls with no cost (or one
that is not a finite number of sane size: a foreign writer's), ``cost`` is the exact sum
of the others' costs as a Decimal string (no rounding: a 200-digit context, so the sum does not
depend on the order calls were added in), ``first_at``/``last_at`` the first and last
``recorded_at``.

A database whose ledger was written before this table existed gets it filled from
``view_ledger`` when a writer opens it (:func:`create_rollup`); until then a reader
falls back to ``view_ledger``.
"""

from collections.abc import Sequence
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import apsw
from sessionwarden.domain.usage.recorded import EXACT as _EXACT
from sessionwarden.domain.usage.recorded import exact_sum

__all__ = ["ROLLUP_TABLE", "add_to_rollup", "create_rollup", "spend_by_day"]

ROLLUP_TABLE = "view_ledger_daily"

_KEY = ("day", "session_id", "provider", "model", "credential", "source", "cost_status")
_SUMS = ("calls", "input_tokens", "output_tokens", "cache_read_tokens",
         "cache_write_tokens", "reasoning_tokens", "unpriced")


def create_rollup(conn: apsw.Connection) -> None:
    """Create the table and, on ``conn``, the SQL function its upsert calls.

    The table is filled from ``view_ledger`` when it is new and that already has rows.
    """
    conn.create_scalar_function("sw_add_costs", _add_costs, 2, deterministic=True)
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                          (ROLLUP_TABLE,)).fetchone()
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {ROLLUP_TABLE} ("
        " day TEXT NOT NULL, session_id TEXT NOT NULL, provider TEXT NOT NULL,"
        " model TEXT NOT NULL, credential TEXT NOT NULL, source TEXT NOT NULL,"
        " cost_status TEXT NOT NULL, calls INTEGER NOT NULL, input_tokens INTEGER NOT NULL,"
        " output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,"
        " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
        " unpriced INTEGER NOT NULL, cost TEXT NOT NULL, first_at TEXT NOT NULL,"
        " last_at TEXT NOT NULL,"
        f" PRIMARY KEY ({', '.join(_KEY)})) WITHOUT ROWID;"
        f"CREATE INDEX IF NOT EXISTS {ROLLUP_TABLE}_session ON {ROLLUP_TABLE} (session_id);"
    )
    if exists is not None:
        return
    rows: list[Any] = conn.execute(
        f"SELECT {', '.join(_KEY)}, cost, recorded_at, input_tokens, output_tokens,"
        " cache_read_tokens, cache_write_tokens, reasoning_tokens FROM view_ledger").fetchall()
    for day, sid, provider, model, cred, source, status, cost, at, *tokens in rows:
        add_to_rollup(conn, (day, sid, provider, model, cred, source, status), tokens,
                      cost, at)


def _add_costs(*costs: "apsw.SQLiteValue") -> "apsw.SQLiteValue":
    """SQL ``sw_add_costs(a, b)``: two exact Decimal strings (our own) added exactly."""
    total, amount = costs
    return str(_EXACT.add(Decimal(str(total)), Decimal(str(amount))))


def add_to_rollup(conn: apsw.Connection, key: Sequence[object], tokens: Sequence[int],
                  cost: str | None, recorded_at: str) -> None:
    """Add one ledger row (its key columns in ``_KEY`` order, its five token counts)."""
    amount, unpriced = exact_sum([cost])
    conn.execute(_UPSERT, (*key, 1, *tokens, unpriced, str(amount), recorded_at, recorded_at))


#: One statement per call: the sums in SQL, the cost through ``sw_add_costs`` (exact).
_UPSERT = (
    f"INSERT INTO {ROLLUP_TABLE} VALUES ({', '.join('?' * 17)})"
    f" ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET"
    + ",".join(f" {k} = {k} + excluded.{k}" for k in _SUMS)
    + ", cost = sw_add_costs(cost, excluded.cost), first_at = min(first_at, excluded.first_at),"
    " last_at = max(last_at, excluded.last_at)"
)


def spend_by_day(conn: apsw.Connection, today: date, days: int = 14) -> list[dict[str, Any]]:
    """The ``days`` days up to ``today``, oldest first: calls, exact spend, unpriced calls.

    A day without calls is listed with zeros (a chart's gaps are days, not missing rows);
    an amount is an exact decimal string. Empty when the table does not exist yet.
    """
    first = today - timedelta(days=days - 1)
    out: dict[str, tuple[int, Decimal, int]] = {
        (first + timedelta(days=i)).isoformat(): (0, Decimal(0), 0) for i in range(days)}
    try:
        rows: list[Any] = conn.execute(
            f"SELECT day, sum(calls), sum(unpriced), group_concat(cost, ' ') FROM {ROLLUP_TABLE}"
            " WHERE day >= ? AND day <= ? GROUP BY day",
            (first.isoformat(), today.isoformat())).fetchall()
    except apsw.SQLError:  # a log no writer has opened since the table was added
        return []
    for day, calls, unpriced, costs in rows:
        if day in out:
            total = Decimal(0)
            for cost in str(costs or "").split():
                total = _EXACT.add(total, Decimal(cost))
            out[day] = (calls, total, unpriced)
    return [{"day": day, "calls": n, "spent": str(_EXACT.plus(total)), "unpriced": unpriced}
            for day, (n, total, unpriced) in out.items()]
