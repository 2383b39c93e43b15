"""Events of the runaway guards: a turn's iterations, and the guardrails that fired.

Stream ``session-<id>``, beside the session's calls (the SessionActor appends them with
the call's CallAdmitted, in the same commit): the turn's iteration count is folded back
from them after a restart, and ``status --session`` reads what fired and why.

Rules:

- :class:`IterationCounted`: one per call counted as an iteration of its turn (a resend
  of the same call is not counted, and records none). ``used`` is the turn's count after
  it, ``limit`` the budget it ran under (0: unlimited), ``decision`` what the budget
  decided: ``forward``, ``grace`` (forwarded once more with tools disabled and a
  notice) or ``answer`` (answered by the daemon, not sent); or ``stop``: a guardrail
  stopped it (answered by the daemon, not sent). ``turn`` names the turn (a
  digest of its opening user message), ``items`` and ``last`` the client's items as seen
  (how many, and the identity of the last): what recognises a resend and what is new.
  ``child`` names the child session (``X-Session-Parent``) whose call this count of the
  parent's turn is: a subagent's calls count against its parent's turn too.
- :class:`GuardrailTripped`: a tool-loop rule warned or stopped: the rule, its level,
  the tool, the signature (a hash of the tool and its canonical arguments, never the
  arguments), the count, and whether the call was stopped (``hard_stop`` on, or a cap).
- :class:`IterationsAdjusted`: the control API consumed or refunded iterations of the
  current turn (tools the daemon cannot see); ``used`` is the count after it.
"""

from typing import ClassVar

from sessionwarden.events.base import Event

__all__ = ["GuardrailTripped", "IterationCounted", "IterationsAdjusted"]


class IterationCounted(Event, frozen=True):
    """A call counted as one iteration of its turn (module doc)."""

    TAG: ClassVar[str] = "runaway.iteration_counted.v1"

    call_id: str
    turn: str
    used: int
    limit: int = 0
    decision: str = "forward"
    items: int = 0
    last: str = ""
    child: str = ""


class GuardrailTripped(Event, frozen=True):
    """A tool-loop guardrail warned the model, or stopped the call (module doc)."""

    TAG: ClassVar[str] = "runaway.guardrail_tripped.v1"

    call_id: str
    rule: str
    level: str = "warn"
    tool: str = ""
    signature: str = ""
    count: int = 0
    stopped: bool = False


class IterationsAdjusted(Event, frozen=True):
    """The control API consumed or refunded iterations of the turn (module doc)."""

    TAG: ClassVar[str] = "runaway.iterations_adjusted.v1"

    consumed: int = 0
    refunded: int = 0
    used: int = 0
