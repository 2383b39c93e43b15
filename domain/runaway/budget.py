"""Iteration budgets: a turn's calls counted, one grace call to wrap up, then the daemon answers.

Issue 25 after hermes-behaviour.md §8: each turn has a budget of calls
(``[budgets] max_iterations``, a child session's ``child_max_iterations``); calls are
forwarded while it lasts, the call that finds it spent is forwarded once more with tools
disabled and a notice (the *grace call*), and the calls after that are answered by the
daemon without being sent. Pure values and decisions; the counting is the caller's.

Rules:

* :func:`decide`: ``"forward"`` while ``used < limit`` (always, for a limit ≤ 0: unlimited,
  but still counted); then ``"grace"`` once; then ``"answer"``. The counting (every call
  of the turn, a resend aside; consumed and refunded through the control API) is the
  runaway stage's (``domain.admission.runaway_stage``), folded from the log.
* No intermediate "pressure" warnings before exhaustion (Hermes #7915: models gave up
  early): the grace notice is the only notice.
"""

from typing import Literal

import msgspec
from sessionwarden.domain.runaway.turns import runtime_notice

__all__ = ["Decision", "IterationBudget", "decide", "exhausted_text", "grace_notice"]

#: What to do with a call: send it, send it as the grace call, or answer it ourselves.
Decision = Literal["forward", "grace", "answer"]


class IterationBudget(msgspec.Struct, frozen=True):
    """A turn's iteration budget.

    Attributes:
        limit: the calls the turn may make (≤ 0: unlimited, still counted).
        used: the iterations counted so far.
        grace: the grace call was made.
    """

    limit: int
    used: int = 0
    grace: bool = False

    @property
    def unlimited(self) -> bool:
        """Whether the budget has no limit."""
        return self.limit <= 0

    @property
    def remaining(self) -> int | None:
        """The iterations left (None when unlimited)."""
        return None if self.unlimited else max(0, self.limit - self.used)


def decide(budget: IterationBudget) -> Decision:
    """What to do with the next call (module doc)."""
    if budget.unlimited or budget.used < budget.limit:
        return "forward"
    return "answer" if budget.grace else "grace"


def grace_notice(used: int, limit: int) -> str:
    """The notice the grace call carries: the budget is spent, wrap up without tools."""
    return runtime_notice("iteration budget spent", (
        f"This turn has used {used} of its {limit} iterations (model calls). Tools are"
        " disabled for this one last call: do not call any tool. Wrap up now: say what is"
        " done, what is left to do, and what the user should do next."))


def exhausted_text(limit: int, setting_hint: str = "[budgets] max_iterations",
                   session_id: str | None = None) -> str:
    """The daemon's own answer to a call after the grace call (it is not forwarded).

    Args:
        limit: the turn's budget.
        setting_hint: the setting that sets it (a child: ``[budgets] child_max_iterations``).
        session_id: the session, to spell out the control API's address.
    """
    session = session_id if session_id is not None else "{id}"
    return runtime_notice("iteration budget spent", (
        f"This turn's iteration budget ({limit} model calls) is spent, and its last call to"
        " wrap up has been made: sessionwarden answered this call itself without sending it"
        " to the model. Send a new message to start a new turn with a fresh budget. To"
        f" allow more calls per turn, raise {setting_hint}; to continue this turn, give"
        f" iterations back: POST /v1/sessions/{session}/iterations with"
        ' {"refund": n}.'))
