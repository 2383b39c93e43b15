"""Compression phases 2 and 4: where to cut a history, and how to put the result together.

Issue 11 ("Compression", phases 2 and 4), after hermes-behaviour.md §2.5 and §2.8 — the
behaviour and the bugs its users hit, re-thought over the wire-neutral model of
``domain.context.messages``. Pure: the token estimate comes in as a function.

Rules:

The overview: docs/architecture/context.md, 'The stage, per call'.

**Where to cut** (:func:`choose_cut`) splits a history into a protected *head*, a
*middle* (what the summary replaces) and a *tail* kept verbatim:

* head: the leading system message(s) plus the next ``protect_first_n`` messages, then
  moved forward past any tool result answering a call in it (the head never ends between
  a call and its results). Messages, not "exchanges", as Hermes's ``protect_first_n``.
  A history that carries a provider's own compaction (an :class:`Opaque` part of kind
  ``NATIVE_COMPACTION``) keeps everything up to its last one in the head: the provider's
  summary stands for what is before it, and its block must reach it byte for byte;
* tail: walking back from the end, messages are added while they fit under the soft
  ceiling ``ceiling_factor × tail_budget_tokens``, and always at least
  ``min_tail_messages`` of them. When everything fits under the ceiling, the walk is done
  again with the plain budget so a useful middle exists (Hermes #40803), and when even
  that takes everything, the tail is the minimum (a compaction was asked for);
* the tail's start is moved *back* (the tail only grows) so that: no tool call is split
  from its results (to the assistant message that made the calls); the newest
  actionable user request is in it (Hermes #10896: a token-budget cut summarised the
  user's newest request away — its size never matters); the newest assistant text is in
  it (Hermes #29824); and the first tail message (:func:`bridge`: system messages and
  what repair drops aside) is neither of those two (Hermes's bridge rule), because
  :func:`assemble` may have to merge the summary into it, and those two must reach the
  model byte for byte;
* either anchor lying in the head is already kept verbatim; when the middle ends up
  empty, :attr:`Cut.empty` says there is nothing to compress. Consequence, by design:
  the whole current turn (from the newest request on) is never summarised, so a single
  turn too large for the window must be brought down by phase 1 and the spill, and the
  wiring must handle an empty cut (forward as is, or refuse with a clear error).

*Actionable user request*: a ``user`` message the summariser did not write
(``is_summary``) holding something besides tool results and blank text — text, an
image, a file. Tool results carried in a user message (the Anthropic shape) and blank
echoes are not requests. *Assistant text*: an ``assistant`` message (not a summary)
with a non-blank :class:`Text` part; tool calls alone are not text.

**Assembly** (:func:`assemble`): the head as it is, the note, the summary, the tail.

* the head first, the same messages in the same order: what was forwarded before the
  cut stays a byte prefix, and the provider's prompt cache keeps hitting on it (issue 23);
* the note: one ``system`` message after the head (none if the head holds it), rather
  than text added to the client's system prompt, whose bytes stay the client's;
* the summary: one message whose role touches no same-role neighbour. System messages,
  the note among them, do not separate turns (a wire may fold them away). ``user`` when
  no conversation message comes before it (Anthropic wants the user's turn first, Hermes
  #52160) or no user message survives (Hermes #58753), and after an assistant or tool
  message; ``assistant`` after a user message. When that is the next tail message's
  role, the other role if it touches neither neighbour and the role was not forced,
  else it is merged into that message (:func:`bridge`) as a leading :class:`Text` part
  ``summary + "\\n\\n"`` (a string content renders as one text), the rest unchanged —
  never into the newest request or assistant text (:func:`choose_cut`);
* head and tail are each :func:`repair`-ed (only the client's own orphans: a cut never
  splits a pair), and the whole again as a guard.

**Repair** (:func:`repair`): a tool result that answers no call is *dropped*: its call
is not in the history (the client's own orphan, since a cut never splits a pair), no
provider accepts it, and turning it into user text would create adjacent user turns.
A tool call without a result gets a stub result ``[result not kept]`` (a ``tool``
message) after its assistant message and the results that follow it, so no provider
ever sees an orphan. Hermes instead stripped the calls (§2.8 8b), which rewrites the
assistant's message.

**What the provider reads** (:func:`unread_tokens`): a provider drops everything before
its own compaction (Anthropic ignores the blocks before a ``compaction`` block, a
Responses ``compaction`` item replaces the items before it), so those tokens never count
against the window: the trigger, the fit and the estimate a call records leave them out.

Left to the wiring: ``tail_budget_tokens`` is ``int(trigger × [compression].target_ratio)``;
pass ``protect_first_n = 0`` once the session has been compressed (Hermes #11996: early
turns made immortal); ``is_summary`` recognises the summariser's own messages.
"""

