"""The wire-neutral message model: what context governance reads and rewrites.

Issue 11 ("A neutral message model"): governance works on a representation of a
conversation that names no wire format — roles, text, tool calls and tool results with
their ids, and *opaque* parts it must never touch — with one adapter per wire format in
``sessionwarden.upstream`` (``chat_messages`` for OpenAI chat-completions today; the
Anthropic Messages and Responses adapters later). Nothing here knows a wire shape.

Rules:

The model:

* :class:`Message` — one conversation item: a neutral :data:`Role` and its parts, in
  order. ``wire`` is the adapter's private record of how the item was framed on the wire
  (key order, the original role's spelling, …): governance never reads it, it only
  carries it, so an untouched message goes back out byte for byte.
* Parts: :class:`Text`; :class:`ToolCall` (``id``, ``name``, ``arguments`` as the JSON
  *string* the model wrote); :class:`ToolResult` (the ``call_id`` it answers, its own
  text/opaque parts, the tool's name when the wire says it); :class:`Opaque` (images,
  audio, files, provider reasoning, refusals, unknown fields: the original JSON bytes,
  a ``kind`` label chosen by the adapter and the characters the model reads in it).

Helpers governance needs: :func:`content_hash` (SHA-256 over a canonical msgspec
encoding of the whole message, ``wire`` included, so recognising a resent prefix by
hash also guarantees it can be re-sent byte for byte), :func:`text_chars` (what the
token estimate is based on; it agrees with ``usage.text_chars`` on the wire form, so the
estimate and its calibration do not depend on which of the two was counted — the chat
adapter's docstring lists the two corner cases where they differ),
:func:`tool_pairs` (which result answers which call; orphans on either side),
:func:`tool_calls` / :func:`tool_results`.

Decisions (the issue is silent on them):

* The hash covers the framing too (key order, string vs list content): "any change, a
  different hash", so a client that re-serialises its history differently is seen as
  having edited it (a fresh governed history, never a wrong match). What to hash for
  recognition is the *client's* message as read; a message governance built has
  ``wire == b""`` until an adapter writes it.

* Roles are ``system`` (system *and* developer instructions), ``user``, ``assistant``,
  ``tool`` and ``other`` (an item the adapter could not read: one :class:`Opaque` part,
  passed through as is, e.g. a Responses item type we do not know yet).
* Pairing is by id, in order: a result answers the earliest still-open earlier call with
  its id; a result before any such call, or a second result for an answered call, is an
  orphan result; a call never answered is an orphan call. Legacy calls without an id
  (chat-completions ``function_call``) have ``id == ""`` and pair the same way, in order.
* :class:`ToolCall.arguments` counts towards :func:`text_chars`, its ``name`` does not
  (as in ``usage.text_chars``, whose chars/4 estimate is the one calibrated per session).
"""

import hashlib
from collections.abc import Iterable, Sequence
from typing import Literal, cast

import msgspec

__all__ = [
    "HASH_VERSION",
    "NATIVE_COMPACTION",
    "THINKING",
    "Message",
    "Opaque",
    "Part",
    "ResultPart",
    "Role",
    "Text",
    "ToolCall",
    "ToolPairing",
    "ToolResult",
    "content_hash",
    "history_chars",
    "text_chars",
    "tool_calls",
    "tool_pairs",
    "tool_results",
]

#: The :class:`Opaque` kind of a provider's own compaction (an Anthropic ``compaction``
#: block, a Responses ``compaction`` item): the one kind governance does read. Such a part
#: is never rewritten or dropped, and the daemon compacts a history that holds one only
#: after its last one (the provider's summary stands for everything before it).
NATIVE_COMPACTION = "native_compaction"
#: The :class:`Opaque` kind of a model's signed thinking or reasoning (Anthropic
#: ``thinking`` / ``redacted_thinking`` blocks, Responses ``reasoning`` items): carried
#: byte for byte, its signature or encrypted content with it.
THINKING = "thinking"

#: A message's role, whatever the wire calls it (developer → ``system``, …).
Role = Literal["system", "user", "assistant", "tool", "other"]

#: Prefixed to every hashed encoding: a change of the model's encoding changes every hash
#: instead of silently colliding with hashes recorded before it.
HASH_VERSION = b"sessionwarden.message.v1\x00"


class Text(msgspec.Struct, frozen=True, tag="text"):
    """Text the model reads (or wrote).

    Attributes:
        text: the text.
        wire: the adapter's private framing of this part when it is not the plain form
            (extra keys such as a provider's cache hint); ``b""`` otherwise.
    """

    text: str
    wire: bytes = b""


class Opaque(msgspec.Struct, frozen=True, tag="opaque"):
    """Something governance carries untouched: an image, audio, reasoning, a refusal.

    Attributes:
        kind: the adapter's label (``"image_url"``, ``"field:reasoning_content"``); a
            label only, governance attaches no meaning to it.
        raw: the original JSON value, encoded; it goes back out byte for byte.
        chars: characters of text in it that the model reads (for the estimate).
    """

    kind: str
    raw: bytes
    chars: int = 0


class ToolCall(msgspec.Struct, frozen=True, tag="tool_call"):
    """A tool call the assistant made.

    Attributes:
        id: the call's id (``""`` for a legacy call that has none).
        name: the tool's name.
        arguments: the arguments exactly as the model wrote them (usually JSON text).
        wire: the adapter's private framing when the call is not in its plain form.
    """

    id: str
    name: str
    arguments: str
    wire: bytes = b""


#: What a tool result contains.
ResultPart = Text | Opaque


