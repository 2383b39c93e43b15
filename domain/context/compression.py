"""One compression of a governed history: the four phases put together.

:func:`prepare` decodes the forwarded items and readies the phases; :func:`finish`
assembles their result into a new governed history.

Rules:

In detail, :func:`prepare` decodes the forwarded items (a compression is rare: it may cost
O(history)), chooses the cut (phase 2, ``domain.context.boundaries``) and, for a head over
the tail's budget only, prunes the head (phase 1, ``domain.context.prune``); the middle is
then summarised (phase 3: the builtin ``domain.context.summary``, or a model's text) and
:func:`finish` assembles the result (phase 4: the head, one system note, the summary, the
tail, repaired) into a new :class:`~sessionwarden.domain.context.history.GovernedHistory`.
Items the phases left untouched keep their bytes, and every other one becomes a stand-in.

The prefix before the cut is byte-stable (issue 23): the compacted history starts with
the head's items as forwarded, in order, so the prompt cache still hits on them at the
call that compacts. Phase 1 could only rewrite that prefix (the middle is summarised
unpruned, the tail is protected), so it runs only on a head estimated over the tail's
budget (a first turn that read large files), whose window room is worth more than one
cache hit; the prefix then holds up to the first item it prunes.

The newest user request and the newest assistant text are always kept verbatim (Hermes
#10896, #29824). When keeping them in the tail would keep every turn after them verbatim
too (an agent's long run after one ask, the common case), they are kept verbatim right
after the head instead (before the note) — before what the summary covers, which came
after them — and the turns after them are summarised like the rest (not when the
assistant text also calls tools: it cannot leave its results).

Decisions: the summary is built from the middle as it was (not pruned: phase 1's
one-line stand-ins would only lose what the summary wants), less an earlier note (the new
one replaces it); the head is protected on the first compression only (``protect_first_n``;
after it the old head is part of what the summary covers: Hermes #11996); the tail's
budget is ``trigger × target_ratio``; the summary is bounded to 5 % of the trigger in
characters (at least what the template needs, at most 48,000).
"""

from collections.abc import Sequence
from typing import NamedTuple

import msgspec
from sessionwarden.config import CompressionConfig
from sessionwarden.domain.context.boundaries import (
    BoundarySettings,
    Cut,
    assemble,
    bridge,
    choose_cut,
    is_actionable_request,
    is_assistant_text,
)
from sessionwarden.domain.context.conversation import ItemCodec
from sessionwarden.domain.context.history import GovernedHistory, Item, digest
from sessionwarden.domain.context.messages import (
    Message,
    Opaque,
    Text,
    ToolCall,
    ToolPairing,
    ToolResult,
    tool_calls,
    tool_pairs,
)
from sessionwarden.domain.context.prune import prune
from sessionwarden.domain.context.summary import (
    SUMMARY_START,
    Summary,
    builtin_summary,
    covered_turns,
    render,
    with_end,
)
from sessionwarden.domain.context.trigger import estimate_tokens
from sessionwarden.events import ContextCompressed

__all__ = ["NOTE", "Compaction", "Prepared", "builtin", "decode_summary", "encode_summary",
           "finish", "is_summary", "prepare", "summary_budget", "summary_state", "tokens_of",
           "turns_since_request"]

#: The system note that tells the model earlier turns were summarised.
NOTE = ("[sessionwarden compressed the earlier turns of this conversation into the summary "
        "that follows; the most recent messages are verbatim]")
#: A compression must leave at most this share of the history's tokens.
MIN_SAVING = 0.9
#: A per-message overhead in tokens (role, framing).
MESSAGE_TOKENS = 4


