"""Which projections a process maintains: every writer and every replay must agree.

A view is only trustworthy if every process that appends also folds the events into it
(or the next writer catches it up). Keeping the list in one place is how the daemon, the
CLI's admin commands and ``replay`` stay in agreement.
"""

from sessionwarden.store import Projection, StreamsView
from sessionwarden.views.budgets import SessionParentsView
from sessionwarden.views.credits import CreditsView
from sessionwarden.views.projections import (
    CredentialsView,
    LedgerView,
    RateLimitsView,
    SessionsView,
)
from sessionwarden.views.responses import ResponsesView
from sessionwarden.views.side_calls import SideCallsView
from sessionwarden.views.summarisers import SummarisersView
from sessionwarden.views.turns import TurnsView

__all__ = ["default_projections"]


def default_projections() -> list[Projection]:
    """The views of a sessionwarden database, in the order they are applied."""
    return [StreamsView(), SessionsView(), LedgerView(), CredentialsView(), RateLimitsView(),
            SessionParentsView(), CreditsView(), SideCallsView(), SummarisersView(),
            ResponsesView(), TurnsView()]
