"""The runaway stage: a turn's iteration budget, its grace call, and the tool-loop guards.

One admission stage, pure, after validation and before the spend caps (a call the daemon
answers itself costs nothing a cap could refuse). It counts the call as an iteration of
its turn, folds the turn's new tool calls and results into the guardrails
(``domain.runaway``), and decides: forward (with any warnings as runtime notices),
forward once more with tools disabled (the grace call), or answer the call itself.

Rules:

- A turn is everything since the newest real user message among the client's items
  (``domain.runaway.turns``); a new one starts a fresh budget and fresh guards.
- A resend is the same items as the turn's last counted call (as many, the last one the
  same by identity, cache markers ignored): a client's retry of a call that failed. It
  is not counted, records nothing, and gets the same decision again (a grace call's
  ``tool_choice`` again, not its notice: that is in the forwarded history already).
- Only the items after the last counted call's are read: O(new items) per call. After a
  restart the count comes from the log (IterationCounted, folded into ``SessionState.
  turn``) and the guards are folded again from the turn's items, silently: what they
  warned of is in the log already.
- The budget: ``[budgets] max_iterations`` (``child_max_iterations`` for a session named
  with ``X-Session-Parent``; 0: unlimited, counted anyway). The call that finds it spent
  is the grace call; the calls after it are answered by the daemon (``CallRequest.
  reply``): an ordinary answer, or with ``on_exhausted = "error"`` a 429. A child whose
  parent's turn is spent is treated as spent too.
- A guardrail warning becomes a notice appended to the forwarded history (never a
  rewrite of the client's tool result); a stop answers the call when ``hard_stop`` is on
  (a per-turn cap stops whatever ``hard_stop`` says). Each is a GuardrailTripped.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
from sessionwarden.config import Config
from sessionwarden.domain.admission.pipeline import Proceed, StageResult
from sessionwarden.domain.calls import CallRequest, LocalReply
from sessionwarden.domain.context.conversation import Conversation
from sessionwarden.domain.context.markers import identity
from sessionwarden.domain.context.messages import Message, ToolResult
from sessionwarden.domain.runaway.budget import (
    IterationBudget,
    decide,
    exhausted_text,
    grace_notice,
)
from sessionwarden.domain.runaway.guardrails import (
    Finding,
    GuardSettings,
    GuardState,
    fold,
    stop_text,
    warning_notice,
)
from sessionwarden.domain.runaway.signals import observations
from sessionwarden.domain.runaway.turns import runtime_notice, turn_key, turn_start
from sessionwarden.domain.session import SessionState, Turn
from sessionwarden.events import Event, GuardrailTripped, IterationCounted

__all__ = ["GuardMemory", "RunawaySettings", "govern_runaway"]

_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.encode


class RunawaySettings(NamedTuple):
    """What the stage runs under, from ``[budgets]`` and ``[guardrails]``."""

    max_iterations: int = 90
    child_max_iterations: int = 50
    on_exhausted: str = "answer"
    guards: GuardSettings = GuardSettings()

    @classmethod
    def from_config(cls, config: Config) -> "RunawaySettings":
        """The settings of ``config``."""
        budgets, guardrails = config.budgets, config.guardrails
        return cls(budgets.max_iterations, budgets.child_max_iterations,
                   budgets.on_exhausted,
                   GuardSettings.from_config(guardrails))


class GuardMemory(NamedTuple):
    """The guards of a turn as of its last counted call (``SessionState.guards``)."""

    turn: str
    items: int
    guards: GuardState


def govern_runaway(settings: RunawaySettings, state: SessionState, request: CallRequest,
                   now: datetime) -> StageResult:
    """The runaway stage (module doc); ``default_pipeline`` binds ``settings``."""
    del now
    conversation = request.body
    if request.purpose or not isinstance(conversation, Conversation):
        return Proceed(request)  # a side call, or a format without a conversation model
    items = conversation.items
    last = identity(items[-1]).hex() if items else ""
    turn = state.turn
    if turn is not None and turn.items == len(items) and turn.last == last:
        return _again(settings, request, turn)
    codec = conversation.codec
    seen = _seen(turn, items)
    window, since = _window(codec.read_item, items, seen)
    new = window[since:]
    opened = turn_start(new)
    # Whether this call goes on with the recorded turn (its grace call, if made, stands).
    goes_on = turn is not None and opened is None and bool(seen or request.continues)
    if turn is not None and seen and opened is None:  # the turn goes on
        key, used = turn.turn, turn.used
        guards = _guards(settings.guards, state, turn, items, seen, codec.read_item)
        fresh = observations(window, since)
    elif turn is not None and request.continues and opened is None:
        # A link of a stored chain holds new items only: with no user message among
        # them, the turn goes on (its calls are in the stored responses, so only what
        # these items pair among themselves is observed).
        key, used = turn.turn, turn.used
        memory = state.guards
        guards = (memory.guards if isinstance(memory, GuardMemory) and memory.turn == key
                  else GuardState())
        fresh = observations(new)
    else:
        # A new real user message opens a new turn; with no counted call to build on (a
        # first call, a history the client rewrote) the turn is the one the items show,
        # and the same opening message as the recorded turn's continues its count.
        key = turn_key(new[opened]) if opened is not None else ""
        goes_on = turn is not None and turn.turn == key and not seen
        used = turn.used if goes_on and turn is not None else 0
        guards = GuardState()
        fresh = observations(new[(opened + 1) if opened is not None else 0:])
    guards, findings = fold(guards, fresh, settings.guards)
    memory = GuardMemory(key, len(items), guards)
    limit = (settings.child_max_iterations if request.parent_session
             else settings.max_iterations)
    # A new turn opened with the same words as the last ("continue" again) starts afresh.
    graced = goes_on and turn is not None and turn.decision in ("grace", "answer")
    budget = IterationBudget(limit, used, graced)
    decision = decide(budget)
    if decision == "forward" and _parent_spent(request):
        decision = "answer" if graced else "grace"
    # Adopted by the session's actor once the admission is durable, like the context.
    request = msgspec.structs.replace(request, guards=memory)
    stop = next((f for f in findings if f.level == "stop"), None)
    events: list[Event] = [IterationCounted(
        call_id=request.call_id, turn=key, used=used + 1, limit=limit,
        decision="stop" if stop is not None else decision, items=len(items), last=last)]
    events.extend(_tripped(request.call_id, findings))
    if stop is not None:
        return Proceed(msgspec.structs.replace(request, reply=_stopped(
            settings, stop_text(stop))), tuple(events))
    if decision == "answer":
        return Proceed(msgspec.structs.replace(request, reply=_exhausted(
            settings, limit, request)), tuple(events))
    notices: tuple[str, ...] = (warning_notice(findings),) if findings else ()
    if decision == "grace":
        notices += (grace_notice(used, limit),)
        request = _without_tools(request, conversation)
    return Proceed(msgspec.structs.replace(request, notices=notices), tuple(events))


def _again(settings: RunawaySettings, request: CallRequest, turn: Turn) -> StageResult:
    """A resend of the turn's last counted call: its decision again, nothing counted."""
    if turn.decision == "answer":
        return Proceed(msgspec.structs.replace(request,
                                               reply=_exhausted(settings, turn.limit, request)))
    if turn.decision == "stop":  # a client retrying a stopped call (a 429) is stopped again
        return Proceed(msgspec.structs.replace(request, reply=_stopped(settings, _STOPPED)))
    if turn.decision == "grace":
        assert isinstance(request.body, Conversation)
        return Proceed(_without_tools(request, request.body))
    return Proceed(request)


