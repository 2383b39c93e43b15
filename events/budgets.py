"""Events of the spend caps: what the UsageLedgerActor was told to change.

Stream ``budgets``, owned by the UsageLedgerActor. The spend itself is not recorded
here: it is the ledger's (every CallCompleted carries its cost) and the actor folds it
from ``view_ledger`` at start. What the log cannot derive from the calls is recorded:

- :class:`SessionCapSet`: one session's cap set through the control API (``usd``
  None lifts the cap for that session), overriding ``[budgets] session_usd``.
"""

from typing import ClassVar

from sessionwarden.events.base import Event

__all__ = ["BUDGETS_STREAM", "SessionCapSet"]

#: The stream of the spend caps' own facts, owned by the UsageLedgerActor.
BUDGETS_STREAM = "budgets"


class SessionCapSet(Event, frozen=True):
    """The cap of session ``session_id`` (and its subtree) is now ``usd``.

    ``usd`` is an exact decimal string of USD; None means no cap for this session.
    """

    TAG: ClassVar[str] = "budgets.session_cap_set.v1"

    session_id: str
    usd: str | None = None