from collections.abc import Callable, Sequence
from itertools import accumulate

import msgspec
from sessionwarden.domain.context.messages import (
    NATIVE_COMPACTION,
    Message,
    Opaque,
    Part,
    Role,
    Text,
    ToolPairing,
    ToolResult,
    tool_calls,
    tool_pairs,
)

__all__ = [
    "STUB_RESULT",
    "BoundarySettings",
    "Cut",
    "Estimate",
    "assemble",
    "bridge",
    "choose_cut",
    "is_actionable_request",
    "is_assistant_text",
    "natively_compacted",
    "repair",
    "unread_tokens",
]

#: The text of the stub result given to a tool call whose result is gone.
STUB_RESULT = "[result not kept]"

#: Estimates a message's tokens (e.g. its ``text_chars`` / 4, calibrated).
Estimate = Callable[[Message], int]


class BoundarySettings(msgspec.Struct, frozen=True):
    """How much of a history is protected (defaults after Hermes's, §2.1 and §2.5).

    Attributes:
        protect_first_n: messages after the leading system message(s) kept in the head.
        tail_budget_tokens: the tail's token budget.
        min_tail_messages: the tail holds at least this many messages (or all there are).
        ceiling_factor: the soft ceiling is this many times the budget.
    """

    protect_first_n: int = 3
    tail_budget_tokens: int = 20_000
    min_tail_messages: int = 3
    ceiling_factor: float = 1.5


class Cut(msgspec.Struct, frozen=True):
    """Where a history is cut.

    ``history[:head_end]`` is the head, ``history[head_end:tail_start]`` the middle (what
    the summary replaces), ``history[tail_start:]`` the tail.
    """

    head_end: int
    tail_start: int

    @property
    def empty(self) -> bool:
        """Whether the middle is empty: nothing to compress."""
        return self.tail_start <= self.head_end


def _never(_: Message) -> bool:
    return False


def natively_compacted(message: Message) -> bool:
    """Whether ``message`` holds a provider's own compaction."""
    return any(isinstance(part, Opaque) and part.kind == NATIVE_COMPACTION
               for part in message.parts)


#: Every wire form of a provider's compaction names its type so; an item without these
#: bytes is never read, which keeps the scan a byte search on most histories.
_COMPACTION_MARK = b"compaction"


def unread_tokens(items: Sequence[bytes], tokens: Sequence[int],
                  read: Callable[[bytes], object]) -> int:
    """The tokens of the items before the newest one holding a provider's compaction.

    ``items`` are the forwarded items' bytes and ``tokens`` their estimates, in order;
    ``read`` reads one item (a :class:`Message`, or anything else for an item that is
    not one). 0 when no item holds a compaction (module doc: what the provider reads).
    """
    for index in range(len(items) - 1, -1, -1):
        raw = items[index]
        if _COMPACTION_MARK in raw:
            message = read(raw)
            if isinstance(message, Message) and natively_compacted(message):
                return sum(tokens[:index])
    return 0


def _blank(part: Part) -> bool:
    return isinstance(part, Text) and not part.text.strip()