def tokens_of(message: Message) -> int:
    """Our estimate of a message's tokens: prose and JSON counted apart."""
    prose = json = 0
    for part in message.parts:
        if isinstance(part, Text):
            prose += len(part.text)
        elif isinstance(part, ToolCall):
            json += len(part.arguments)
        elif isinstance(part, ToolResult):
            for inner in part.parts:
                if isinstance(inner, Text):
                    if inner.text[:1] in ("{", "["):
                        json += len(inner.text)
                    else:
                        prose += len(inner.text)
                else:
                    prose += inner.chars
        elif isinstance(part, Opaque):
            prose += part.chars
    return estimate_tokens(prose, json) + MESSAGE_TOKENS


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary an earlier compression wrote."""
    first = message.parts[0] if message.parts else None
    return isinstance(first, Text) and first.text.startswith(SUMMARY_START)


def turns_since_request(messages: Sequence[Message]) -> int:
    """The agent's tool-calling turns since the newest request, summaries included.

    Walking back: an assistant message calling tools is one turn; an earlier summary adds
    the turns its end line says it covers; a user request ends the walk. The summary made
    of ``messages`` says this much in its end line, so a model (and ``sim``'s agents,
    which count their steps from the newest request) knows how far the task has gone.
    """
    turns = 0
    for message in reversed(messages):
        if is_summary(message):
            first = message.parts[0]
            turns += covered_turns(first.text) or 0 if isinstance(first, Text) else 0
        elif is_actionable_request(message, is_summary):
            break
        if message.role == "assistant" and tool_calls(message):
            turns += 1
    return turns


def _anchor_indices(messages: Sequence[Message]) -> list[int]:
    """Where the newest request and the newest assistant text are, in order."""
    request = next((i for i in range(len(messages) - 1, -1, -1)
                    if is_actionable_request(messages[i], is_summary)), None)
    text = next((i for i in range(len(messages) - 1, -1, -1)
                 if is_assistant_text(messages[i], is_summary)), None)
    return sorted(i for i in (request, text) if i is not None)


def _pinnable(messages: Sequence[Message], cut: Cut, pairing: ToolPairing
              ) -> list[Message] | None:
    """The anchors to pin after ``cut``'s head, in order; None if that cut will not do.

    It will not when an anchor in the middle is an assistant text that also calls tools
    (it cannot leave its results), when the first pinned message would touch a head
    message of its role, or when the first tail message is an anchor (the summary may be
    merged into it, and anchors reach the model byte for byte).
    """
    if cut.empty:
        return None
    anchors = _anchor_indices(messages)
    if bridge(messages, cut.tail_start, pairing) in anchors:  # it may get the summary
        return None
    middle = [i for i in anchors if cut.head_end <= i < cut.tail_start]
    if any(tool_calls(messages[i]) for i in middle):
        return None
    pinned = [messages[i] for i in middle]
    head_role = next((m.role for m in reversed(messages[:cut.head_end])  # as assemble
                      if m.role != "system"), None)
    if pinned and pinned[0].role == head_role:
        return None
    return pinned


def encode_summary(summary: object) -> bytes:
    """A history's summary state as stored: the builtin's structure, or a model's text."""
    return msgspec.json.encode(summary if isinstance(summary, Summary | str) else None)


def decode_summary(data: bytes) -> Summary | str | None:
    """What :func:`encode_summary` stored (None: unreadable, as no summary)."""
    try:
        return msgspec.json.decode(data, type=Summary | str | None)
    except msgspec.ValidationError:
        return None


def summary_state(event: ContextCompressed, history: GovernedHistory) -> tuple[str, bytes]:
    """The content ``event.state`` names: ``history``'s summary, encoded."""
    return event.state[0], encode_summary(history.summary)


