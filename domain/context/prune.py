"""Compression phase 1: pruning old tool traffic without a model.

Issue 11, "Compression", phase 1, re-imagining Hermes Agent's ``_prune_old_tool_results``
(``../shared/reference/hermes-behaviour.md`` §2.4). Pure: it works on the wire-neutral
model of ``domain.context.messages`` and returns a new history and what it did.

Rules:

The overview: docs/architecture/context.md, 'The stage, per call'.

Only messages *before* ``protect_from`` are rewritten (a compaction passes its head's
end, and prunes only a head over the tail's budget: ``domain.context.compression``), and
only *content* is replaced: the number and order of messages, their roles and ``wire``
framing, tool-call ids and names and every :class:`Opaque` part stay as they are, so tool
pairing is unchanged and the chat adapter keeps each message's layout. The rules, in
this order:

1. **Dedupe** (:data:`DEDUPE`). A tool result whose text (its text parts joined; only
   results made of text alone) is byte-identical to a *later* result anywhere in the
   history, tail included, and longer than the threshold, is replaced by a note naming
   the newest copy's call: ``[same output as the later call <id>]``.
2. **Summaries** (:data:`SUMMARY`). Every other old result longer than the threshold has
   its text replaced by one informative line built from the call's arguments (found with
   :func:`~sessionwarden.domain.context.messages.tool_pairs`) and the result's text, per tool
   kind: ``[read_file] src/app.py → 120 lines, 4,210 chars``, ``[terminal] $ make test →
   exit 2, 37 lines of output``, ``[search_files] 'TODO' in src → 12 lines``, … and a
   generic ``[name] key=value, key=value → N lines, M chars``. Opaque parts of the result
   (an image) are kept in place.
3. **Arguments** (:data:`ARGUMENTS`). An old tool call whose ``arguments`` are longer than
   ``arguments_chars`` is decoded, every string in it longer than ``string_chars`` (plus
   :data:`CUT_SLACK_CHARS`) is cut to its first ``string_chars`` plus ``…[N chars cut]``,
   and the value is re-encoded (compact JSON), so the arguments stay valid JSON (Hermes
   #11762: a sliced JSON string made every later request fail with a 400). Arguments that
   were not valid JSON to begin with are replaced by a valid object,
   ``{"unparsed_arguments": "<head>…[N chars cut]"}``.

Guarantees (property-tested): the tail is untouched; the character count never grows (a
rewrite that would not shorten is not made); the output depends only on the input
(deterministic); pruning a pruned history changes nothing (idempotent): every stand-in is
at most :data:`STAND_IN_MAX_CHARS` long and the threshold is never below it, a cut string
is never cut again (:data:`CUT_SLACK_CHARS`), and re-encoding decoded JSON is stable.

Decisions taken where the issue is silent:

* Dedupe looks at the whole history, tail included, for the newest copy (as Hermes does)
  but rewrites only old copies. Copies are compared on their whole text, not on a short
  fingerprint (Hermes keys on 12 hex digits of an MD5, where a collision would silently
  point a result at the wrong output). Results with opaque parts are never deduped: the
  same text beside two different images is not the same output.
* Images and other opaque parts are never removed (Hermes replaces old screenshots by a
  placeholder): the neutral model promises them byte for byte; dropping them is for a
  later phase that can say so.
* Truncated arguments are re-encoded compact (msgspec, UTF-8 unescaped), so pretty-printed
  arguments over the limit shrink even when no string in them is long.
* One threshold, ``result_chars`` (Hermes: 200 for both dedupe and summaries), raised to
  :data:`STAND_IN_MAX_CHARS` if set lower, so a stand-in is never itself pruned again.
* A summary keeps the framing of the result's first text part (e.g. a cache hint), and
  the opaque parts where they were; it replaces all text parts by one.
* Invalid-JSON arguments are replaced (not left as Hermes does): a provider that checks
  arguments would refuse them anyway, and they are often the largest part of a call.
* Tool kinds are recognised by name (``read_file``/``terminal``/…, with common aliases
  such as ``bash`` or ``grep``); unknown tools get the generic line.
"""

from collections.abc import Sequence
from typing import Any, Literal

import msgspec
from sessionwarden.domain.context.messages import (
    Message,
    Opaque,
    Part,
    ResultPart,
    Text,
    ToolCall,
    ToolPairing,
    ToolResult,
    history_chars,
    tool_pairs,
)
from sessionwarden.domain.context.prune_lines import STAND_IN_MAX_CHARS, clip, dedupe_note, summary

__all__ = [
    "ARGUMENTS",
    "CUT_SLACK_CHARS",
    "DEDUPE",
    "DEFAULT_SETTINGS",
    "STAND_IN_MAX_CHARS",
    "SUMMARY",
    "PruneEvent",
    "PruneResult",
    "PruneRule",
    "PruneSettings",
    "prune",
    "truncate_arguments",
]

#: What was done to a part.
PruneRule = Literal["dedupe", "summary", "arguments"]
DEDUPE: PruneRule = "dedupe"
SUMMARY: PruneRule = "summary"
ARGUMENTS: PruneRule = "arguments"