def is_actionable_request(message: Message,
                          is_summary: Callable[[Message], bool] = _never) -> bool:
    """Whether ``message`` is a user request (module doc: not tool results, not blank)."""
    return (message.role == "user" and not is_summary(message)
            and any(not isinstance(part, ToolResult) and not _blank(part)
                    for part in message.parts))


def is_assistant_text(message: Message,
                      is_summary: Callable[[Message], bool] = _never) -> bool:
    """Whether ``message`` is assistant text: a non-blank :class:`Text` part."""
    return (message.role == "assistant" and not is_summary(message)
            and any(isinstance(part, Text) and part.text.strip() for part in message.parts))


def _crossed(size: int, pairing: ToolPairing) -> list[bool]:
    """``crossed[b]``: whether a cut before index ``b`` splits a call from a result."""
    depth = [0] * (size + 1)
    for call_index, result_index, _ in pairing.pairs:
        depth[call_index + 1] += 1
        depth[result_index + 1] -= 1
    return [running > 0 for running in accumulate(depth)]


def _newest(history: Sequence[Message], test: Callable[[Message], bool]) -> int | None:
    return next((index for index in range(len(history) - 1, -1, -1)
                 if test(history[index])), None)


def _tail_walk(history: Sequence[Message], head_end: int, ceiling: float, minimum: int,
               estimate: Estimate) -> int:
    start, tokens = len(history), 0
    while start > head_end:
        cost = estimate(history[start - 1])
        if len(history) - start >= minimum and tokens + cost > ceiling:
            break
        tokens += cost
        start -= 1
    return start


def choose_cut(history: Sequence[Message], settings: BoundarySettings, estimate: Estimate,
               *, is_summary: Callable[[Message], bool] = _never,
               pairing: ToolPairing | None = None) -> Cut:
    """Where to cut ``history`` for compression (module doc for the rules).

    ``estimate`` gives a message's tokens; ``is_summary`` recognises a summary message
    written by an earlier compression (never an actionable request nor assistant text).
    ``pairing`` is ``tool_pairs(history)`` when the caller has it already.
    """
    n = len(history)
    if pairing is None:
        pairing = tool_pairs(history)
    crossed = _crossed(n, pairing)
    head_end = 0
    while head_end < n and history[head_end].role == "system":
        head_end += 1
    head_end = min(n, head_end + max(0, settings.protect_first_n))
    native = _newest(history, natively_compacted)
    if native is not None:
        head_end = max(head_end, native + 1)
    while crossed[head_end]:
        head_end += 1

    def back(boundary: int) -> int:
        # head_end is clean, so the walk never passes it.
        while crossed[boundary]:
            boundary -= 1
        return boundary

    minimum = min(max(0, settings.min_tail_messages), n - head_end)
    budget = max(0, settings.tail_budget_tokens)
    start = _tail_walk(history, head_end, budget * settings.ceiling_factor, minimum, estimate)
    if start <= head_end:  # everything fitted: cut on the plain budget (Hermes #40803)
        start = _tail_walk(history, head_end, budget, minimum, estimate)
    if start <= head_end:  # still everything: keep the minimum (a compaction asked for)
        start = n - minimum
    start = back(max(start, head_end))

    request = _newest(history, lambda m: is_actionable_request(m, is_summary))
    text = _newest(history, lambda m: is_assistant_text(m, is_summary))
    anchors = {index for index in (request, text) if index is not None and index >= head_end}
    if anchors:
        start = back(min(start, *anchors))
    # Bridge: the first tail message may receive the summary; never one of the anchors.
    while start > head_end and bridge(history, start, pairing) in anchors:
        start = back(start - 1)
    return Cut(head_end, start)


