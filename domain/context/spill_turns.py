"""Spill over a request's new messages: turns found, files asked for, stand-ins put in.

``domain.context.spill`` decides for one assistant turn's results; this module finds the turns
among the messages a call adds (the tool results that follow an assistant message, up
to the next user or assistant message), plans every turn, names the files to write
(:class:`SpillWork`, the stage's ``Need``), and once they are written (or not:
:class:`SpillOutcome`) puts each stand-in in place of its result and says what happened
(:class:`~sessionwarden.events.ToolResultSpilled`).

A result with non-text parts (an
image) counts towards its turn but is never spilled: its parts pass through untouched.

A tool's name comes from the call the result answers, in the same messages; a result
whose call is not among them (it came in an earlier request) is named by the result
itself, or not at all (then the default limit applies).

:func:`mark_evicted` is the other direction: a governed history whose stand-ins name a
spill file since evicted (``domain.context.spill_quota``) gets those stand-ins re-rendered to
say so (``domain.context.spill.evicted_text``). The forwarded bytes change from that item on,
once; the record of the call names the new bytes, so replay stays byte-exact.
"""

import re
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

import msgspec
from sessionwarden.domain.context.compression import tokens_of
from sessionwarden.domain.context.conversation import ItemCodec
from sessionwarden.domain.context.history import GovernedHistory, Item, digest
from sessionwarden.domain.context.messages import Message, Text, ToolCall, ToolResult
from sessionwarden.domain.context.spill import (
    Limits,
    SpillDecision,
    evicted_text,
    plan_turn,
    spill_bytes,
    truncated_text,
)
from sessionwarden.events import ToolResultSpilled

__all__ = ["SpillFile", "SpillOutcome", "SpillPlan", "SpillWork", "apply_spills",
           "mark_evicted", "plan_spills"]

#: The start of a stand-in this daemon wrote: such a result is never spilled again.
_OURS = ("[sessionwarden saved this tool result", )
_OURS_BYTES = _OURS[0].encode()
#: A spill file's name inside an item's bytes.
_NAME = re.compile(rb"[0-9a-f]{64}\.txt")


class SpillFile(msgspec.Struct, frozen=True):
    """One spill file to write: its name (the content's hash) and bytes."""

    name: str
    data: bytes


class SpillWork(msgspec.Struct, frozen=True):
    """The work the context stage needs done: write these spill files."""

    files: tuple[SpillFile, ...]


class SpillOutcome(msgspec.Struct, frozen=True):
    """Which spill files could not be written (name → a short reason)."""

    failed: dict[str, str] = msgspec.field(default_factory=dict)


class _Spill(NamedTuple):
    message: int
    part: int
    tool: str
    decision: SpillDecision


class SpillPlan(NamedTuple):
    """Every spill decided over a call's new messages, and the files they need."""

    spills: tuple[_Spill, ...] = ()
    files: tuple[SpillFile, ...] = ()
    first: int = 0


def _text(result: ToolResult) -> str | None:
    """The result's text, or None when it has parts that are not text."""
    parts = result.parts
    if len(parts) == 1 and type(parts[0]) is Text:
        return parts[0].text  # the common case, without a join
    texts = []
    for part in parts:
        if not isinstance(part, Text):
            return None
        texts.append(part.text)
    return "".join(texts)


def _same(text: str) -> str:
    return text


def plan_spills(messages: Sequence[Message], limits: Limits, spill_dir: str,
                first: int = 0, scrub: Callable[[str], str] = _same) -> SpillPlan:
    """Plan the spills of ``messages`` (a call's new ones; ``first``: the first's index).

    ``scrub`` replaces the secrets of each result spilled (``domain.context.spill.plan_turn``):
    the files, their names and the stand-ins hold the scrubbed text.
    """
    spills: list[_Spill] = []
    files: dict[str, SpillFile] = {}
    names: dict[str, str] | None = None  # built once a turn needs planning
    smallest, budget = limits.smallest, limits.turn_budget_chars
    turn: list[tuple[int, int, ToolResult, str | None]] = []
    total = longest = 0

    def plan(turn: list[tuple[int, int, ToolResult, str | None]]) -> None:
        nonlocal names
        if names is None:
            names = {part.id: part.name for message in messages for part in message.parts
                     if isinstance(part, ToolCall)}
        entries = [(names.get(result.call_id) or result.name or "", text or "",
                    text is None or text.startswith(_OURS)) for _, _, result, text in turn]
        for decision in plan_turn(entries, limits, spill_dir, scrub).spills:
            index, position, _, _ = turn[decision.index]
            tool = entries[decision.index][0]
            spills.append(_Spill(index, position, tool, decision))
            files.setdefault(decision.name,
                             SpillFile(decision.name, spill_bytes(decision.content)))

    for index, message in enumerate(messages):
        if message.role in ("user", "assistant"):
            # A turn ends; one under its budget with no result over the smallest limit
            # has nothing to spill (most turns): it is not planned at all.
            if turn and (total > budget or longest > smallest):
                plan(turn)
            turn, total, longest = [], 0, 0
            continue
        for position, part in enumerate(message.parts):
            if type(part) is ToolResult or isinstance(part, ToolResult):
                text = _text(part)
                size = len(text) if text is not None else 0
                turn.append((index, position, part, text))
                total += size
                longest = max(longest, size)
    if turn and (total > budget or longest > smallest):
        plan(turn)
    return SpillPlan(tuple(spills), tuple(files.values()), first)