#: A cut string is ``head + "…[N chars cut]"``: at most this much longer than the head,
#: and only strings longer than ``string_chars`` plus this are cut, so never twice.
CUT_SLACK_CHARS = 32
_UNPARSED_KEY = "unparsed_arguments"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class PruneSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The sizes phase 1 works with (defaults after Hermes, §2.4).

    Attributes:
        result_chars: an old tool result longer than this (in characters of text) is
            deduped or summarised; raised to :data:`STAND_IN_MAX_CHARS` if lower.
        arguments_chars: old tool-call arguments longer than this are truncated (never
            below what a cut could shorten: ``string_chars`` plus a small margin).
        string_chars: the head kept of each long string inside truncated arguments.
    """

    result_chars: int = 200
    arguments_chars: int = 500
    string_chars: int = 200


#: The settings :func:`prune` uses when given none.
DEFAULT_SETTINGS = PruneSettings()


class PruneEvent(msgspec.Struct, frozen=True):
    """One rewrite: which rule, where, and the characters before and after.

    Attributes:
        rule: the rule applied.
        index: the message's index in the history.
        part: the part's position in the message's ``parts``.
        call_id: the id of the call (the result's ``call_id`` or the call's own ``id``).
        chars_before: characters of text in the part before.
        chars_after: and after.
    """

    rule: PruneRule
    index: int
    part: int
    call_id: str
    chars_before: int
    chars_after: int


class PruneResult(msgspec.Struct, frozen=True):
    """The pruned history and what was done to it.

    Attributes:
        messages: the history, same length and order as the input.
        events: the rewrites, in order of message index then part.
    """

    messages: tuple[Message, ...]
    events: tuple[PruneEvent, ...]

    @property
    def chars_after(self) -> int:
        """:func:`~sessionwarden.domain.context.messages.history_chars` of ``messages``."""
        return history_chars(self.messages)

    @property
    def chars_before(self) -> int:
        """And of the input (never less than :attr:`chars_after`).

        Counted on demand from ``messages`` and the events (each records its part's
        characters before and after): a compression never asks, and counting every part
        of a long history would be most of its phase 1.
        """
        return self.chars_after + sum(e.chars_before - e.chars_after for e in self.events)


def _text_of(result: ToolResult) -> str:
    return "".join(part.text for part in result.parts if isinstance(part, Text))


def _result_chars(result: ToolResult) -> int:
    return sum(len(p.text) if isinstance(p, Text) else p.chars for p in result.parts)


def _with_text(result: ToolResult, text: str) -> ToolResult:
    """``result`` with its text parts replaced by one, where the first one was."""
    parts: list[ResultPart] = []
    placed = False
    for part in result.parts:
        if isinstance(part, Opaque):
            parts.append(part)
        elif not placed:
            parts.append(Text(text, part.wire))
            placed = True
    if not placed:
        parts.insert(0, Text(text))
    return ToolResult(result.call_id, tuple(parts), result.name, result.error)


def _calls_by_result(history: Sequence[Message], end: int, pairing: ToolPairing | None
                     ) -> dict[tuple[int, int], ToolCall]:
    """The call each result part before ``end`` answers, keyed by (message, part position).

    Pairing reads a history in order, so the pairs of results before ``end`` are those of
    ``history[:end]``: a compression pruning only its head pairs only the head.
    """
    if pairing is None:
        pairing = tool_pairs(history[:end])
    # The k-th pair from call message i for id c is the k-th call with id c in message i
    # (open calls are taken oldest first); within a result message the results for one
    # id pair first and only then are orphans (calls there come after its results).
    taken: dict[tuple[int, str], int] = {}
    answers: dict[tuple[int, str], list[ToolCall]] = {}
    for call_index, result_index, call_id in pairing.pairs:
        if result_index >= end:
            break  # pairs come in the order of their results
        k = taken.get((call_index, call_id), 0)
        taken[(call_index, call_id)] = k + 1
        same_id = [p for p in history[call_index].parts
                   if isinstance(p, ToolCall) and p.id == call_id]
        answers.setdefault((result_index, call_id), []).append(same_id[k])
    found: dict[tuple[int, int], ToolCall] = {}
    for index in range(end):
        for position, part in enumerate(history[index].parts):
            if isinstance(part, ToolResult):
                queue = answers.get((index, part.call_id))
                if queue:
                    found[(index, position)] = queue.pop(0)
    return found


def _dedupable(part: Part) -> int:
    """The length of a result made of text alone, else -1 (never deduped)."""
    if not isinstance(part, ToolResult) or not part.parts:
        return -1
    size = 0
    for inner in part.parts:
        if not isinstance(inner, Text):
            return -1
        size += len(inner.text)
    return size


def _later_copies(history: Sequence[Message], end: int, threshold: int
                  ) -> dict[tuple[int, int], str]:
    """Old results with a newer copy (rule 1), mapped to the newest copy's call id."""
    # Only a text as long as an old one can be its copy: the others are never joined.
    sizes = {size for index in range(end) for part in history[index].parts
             if (size := _dedupable(part)) > threshold}
    if not sizes:
        return {}
    newest: dict[str, str] = {}
    later_copy: dict[tuple[int, int], str] = {}
    for index in range(len(history) - 1, -1, -1):  # newest first, tail included
        parts = history[index].parts
        for position in range(len(parts) - 1, -1, -1):
            part = parts[position]
            if _dedupable(part) not in sizes:
                continue
            assert isinstance(part, ToolResult)
            text = _text_of(part)
            if text in newest:
                if index < end:
                    later_copy[(index, position)] = newest[text]
            else:
                newest[text] = part.call_id
    return later_copy