class ToolResult(msgspec.Struct, frozen=True, tag="tool_result"):
    """The result of a tool call.

    Attributes:
        call_id: the id of the call it answers (``""`` for a legacy result).
        parts: its content, in order.
        name: the tool's name when the wire carries it on the result, else None (the
            name of the call it answers is then found with :func:`tool_pairs`).
        error: the tool reported a failure (Anthropic ``is_error: true``); governance
            keeps it when it replaces the parts, and the runaway guardrails read it.
    """

    call_id: str
    parts: tuple[ResultPart, ...] = ()
    name: str | None = None
    error: bool = False


#: Any part of a message.
Part = Text | ToolCall | ToolResult | Opaque


class Message(msgspec.Struct, frozen=True):
    """One conversation item, wire-neutral.

    Attributes:
        role: the neutral role.
        parts: its content, in order.
        wire: the adapter's private record of the item's framing (``b""`` for a message
            governance built itself, which the adapter renders in its plain form).
    """

    role: Role
    parts: tuple[Part, ...] = ()
    wire: bytes = b""


class ToolPairing(msgspec.Struct, frozen=True):
    """Which tool results answer which calls in a history (see :func:`tool_pairs`).

    Every triple or pair names messages by their index in the history.

    Attributes:
        pairs: ``(call_index, result_index, call_id)`` for each answered call.
        orphan_calls: ``(call_index, call_id)`` for each call nothing answers.
        orphan_results: ``(result_index, call_id)`` for each result that answers no call.
    """

    pairs: tuple[tuple[int, int, str], ...] = ()
    orphan_calls: tuple[tuple[int, str], ...] = ()
    orphan_results: tuple[tuple[int, str], ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every call is answered and every result answers a call."""
        return not self.orphan_calls and not self.orphan_results


_hash_encode = msgspec.json.Encoder().encode


def content_hash(message: Message) -> str:
    """SHA-256 (hex) of the message's canonical encoding, ``wire`` included.

    Stable across runs and processes (msgspec encodes a struct's fields in their declared
    order, bytes as base64); any change to the role, a part or the framing changes it.
    """
    return hashlib.sha256(HASH_VERSION + _hash_encode(message)).hexdigest()


def _part_chars(part: Part) -> int:
    if isinstance(part, Text):
        return len(part.text)
    if isinstance(part, ToolCall):
        return len(part.arguments)
    if isinstance(part, ToolResult):
        return sum(len(inner.text) if isinstance(inner, Text) else inner.chars
                   for inner in part.parts)
    return part.chars


def text_chars(message: Message) -> int:
    """Characters of text the model reads in ``message`` (the base of the token estimate).

    Text, tool-call arguments, tool-result text and the text the adapter found inside
    opaque parts; not tool names, ids, images or framing.
    """
    return sum(_part_chars(part) for part in message.parts)


def history_chars(history: Iterable[Message]) -> int:
    """:func:`text_chars` summed over a history."""
    total = 0
    for message in history:  # _part_chars inlined: a compression counts every part
        for part in message.parts:
            if isinstance(part, Text):
                total += len(part.text)
            elif isinstance(part, ToolResult):
                for inner in part.parts:
                    total += len(inner.text) if isinstance(inner, Text) else inner.chars
            elif isinstance(part, ToolCall):
                total += len(part.arguments)
            else:
                total += part.chars
    return total


_NOT_CALLS = (Text, ToolResult, Opaque)


def tool_calls(message: Message) -> tuple[ToolCall, ...]:
    """The tool calls in ``message``, in order."""
    parts = message.parts
    if len(parts) == 1 and type(parts[0]) in _NOT_CALLS:
        return ()  # the common case, asked of every message of a long history; exact
        # types, as an isinstance that fails costs a metaclass check
    return tuple([part for part in parts if isinstance(part, ToolCall)])


def tool_results(message: Message) -> tuple[ToolResult, ...]:
    """The tool results in ``message``, in order."""
    return tuple([part for part in message.parts if isinstance(part, ToolResult)])


def tool_pairs(history: Sequence[Message]) -> ToolPairing:
    """Match tool results to the calls they answer, by id, in order (module doc)."""
    # call id -> (call number, message index) of its open calls, oldest first
    open_calls: dict[str, list[tuple[int, int]]] = {}
    pairs: list[tuple[int, int, str]] = []
    orphan_results: list[tuple[int, str]] = []
    made = 0
    for index, message in enumerate(history):
        # Results before calls within one message: a message answering its own call is
        # not a shape any wire produces, and reading it this way cannot invent a pair.
        calls: list[str] | None = None
        for part in message.parts:
            # Exact types first: an isinstance that fails costs a metaclass check, and a
            # compression pairs every part of a long history.
            kind = type(part)
            if kind is Text:
                continue
            if kind is ToolResult or (kind is not ToolCall and isinstance(part, ToolResult)):
                call_id = cast(ToolResult, part).call_id
                waiting = open_calls.get(call_id)
                if waiting:
                    pairs.append((waiting.pop(0)[1], index, call_id))
                else:
                    orphan_results.append((index, call_id))
            elif kind is ToolCall or isinstance(part, ToolCall):
                call_id = cast(ToolCall, part).id
                if calls is None:
                    calls = [call_id]
                else:
                    calls.append(call_id)
        if calls is not None:
            for call_id in calls:
                waiting = open_calls.get(call_id)
                if waiting is None:
                    open_calls[call_id] = [(made, index)]
                else:
                    waiting.append((made, index))
                made += 1
    left = sorted((call, call_id) for call_id, waiting in open_calls.items()
                  for call in waiting)
    orphan_calls = tuple([(call[1], call_id) for call, call_id in left])
    return ToolPairing(tuple(pairs), orphan_calls, tuple(orphan_results))
