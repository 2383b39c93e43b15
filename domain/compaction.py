"""One compression of a governed history: the four phases put together.

:func:`prepare` decodes the forwarded items (a compression is rare: it may cost
O(history)), chooses the cut (phase 2, ``domain.boundaries``) and prunes what comes
before the tail (phase 1, ``domain.prune``); the middle is then summarised (phase 3: the
builtin ``domain.summary``, or a model's text) and :func:`finish` assembles the result
(phase 4: the head, one system note, the summary, the tail, repaired) into a new
:class:`~sessionwarden.domain.history.GovernedHistory`. Items the phases left untouched
keep their place and their bytes — the head and the tail are forwarded exactly as
before — and every other one becomes a stand-in.

Decisions: the summary is built from the middle as it was (not pruned: phase 1's
one-line stand-ins would only lose what the summary wants); the head is protected on the
first compression only (``protect_first_n``; after it the old head is part of what the
summary covers: Hermes #11996); the tail's budget is ``trigger × target_ratio``; the
summary is bounded to 5 % of the trigger in characters (at least what the template needs,
at most 48,000).
"""

from collections.abc import Sequence
from typing import NamedTuple

from sessionwarden.config import CompressionConfig
from sessionwarden.domain.boundaries import BoundarySettings, assemble, choose_cut
from sessionwarden.domain.compression import estimate_tokens
from sessionwarden.domain.conversation import ItemCodec
from sessionwarden.domain.history import GovernedHistory, Item, digest
from sessionwarden.domain.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.prune import prune
from sessionwarden.domain.summary import Summary, builtin_summary, render

__all__ = ["NOTE", "Compaction", "Prepared", "compress_history", "finish", "is_summary",
           "prepare", "summary_budget", "tokens_of"]

#: The system note that tells the model earlier turns were summarised.
NOTE = ("[sessionwarden compressed the earlier turns of this conversation into the summary "
        "that follows; the most recent messages are verbatim]")
#: A per-message overhead in tokens (role, framing).
MESSAGE_TOKENS = 4
_SUMMARY_START = "[Context summary"


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
    return isinstance(first, Text) and first.text.startswith(_SUMMARY_START)


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
            compression: CompressionConfig, threshold: int) -> Prepared | None:
    """Cut and prune ``history``; None when there is nothing to summarise."""
    messages: list[Message] = []
    for raw in history.forwarded(client_items):
        read = codec.read_item(raw)
        if isinstance(read, str):  # every item was read once already; never expected
            return None
        messages.append(read)
    tokens = {id(m): item.tokens for m, item in zip(messages, history.items, strict=True)}
    settings = BoundarySettings(
        protect_first_n=compression.protect_first_n if not history.compressed else 0,
        tail_budget_tokens=max(1, int(threshold * compression.target_ratio)))
    cut = choose_cut(messages, settings, lambda m: tokens.get(id(m)) or tokens_of(m),
                     is_summary=is_summary)
    if cut.empty:
        return None
    pruned = prune(messages, cut.head_end)
    head = list(pruned.messages[:cut.head_end])
    return Prepared(history, messages, head, messages[cut.head_end:cut.tail_start],
                    messages[cut.tail_start:], len(pruned.events))


def finish(prepared: Prepared, text: str, codec: ItemCodec, *, summariser: str,
           model: str = "", summary: object = None) -> Compaction:
    """Assemble the compressed history around the summary ``text`` (phase 4)."""
    history = prepared.history
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
    return Compaction(compressed, summariser, model, len(history.items),
                      len(prepared.middle), prepared.pruned, summary_raw)


def compress_history(history: GovernedHistory, client_items: Sequence[bytes],
                     codec: ItemCodec, compression: CompressionConfig, threshold: int,
                     focus: str = "") -> Compaction | None:
    """Compress with the builtin summariser; None when there is nothing to summarise.

    ``focus`` is recorded by the caller; the builtin summariser has no use for it.
    """
    del focus
    prepared = prepare(history, client_items, codec, compression, threshold)
    if prepared is None:
        return None
    previous = history.summary if isinstance(history.summary, Summary) else None
    summary = builtin_summary(prepared.middle, previous, summary_budget(threshold))
    return finish(prepared, render(summary), codec, summariser="builtin", summary=summary)