def _cut(text: str, keep: int) -> str:
    return f"{text[:keep]}…[{len(text) - keep} chars cut]"


def _shrink(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        return _cut(value, keep) if len(value) > keep + CUT_SLACK_CHARS else value
    if isinstance(value, list):
        return [_shrink(item, keep) for item in value]
    if isinstance(value, dict):
        return {key: _shrink(item, keep) for key, item in value.items()}
    return value


def truncate_arguments(arguments: str, settings: PruneSettings) -> str:
    """``arguments`` cut to size as valid JSON, or unchanged when nothing would shrink.

    Long strings inside valid JSON are cut (module doc, rule 3); arguments that are not
    valid JSON become ``{"unparsed_arguments": "<head>…[N chars cut]"}``.
    """
    limit = max(settings.arguments_chars, settings.string_chars + 2 * CUT_SLACK_CHARS
                + len(_UNPARSED_KEY))
    if len(arguments) <= limit:
        return arguments
    keep = max(0, settings.string_chars)
    try:
        shrunk = _encode(_shrink(_decode(arguments), keep)).decode()
    except (msgspec.DecodeError, msgspec.EncodeError, RecursionError, UnicodeEncodeError):
        # A lone surrogate (which a lenient JSON decoder lets through) cannot be encoded.
        head = _cut(arguments, keep).encode("utf-8", "replace").decode()
        shrunk = _encode({_UNPARSED_KEY: head}).decode()
    return shrunk if len(shrunk) < len(arguments) else arguments


def prune(history: Sequence[Message], protect_from: int,
          settings: PruneSettings = DEFAULT_SETTINGS, *,
          pairing: ToolPairing | None = None) -> PruneResult:
    """Apply phase 1's rules to the messages before ``protect_from`` (module doc).

    ``protect_from`` is the index of the first protected (tail) message; 0 protects all,
    ``len(history)`` or more protects none. ``pairing``, when the caller has it already,
    is ``tool_pairs`` of ``history`` (or of any prefix of it reaching ``protect_from``).
    The cost is that of the messages rewritten plus one look at every tool result.
    """
    threshold = max(settings.result_chars, STAND_IN_MAX_CHARS)
    end = max(0, min(protect_from, len(history)))
    calls = _calls_by_result(history, end, pairing)
    later_copy = _later_copies(history, end, threshold)
    events: list[PruneEvent] = []
    out: list[Message] = list(history)
    for index in range(end):
        message = history[index]
        parts: list[Part] = []
        for position, part in enumerate(message.parts):
            new = _prune_part(index, position, part, calls, later_copy, threshold, settings)
            if new is not part:
                rule: PruneRule = (ARGUMENTS if isinstance(part, ToolCall) else
                                   DEDUPE if (index, position) in later_copy else SUMMARY)
                call_id = part.id if isinstance(part, ToolCall) else _call_id(part)
                events.append(PruneEvent(rule, index, position, call_id,
                                         _part_chars(part), _part_chars(new)))
            parts.append(new)
        if any(new is not old for new, old in zip(parts, message.parts, strict=True)):
            out[index] = Message(message.role, tuple(parts), message.wire)
    return PruneResult(tuple(out), tuple(events))


def _call_id(part: Part) -> str:
    return part.call_id if isinstance(part, ToolResult) else ""


def _part_chars(part: Part) -> int:
    if isinstance(part, ToolCall):
        return len(part.arguments)
    if isinstance(part, ToolResult):
        return _result_chars(part)
    return len(part.text) if isinstance(part, Text) else part.chars


def _prune_part(index: int, position: int, part: Part,
                calls: dict[tuple[int, int], ToolCall], later_copy: dict[tuple[int, int], str],
                threshold: int, settings: PruneSettings) -> Part:
    """The part as phase 1 leaves it (the same object when unchanged)."""
    if isinstance(part, ToolCall):
        arguments = truncate_arguments(part.arguments, settings)
        if arguments == part.arguments:
            return part
        return ToolCall(part.id, part.name, arguments, part.wire)
    if not isinstance(part, ToolResult):
        return part
    text = _text_of(part)
    if len(text) <= threshold:
        return part
    if (index, position) in later_copy:
        return _with_text(part, dedupe_note(later_copy[(index, position)]))
    call = calls.get((index, position))
    name = part.name if part.name is not None else call.name if call is not None else ""
    line = summary(name, call.arguments if call is not None else "", text)
    return _with_text(part, clip(line))