def summary_budget(threshold: int) -> int:
    """The longest summary, in characters, for a trigger of ``threshold`` tokens."""
    return max(2_000, min(threshold * 4 // 20, 48_000))


class Prepared(NamedTuple):
    """A compression decided and cut, waiting for its summary."""

    history: GovernedHistory
    messages: list[Message]
    head: list[Message]
    middle: list[Message]
    tail: list[Message]
    pruned: int
    pinned: int = 0


class Compaction(NamedTuple):
    """A finished compression: the new history and what the event records."""

    history: GovernedHistory
    summariser: str
    model: str
    messages_before: int
    summarised: int
    pruned: int
    summary_raw: bytes


def prepare(history: GovernedHistory, client_items: Sequence[bytes], codec: ItemCodec,
            compression: CompressionConfig, threshold: int,
            known: Sequence[Message] = ()) -> Prepared | None:
    """Cut and prune ``history``; None when there is nothing to summarise.

    ``known`` are the last items already read (the call's new ones, as governed): only
    the others are read again.
    """
    known = known[-len(history.items):] if history.items else ()
    messages: list[Message] = []
    raws = history.forwarded(client_items)
    for raw in raws[:len(raws) - len(known)]:
        read = codec.read_item(raw)
        if isinstance(read, str):  # every item was read once already; never expected
            return None
        messages.append(read)
    messages.extend(known)
    tokens = {id(m): item.tokens for m, item in zip(messages, history.items, strict=True)}
    settings = BoundarySettings(
        protect_first_n=compression.protect_first_n if not history.compressed else 0,
        tail_budget_tokens=max(1, int(threshold * compression.target_ratio)))

    def estimate(message: Message) -> int:
        return tokens.get(id(message)) or tokens_of(message)

    pairing = tool_pairs(messages)  # one pairing for both cuts and phase 1
    cut = choose_cut(messages, settings, estimate, is_summary=is_summary, pairing=pairing)
    pinned: list[Message] = []
    ceiling = settings.tail_budget_tokens * settings.ceiling_factor
    if sum(estimate(m) for m in messages[cut.tail_start:]) > ceiling:
        # The newest request (and the newest assistant text) anchor the tail: an agent's
        # hundred tool turns after one ask would all stay verbatim. Cut on the budget
        # alone, and keep the anchors that land in the middle verbatim just after the
        # head instead (they came before what the summary covers).
        alone = choose_cut(messages, settings, estimate, is_summary=lambda m: True,
                           pairing=pairing)
        pinned_here = _pinnable(messages, alone, pairing)
        if pinned_here is not None:
            cut, pinned = alone, pinned_here
    if cut.empty:
        return None
    # Phase 1 only on a head over the tail's budget (module doc), never from an anchor
    # on: the newest request and assistant text reach the model byte for byte.
    head = messages[:cut.head_end]
    events = 0
    if sum(estimate(m) for m in head) > settings.tail_budget_tokens:
        anchors = [i for i in _anchor_indices(messages) if i < cut.head_end]
        pruned = prune(messages, min([cut.head_end, *anchors]), pairing=pairing)
        head, events = list(pruned.messages[:cut.head_end]), len(pruned.events)
    # The summary reads the pinned anchors too (kept verbatim as well): without the
    # answer and the request, an older ask would read as pending and the task be lost.
    # An earlier compression's note is not part of it: the new one replaces it.
    note = Message("system", (Text(NOTE),))
    middle = [m for m in messages[cut.head_end:cut.tail_start]
              if (m.role, m.parts) != (note.role, note.parts)]
    return Prepared(history, messages, [*head, *pinned], middle,
                    messages[cut.tail_start:], events, len(pinned))


def finish(prepared: Prepared, text: str, codec: ItemCodec, *, summariser: str,
           model: str = "", summary: object = None) -> Compaction | None:
    """Assemble the compressed history around the summary ``text`` (phase 4).

    None when the result would not be at least 10 % smaller: such a compression would
    bust the provider's prompt cache for nothing, and count against the session's guard.
    """
    history = prepared.history
    # The steps since the newest request that the summary covers: none when that request
    # is in the tail (what the summary covers came before it).
    later = any(is_actionable_request(m, is_summary) for m in prepared.tail)
    text = with_end(text, 0 if later else turns_since_request(prepared.middle))
    assembled = assemble(prepared.head, text, prepared.tail, NOTE)
    originals = {id(m): item for m, item in zip(prepared.messages, history.items, strict=True)}
    items: list[Item] = []
    summary_raw = b""
    for message in assembled:
        kept = originals.get(id(message))
        if kept is not None:
            items.append(kept)
            continue
        raw = codec.write_item(message)
        if is_summary(message):
            summary_raw = raw
        items.append(Item(digest(raw), len(raw), tokens_of(message), raw, -1))
    compressed = GovernedHistory(
        client=history.client, items=tuple(items), call_id=history.call_id,
        tokens=sum(item.tokens for item in items), compressed=history.compressed + 1,
        summary=summary if summary is not None else text)
    if compressed.tokens > history.tokens * MIN_SAVING:
        return None
    return Compaction(compressed, summariser, model, len(history.items),
                      len(prepared.middle) - prepared.pinned, prepared.pruned, summary_raw)


def builtin(prepared: Prepared, codec: ItemCodec, threshold: int,
            summariser: str = "builtin") -> Compaction | None:
    """Finish ``prepared`` with the builtin summary of its middle (phase 3, builtin).

    The previous summary is updated when it was the builtin's own structure; a model's
    text is kept as it is, in the head or the middle, and summarised like any message.
    """
    previous = prepared.history.summary
    summary = builtin_summary(prepared.middle,
                              previous if isinstance(previous, Summary) else None,
                              summary_budget(threshold))
    return finish(prepared, render(summary), codec, summariser=summariser, summary=summary)