def _seen(turn: Turn | None, items: Sequence[bytes]) -> int:
    """How many of ``items`` the turn's last counted call had: 0 when they are not these."""
    if turn is None or not 0 < turn.items <= len(items):
        return 0
    return turn.items if identity(items[turn.items - 1]).hex() == turn.last else 0


def _read(read: Any, raws: Sequence[bytes]) -> list[Message]:
    """The items that read as messages (an invalid one is the context stage's to refuse)."""
    return [m for m in (read(raw) for raw in raws) if isinstance(m, Message)]


def _window(read: Any, items: Sequence[bytes], seen: int) -> tuple[list[Message], int]:
    """The new items read, after the few before them their results may answer.

    Back from ``seen`` over tool results to the assistant message whose calls they
    answer (results follow their calls): pairing from there is pairing from the start,
    at the cost of a message or two. Returns the messages and where the new ones begin.
    """
    before: list[Message] = []
    for raw in reversed(items[:seen]):
        message = read(raw)
        if not isinstance(message, Message):
            break
        before.append(message)
        if not any(isinstance(part, ToolResult) for part in message.parts):
            break  # the assistant message (or anything else): pairing starts here
    before.reverse()
    return [*before, *_read(read, items[seen:])], len(before)


def _guards(settings: GuardSettings, state: SessionState, turn: Turn,
            items: Sequence[bytes], seen: int, read: Any) -> GuardState:
    """The turn's guards before this call: kept in memory, else folded again, silently."""
    memory = state.guards
    if isinstance(memory, GuardMemory) and memory.turn == turn.turn and memory.items == seen:
        return memory.guards
    before = _read(read, items[:seen])
    found = turn_start(before)
    start = (found + 1) if found is not None else 0
    return fold(GuardState(), observations(before[start:]), settings)[0]


def _tripped(call_id: str, findings: Sequence[Finding]) -> list[Event]:
    return [GuardrailTripped(call_id=call_id, rule=f.rule, level=f.level, tool=f.tool,
                             signature=f.signature, count=f.count,
                             stopped=f.level == "stop") for f in findings]


def _parent_spent(request: CallRequest) -> bool:
    """Whether a child's parent has spent its turn's budget (a fan-out cannot escape it)."""
    if request.parent_turn is None:
        return False
    used, limit = request.parent_turn
    return 0 < limit <= used


def _error(settings: RunawaySettings, code: str) -> tuple[int, str]:
    return (429, code) if settings.on_exhausted == "error" else (200, "")


#: The answer to a resend of a call a guardrail stopped (its findings are not kept).
_STOPPED = runtime_notice("tool-loop guardrail stopped this turn", (
    "This call repeats one a tool-loop guardrail stopped; sessionwarden answered it"
    " without sending it. Summarise what is done and what is left; a new user message"
    " starts a new turn."))


def _stopped(settings: RunawaySettings, text: str) -> LocalReply:
    status, code = _error(settings, "guardrail_stop")
    return LocalReply("guardrail", text, status, code)


def _exhausted(settings: RunawaySettings, limit: int, request: CallRequest) -> LocalReply:
    status, code = _error(settings, "iteration_budget_exhausted")
    hint = ("[budgets] child_max_iterations" if request.parent_session
            else "[budgets] max_iterations")
    return LocalReply("iteration_budget", exhausted_text(limit, hint, request.session_id),
                      status, code)


def _without_tools(request: CallRequest, conversation: Conversation) -> CallRequest:
    """The request with ``tool_choice`` set to none in its format; its tools kept."""
    fields = _decode_fields(conversation.fields_bytes)
    if "tools" not in fields:
        return request
    fields["tool_choice"] = msgspec.Raw(conversation.codec.tool_choice_none)
    body = Conversation(conversation.fields, conversation.items, conversation.codec,
                        _encode(fields))
    return msgspec.structs.replace(request, body=body)