def apply_spills(plan: SpillPlan, outcome: SpillOutcome, messages: Sequence[Message],
                 codec: ItemCodec, call_id: str
                 ) -> tuple[list[tuple[Message, bytes | None]], list[ToolResultSpilled]]:
    """Each message with its stand-ins in place, its new bytes (None: unchanged), events."""
    by_message: dict[int, list[_Spill]] = {}
    for spill in plan.spills:
        by_message.setdefault(spill.message, []).append(spill)
    sizes = {f.name: len(f.data) for f in plan.files}
    out: list[tuple[Message, bytes | None]] = []
    events: list[ToolResultSpilled] = []
    for index, message in enumerate(messages):
        spills = by_message.get(index)
        if not spills:
            out.append((message, None))
            continue
        parts = list(message.parts)
        for spill in spills:
            decision = spill.decision
            error = outcome.failed.get(decision.name, "")
            text = (truncated_text(decision.content, decision.preview_chars,
                                   decision.redacted) if error else decision.replacement)
            result = parts[spill.part]
            assert isinstance(result, ToolResult)
            parts[spill.part] = msgspec.structs.replace(result, parts=(Text(text),))
            events.append(ToolResultSpilled(
                call_id=call_id, message=plan.first + index, tool=spill.tool,
                reason="result" if decision.reason == "threshold" else "turn",
                file="" if error else decision.name, chars=decision.chars,
                bytes=sizes[decision.name], preview_chars=decision.preview_chars,
                truncated=bool(error), error=error))
        replaced = msgspec.structs.replace(message, parts=tuple(parts))
        out.append((replaced, codec.write_item(replaced)))
    return out, events


def _names_gone(raw: bytes, gone: Collection[str]) -> bool:
    return any(name.decode() in gone for name in _NAME.findall(raw))


def mark_evicted(history: GovernedHistory, gone: Collection[str], codec: ItemCodec,
                 spill_dir: str) -> tuple[GovernedHistory, int] | None:
    """``history`` with each stand-in whose file is in ``gone`` saying it was evicted.

    Returns the new history and the index of the first item changed (the items before
    it are forwarded as before), or None when no stand-in names an evicted file. Only
    items the daemon replaced are read, and only those holding one of its stand-ins.
    """
    if not gone:
        return None
    items = list(history.items)
    first: int | None = None
    tokens = history.tokens
    for index, item in enumerate(items):
        raw = item.raw
        if raw is None or _OURS_BYTES not in raw or not _names_gone(raw, gone):
            continue
        message = codec.read_item(raw)
        if isinstance(message, str):
            continue  # not ours to read: left as it was forwarded
        parts = list(message.parts)
        for position, part in enumerate(parts):
            if not isinstance(part, ToolResult) or len(part.parts) != 1:
                continue
            text = part.parts[0]
            if isinstance(text, Text) and text.text.startswith(_OURS):
                said = evicted_text(text.text, spill_dir, gone)
                if said != text.text:
                    parts[position] = msgspec.structs.replace(part, parts=(Text(said),))
        if parts == list(message.parts):
            continue
        replaced = msgspec.structs.replace(message, parts=tuple(parts))
        data = codec.write_item(replaced)
        items[index] = Item(digest(data), len(data), tokens_of(replaced), data, -1,
                            origin=item.origin)  # it still stands for the same item
        tokens += items[index].tokens - item.tokens
        first = index if first is None else first
    if first is None:
        return None
    return history._replace(items=tuple(items), tokens=tokens), first
