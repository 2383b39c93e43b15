"""One session's budget read from the log, for ``status --session`` with the daemon stopped.

The running daemon's figures are the UsageLedgerActor's (``GET
/v1/sessions/{id}/budget``: reservations of calls in flight included).

The log knows
what was spent: :func:`read_budget` sums the costs of the session's subtree (itself and
every session started with it as ``X-Session-Parent``, recursively, through
``view_session_parents``) from ``view_ledger``, and takes the cap from the ``budgets``
stream (a cap set through the control API) or the configuration. Nothing is reserved
in a log; a call of unknown cost counts $0 and in ``unknown_calls``, as at a restart
(an error answer without usage counts $0, not unknown: ``BUDGET_COST``).
"""

from decimal import Decimal

from sessionwarden.config import Config
from sessionwarden.domain.admission.caps_stage import SessionBudget, budget_of
from sessionwarden.domain.cost.caps import Tally
from sessionwarden.domain.usage.recorded import exact_sum
from sessionwarden.events import BUDGETS_STREAM, CODEC, SessionCapSet
from sessionwarden.store import EventLog
from sessionwarden.views.budgets import BUDGET_COST

__all__ = ["read_budget"]

#: The whole subtree, however deep, as the ledger counts it (``domain.cost.lineage``:
#: a session refused for a too-deep chain spent nothing, and what was spent below the
#: bound before a cap was set counts in every ancestor). UNION, not UNION ALL: a
#: recorded cycle adds no row twice, so the walk ends.
_SUBTREE = (
    "WITH RECURSIVE tree(id) AS (SELECT ? UNION"
    " SELECT p.session_id FROM view_session_parents p JOIN tree t ON p.parent = t.id)"
    f" SELECT {BUDGET_COST} FROM view_ledger WHERE session_id IN (SELECT id FROM tree)"
)


def _has_table(log: EventLog, name: str) -> bool:
    row = log.read_connection().execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def read_budget(log: EventLog, config: Config, session_id: str) -> SessionBudget:
    """The budget of ``session_id`` as the log has it (no reservations: nothing in flight)."""
    cap = config.budgets.session_usd
    for record in log.read_stream(BUDGETS_STREAM):
        event = CODEC.decode(record.type, record.data)
        if isinstance(event, SessionCapSet) and event.session_id == session_id:
            cap = None if event.usd is None else Decimal(event.usd)
    parent = ""
    conn = log.read_connection()
    with conn:  # one read transaction: the tree and the ledger agree
        if _has_table(log, "view_session_parents"):
            costs = [c for (c,) in conn.execute(_SUBTREE, (session_id,))]
            row = conn.execute("SELECT parent FROM view_session_parents WHERE session_id = ?",
                               (session_id,)).fetchone()
            parent = str(row[0]) if row else ""
        else:  # a log no daemon of this version has written to yet
            costs = [c for (c,) in conn.execute(
                f"SELECT {BUDGET_COST} FROM view_ledger WHERE session_id = ?", (session_id,))]
    # A cost that is not a finite number (an old or altered log) is unknown, as in
    # ``usage``: never a crash, never NaN spent.
    spent, unknown = exact_sum(costs)
    return budget_of(session_id, cap, Tally(spent, Decimal(0), unknown), parent)