def bridge(history: Sequence[Message], tail_start: int, pairing: ToolPairing) -> int:
    """Where :func:`assemble` may merge the summary (``pairing``: of ``history``).

    The first tail message not a system one nor made only of orphan results (dropped).
    """
    orphans: dict[int, int] = {}
    for index, _ in pairing.orphan_results:
        orphans[index] = orphans.get(index, 0) + 1
    index = tail_start
    while index < len(history) and (history[index].role == "system"
                                    or orphans.get(index, -1) == len(history[index].parts)):
        index += 1
    return index


def _stub(call_id: str, name: str) -> Message:
    return Message("tool", (ToolResult(call_id, (Text(STUB_RESULT),), name),))


def repair(messages: Sequence[Message]) -> list[Message]:
    """Drop tool results that answer no call; give unanswered calls a stub result.

    Messages without an orphan are returned unchanged (the same objects); a message that
    loses its results and is left with nothing is dropped. Module doc for why.
    """
    pairing = tool_pairs(messages)
    if pairing.complete:
        return list(messages)
    dropped: dict[int, int] = {}  # message index -> orphan results to drop from it
    for index, _ in pairing.orphan_results:
        dropped[index] = dropped.get(index, 0) + 1
    stubs: dict[int, list[Message]] = {}
    for index, call_id in pairing.orphan_calls:
        # The nth orphan with this id in this message is its nth call with this id left
        # unanswered; pairing is in order, so the first unanswered calls are the orphans.
        name = next(call.name for call in tool_calls(messages[index]) if call.id == call_id)
        stubs.setdefault(index, []).append(_stub(call_id, name))
    orphan_ids = {(index, call_id) for index, call_id in pairing.orphan_results}
    out: list[Message] = []
    pending: list[Message] = []
    for index, message in enumerate(messages):
        if pending and message.role != "tool":
            out.extend(pending)
            pending = []
        kept = (_without_orphans(message, dropped[index], orphan_ids, index)
                if index in dropped else message)
        if kept is not None:
            out.append(kept)
        pending.extend(stubs.get(index, ()))
    out.extend(pending)
    return out


def _without_orphans(message: Message, count: int, orphan_ids: set[tuple[int, str]],
                     index: int) -> Message | None:
    # tool_pairs reads a message's results in order; its orphans are the results whose
    # ids it could not match. Dropping by id, earliest first, drops exactly those when a
    # message answers a call id once (every wire shape); a message repeating an id is
    # rare enough that dropping its earliest results is an acceptable reading.
    kept: list[Part] = []
    for part in message.parts:
        if (count and isinstance(part, ToolResult)
                and (index, part.call_id) in orphan_ids):
            count -= 1
            continue
        kept.append(part)
    if not kept:
        return None
    return msgspec.structs.replace(message, parts=tuple(kept))


def assemble(head: Sequence[Message], summary_text: str, tail: Sequence[Message],
             note: str) -> list[Message]:
    """The head as it is, one compression note, the summary, the tail (module doc).

    ``head`` and ``tail`` are a :class:`Cut`'s; ``note`` the system note telling the model
    that earlier turns were summarised. A head without orphans comes out first, the same
    objects in the same order. System messages do not separate turns.
    """
    body = repair(head)
    rest = repair(tail)
    previous = next((message.role for message in reversed(body)
                     if message.role != "system"), None)
    target = next((i for i, message in enumerate(rest) if message.role != "system"), None)
    following = rest[target].role if target is not None else None
    forced = previous is None or not any(
        message.role == "user" for message in (*body, *rest))
    role: Role | None = "assistant" if previous == "user" and not forced else "user"
    if role == following:
        other: Role = "assistant" if role == "user" else "user"
        role = other if not forced and other != previous else None
    summary = [Message(role, (Text(summary_text),))] if role is not None else []
    if target is not None and role is None:  # merged: role is following, user or assistant
        rest[target] = msgspec.structs.replace(
            rest[target], parts=(Text(summary_text + "\n\n"), *rest[target].parts))
    noted = Message("system", (Text(note),))
    added = [] if any(m.role == "system" and m.parts == noted.parts for m in body) else [noted]
    return repair([*body, *added, *summary, *rest])
