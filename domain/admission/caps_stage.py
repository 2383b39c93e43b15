"""The ``budgets`` admission stage: a call the spend caps cannot hold is refused unsent.

The decision itself is the UsageLedgerActor's (``domain.cost.caps.reserve``, over every
session's spend: caps span sessions, so no session's state can decide them). The proxy
asks the ledger first; the ledger reserves the call's worst case, or refuses it, and
hands the request on to the session's actor with its answer in ``CallRequest.budget``.

This stage turns that answer into the session's record: a
:class:`~sessionwarden.domain.cost.caps.Refusal` becomes a refusal (HTTP 402, recorded as
CallRefused by stage ``budgets``, with ``Retry-After`` when a daily cap is the one in
the way), and so does a ``domain.cost.lineage.ParentRefusal`` (HTTP 400: a session whose
parent link the caps cannot follow, too deep or a cycle); a held reservation, or no
answer (no ledger: embedders, tests), proceeds.

It runs right after validation and before context governance, so a refused call
writes no spill file and costs no summary; the worst case is therefore reckoned on the
request as the client sent it, an upper bound of what governance forwards.
"""

from datetime import datetime
from decimal import Decimal

import msgspec
from sessionwarden.domain.admission.pipeline import Proceed, Refuse, StageResult, stage
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.cost.caps import Caps, Refusal, Scope, Spend, Tally
from sessionwarden.domain.cost.lineage import ParentRefusal
from sessionwarden.domain.session import SessionState

__all__ = ["SessionBudget", "budget_of", "session_budget", "spend_caps"]


@stage("budgets")
def spend_caps(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    """Refuse the call the ledger refused; let a reserved (or unjudged) call through."""
    decision = request.budget
    # A call the daemon answers itself is not sent: it costs nothing a cap could refuse.
    if isinstance(decision, Refusal | ParentRefusal) and request.reply is None:
        return Refuse(decision.status, decision.message, decision.code, decision.kind,
                      retry_after_s=decision.retry_after_s)
    return Proceed(request)


class SessionBudget(msgspec.Struct, frozen=True, kw_only=True):
    """A session's cap and its subtree's money, exact decimal strings (JSON-ready).

    ``cap`` and ``left`` are None without a cap; ``left`` is never below "0".
    ``unknown_calls`` counts calls settled with an unknown cost (``spent`` holds each
    at its worst case, or $0 for an unpriced model allowed to run). ``parent`` is the
    session it draws from too, "" for none.
    """

    session_id: str
    cap: str | None
    spent: str
    reserved: str
    left: str | None
    unknown_calls: int = 0
    parent: str = ""


def _plain(amount: Decimal) -> str:
    """An exact amount without trailing zeros or an exponent: ``0.02``, ``0``, ``1500``."""
    return f"{amount.normalize():f}" if amount else "0"


def budget_of(session_id: str, cap: Decimal | None, tally: Tally,
              parent: str = "") -> SessionBudget:
    """The figures of a session whose subtree's money is ``tally`` under ``cap``."""
    left = None if cap is None else max(Decimal(0), cap - tally.spent - tally.reserved)
    return SessionBudget(session_id=session_id, cap=None if cap is None else _plain(cap),
                         spent=_plain(tally.spent), reserved=_plain(tally.reserved),
                         left=None if left is None else _plain(left),
                         unknown_calls=tally.unknown, parent=parent)


def session_budget(spend: Spend, caps: Caps, session_id: str) -> SessionBudget:
    """What ``session_id``'s cap holds now: spent and reserved by its subtree, what is left."""
    scope = Scope("session", session_id)
    return budget_of(session_id, caps.cap(scope), spend.tally(scope),
                     spend.parents.get(session_id, ""))
