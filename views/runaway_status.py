"""A session's runaway guards as ``status --session`` shows them: the turn, warnings, stops.

Folded from the session's stream, purely: the current turn's iterations and budget
(IterationCounted, IterationsAdjusted), whether its grace call was made, the guardrail
warnings it raised (GuardrailTripped, by rule), and the last call the daemon answered
itself and why (a spent budget, or the rule that stopped it).
"""

from collections.abc import Iterable

import msgspec
from sessionwarden.events import Event, GuardrailTripped, IterationCounted, IterationsAdjusted
from sessionwarden.text import printable

__all__ = ["RunawayStatus", "fold_runaway", "runaway_lines"]


class RunawayStatus(msgspec.Struct, kw_only=True):
    """The current turn's guards (module doc); ``budget`` None when unlimited."""

    turn: str = ""
    iterations: int = 0
    budget: int | None = None
    grace_call: str = ""
    warnings: dict[str, int] = msgspec.field(default_factory=dict)
    stopped_by: str = ""
    stopped_call: str = ""
    child_iterations: int = 0


def fold_runaway(events: Iterable[Event]) -> RunawayStatus | None:
    """The guards' status from a session's events, oldest first; None before any count."""
    status: RunawayStatus | None = None
    for event in events:
        if isinstance(event, IterationCounted):
            if status is None or (event.turn != status.turn and not event.child):
                status = RunawayStatus(turn=event.turn)  # a new turn: fresh counts
            status.iterations = event.used
            status.budget = event.limit if event.limit > 0 else None
            if event.child:
                status.child_iterations += 1
            elif event.decision == "grace":
                status.grace_call = event.call_id
            elif event.decision == "answer":
                status.stopped_by, status.stopped_call = "iteration_budget", event.call_id
        elif isinstance(event, IterationsAdjusted) and status is not None:
            status.iterations = event.used
        elif isinstance(event, GuardrailTripped) and status is not None:
            if event.stopped:
                status.stopped_by, status.stopped_call = event.rule, event.call_id
            else:
                status.warnings[event.rule] = status.warnings.get(event.rule, 0) + 1
    return status


def runaway_lines(status: RunawayStatus | None) -> list[str]:
    """The lines ``status --session`` prints for the guards (none before any count)."""
    if status is None:
        return []
    budget = "unlimited" if status.budget is None else f"{status.budget}"
    noun = "iteration" if status.iterations == 1 else "iterations"
    text = f"turn: {status.iterations} {noun} of {budget}"
    if status.child_iterations:
        text += f" ({status.child_iterations} by child sessions)"
    if status.grace_call:
        text += f"; grace call {printable(status.grace_call)}"
    lines = [text]
    if status.warnings:
        lines.append("guardrail warnings: " + ", ".join(
            f"{printable(rule)} {n}" for rule, n in sorted(status.warnings.items())))
    if status.stopped_by:
        lines.append(f"stopped: call {printable(status.stopped_call)} answered by "
                     f"sessionwarden ({printable(status.stopped_by)})")
    return lines
