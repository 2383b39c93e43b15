"""Anthropic Messages items to and from the wire-neutral model: :class:`AnthropicItems`.

The item codec of the ``anthropic_messages`` adapter (``anthropic_messages.py``): it reads
one client message into a :class:`~sessionwarden.domain.context.messages.Message` when
governance needs it, and writes a message governance changed or built back, keeping every
byte it was not asked to change (signed thinking, a provider's compaction, cache hints).

Rules:

The contract, property-tested: ``write_item(read_item(raw))`` decodes to the item ``raw``
holds (same keys, same order, same values), every value it did not rewrite copied from
``raw`` byte for byte (``msgspec.Raw``), so a provider's prompt cache keeps hitting.

How a message is read (``role`` must be a string, else the item is refused as chat's is):

* roles ``user`` and ``assistant``; any other role is a message of role ``other`` holding
  one opaque part, the whole item, written back unchanged. A ``user`` message that holds
  a ``tool_result`` block is neutral role ``tool``: it answers calls, it is no new turn.
* ``content``: a string is one :class:`Text`; a list gives one part per block —
  ``text`` → :class:`Text` (other keys, ``cache_control``, ``citations``, kept in the
  part's framing); ``tool_use`` with an object ``input`` → :class:`ToolCall` whose
  ``arguments`` are the exact JSON text of ``input``; ``tool_result`` with a string id →
  :class:`ToolResult` (``name`` None, ``error`` when ``is_error`` is ``true``), its
  string or list content its parts;
  ``thinking`` / ``redacted_thinking`` → :class:`Opaque` of kind ``THINKING``;
  ``compaction`` → kind ``NATIVE_COMPACTION``; every other block (``image``,
  ``document``, ``server_tool_use``, ``web_search_tool_result``, unknown, malformed) an
  :class:`Opaque` whose kind is its ``type`` (``"part"`` without one).
* any other key of the message → an :class:`Opaque` of kind ``"field:<key>"``.
* an opaque part's ``chars`` is what ``usage.text_chars`` counts in it (thinking text,
  a compaction's summary), so :func:`~sessionwarden.domain.context.messages.text_chars`
  agrees with the wire's count, except that a call's arguments count as the JSON text
  of ``input`` (punctuation included) where the wire counts the strings in it.

Framing the parts do not say is recorded in ``Message.wire`` (a small JSON list): the wire
role, each key with the form of its value, and each ``tool_result`` block's keys with
their values but the content (``is_error``, ``cache_control``: a result whose parts were
replaced keeps them, as read), found again by ``tool_use_id`` when writing; a result with
no framing (governance built it) is written with ``"is_error": true`` when ``error``. A
text block or call with other keys keeps them in its own ``wire``, with the replaced
values as ``null``.

How a message is written: a message governance built (``wire == b""``) in the plain form,
``{"role": …, "content": "…"}`` (a list of blocks once a part is not plain text); roles
``tool`` and ``system`` are written as ``user`` (Anthropic's ``messages`` hold no other
role). A call's ``arguments`` that are not a JSON object are wrapped, as Anthropic
takes only an object: ``{"unparsed_arguments": <text>}`` when they are not valid JSON,
``{"value": <json>}`` when they are JSON but no object.
"""

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from sessionwarden.domain.context.messages import (
    NATIVE_COMPACTION,
    THINKING,
    Message,
    Opaque,
    Part,
    ResultPart,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from sessionwarden.domain.usage.canonical import text_chars as wire_chars

__all__ = ["AnthropicItems"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_decode_object = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_string = msgspec.json.Decoder(str).decode
_decode_content = msgspec.json.Decoder(str | list[msgspec.Raw]).decode
_decode_wire = msgspec.json.Decoder(
    tuple[str, list[tuple[str, str]], list[msgspec.Raw]]).decode

_NULL = msgspec.Raw(b"null")
_WHOLE = "message"  # the kind of the opaque part holding a whole unreadable item
_PART = "part"  # the kind of a block without a string type
_FIELD = "field:"
_RESULT = "tool_result"
_NOT_A_MESSAGE = "each message must be an object with a string 'role'"
_NOT_JSON = "a message is not valid JSON"

# Forms recorded per key in Message.wire, and for a tool result's content.
_ROLE, _STR, _LIST, _OTHER = "r", "s", "l", "f"

#: The opaque kinds governance reads, by block type (the rest are labelled by their type).
_KINDS = {"thinking": THINKING, "redacted_thinking": THINKING,
          "compaction": NATIVE_COMPACTION}


def _string(raw: msgspec.Raw | None) -> str | None:
    if raw is None:
        return None
    try:
        return _decode_string(raw)
    except msgspec.ValidationError:
        return None


def _opaque(kind: str, raw: bytes | msgspec.Raw, key: str | None = None) -> Opaque:
    """``raw`` kept as it is, with the characters the model reads in it."""
    value = _decode(raw)
    return Opaque(kind, bytes(raw), wire_chars(value if key is None else {key: value}))


def _framing(block: dict[str, msgspec.Raw], filled: Sequence[str]) -> bytes:
    """``block`` with the ``filled`` values left out (null): the part holds them."""
    return _encode({key: _NULL if key in filled else value for key, value in block.items()})


def _block(raw: msgspec.Raw) -> tuple[Part, bytes]:
    """One content block as a part, and a tool result's framing (else ``b""``)."""
    try:
        block: dict[str, msgspec.Raw] | None = _decode_object(raw)
    except msgspec.ValidationError:
        block = None
    kind = _string(block.get("type")) if block is not None else None
    if block is None or kind is None:
        return _opaque(_PART, raw), b""
    if kind == "text":
        text = _string(block.get("text"))
        if text is not None:
            if list(block) == ["type", "text"]:
                return Text(text), b""
            # Text under another key is counted as opaque, so the estimate stays right.
            if wire_chars(_decode(raw)) == len(text):
                return Text(text, _framing(block, ("text",))), b""
    elif kind == "tool_use":
        call_id, name, given = (_string(block.get("id")), _string(block.get("name")),
                                block.get("input"))
        # Only an object: anything else could not be written back as it came.
        if call_id is not None and name is not None and given is not None \
                and bytes(given)[:1] == b"{":
            plain = list(block) == ["type", "id", "name", "input"]
            wire = b"" if plain else _framing(block, ("id", "name", "input"))
            return ToolCall(call_id, name, bytes(given).decode(), wire), b""
    elif kind == _RESULT:
        read = _tool_result(block)
        if read is not None:
            return read
    return _opaque(_KINDS.get(kind, kind), raw), b""


def _tool_result(block: dict[str, msgspec.Raw]) -> tuple[ToolResult, bytes] | None:
    call_id = _string(block.get("tool_use_id"))
    content = block.get("content")
    if call_id is None:
        return None
    framing = dict(block)
    parts: tuple[ResultPart, ...] = ()
    if content is not None:
        try:
            value = _decode_content(content)
        except msgspec.ValidationError:
            return None
        if isinstance(value, str):
            parts, form = (Text(value),), _STR
        else:
            parts, form = tuple(_result_part(element) for element in value), _LIST
        framing["content"] = msgspec.Raw(_encode(form))
    error = block.get("is_error")
    failed = error is not None and bytes(error).strip() == b"true"
    return ToolResult(call_id, parts, error=failed), _encode(framing)


def _result_part(raw: msgspec.Raw) -> ResultPart:
    part, _ = _block(raw)
    if isinstance(part, Text | Opaque):
        return part
    # A call or a result inside a result: not a shape Anthropic sends, carried as it is.
    return _opaque(_RESULT if isinstance(part, ToolResult) else "tool_use", raw)


def _read(role: str, item: dict[str, msgspec.Raw]) -> Message:
    layout: list[tuple[str, str]] = []
    parts: list[Part] = []
    framings: list[msgspec.Raw] = []
    answers = False
    for key, value in item.items():
        form = _OTHER
        if key == "role":
            form = _ROLE
        elif key == "content":
            try:
                content = _decode_content(value)
            except msgspec.ValidationError:
                content = None
            if isinstance(content, str):
                form = _STR
                parts.append(Text(content))
            elif content is not None:
                form = _LIST
                for element in content:
                    part, framing = _block(element)
                    parts.append(part)
                    if framing:
                        framings.append(msgspec.Raw(framing))
                    answers = answers or isinstance(part, ToolResult) or (
                        isinstance(part, Opaque) and part.kind == _RESULT)
        if form == _OTHER:
            parts.append(_opaque(_FIELD + key, value, key))
        layout.append((key, form))
    neutral: Role = "assistant" if role == "assistant" else "tool" if answers else "user"
    return Message(neutral, tuple(parts), _encode((role, layout, framings)))


def _read_item(raw: bytes) -> Message | str:
    try:
        item = _decode_object(raw)
        role = _string(item.get("role"))
        if role is None:
            return _NOT_A_MESSAGE
        if role not in ("user", "assistant"):
            return Message("other", (_opaque(_WHOLE, raw),))
        return _read(role, item)
    except msgspec.ValidationError:
        return _NOT_A_MESSAGE
    except (msgspec.DecodeError, RecursionError):
        return _NOT_JSON


class _Framings:
    """A message's recorded tool-result framings, taken by ``tool_use_id`` in order."""

    def __init__(self, raws: Iterable[msgspec.Raw]) -> None:
        self._waiting: dict[str, list[dict[str, msgspec.Raw]]] = {}
        for raw in raws:
            block = _decode_object(raw)
            self._waiting.setdefault(_string(block.get("tool_use_id")) or "", []).append(block)

    def take(self, call_id: str) -> dict[str, msgspec.Raw] | None:
        waiting = self._waiting.get(call_id)
        return waiting.pop(0) if waiting else None


def _input(arguments: str) -> Any:
    """``input`` for ``arguments``: as written when an object, else wrapped (module doc)."""
    data = arguments.strip(" \t\r\n").encode("utf-8", "replace")
    try:
        value = _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return {"unparsed_arguments": data.decode()}
    return msgspec.Raw(data) if isinstance(value, dict) else {"value": msgspec.Raw(data)}


def _plain(parts: Sequence[Part]) -> bool:
    return all(type(part) is Text and not part.wire for part in parts)


def _render_content(parts: Sequence[Part], form: str, framings: _Framings) -> Any:
    if form == _STR and _plain(parts):
        return "".join(part.text for part in parts if isinstance(part, Text))
    return [_render_block(part, framings) for part in parts]


def _render_block(part: Part, framings: _Framings) -> Any:
    if isinstance(part, Opaque):
        return msgspec.Raw(part.raw)
    if isinstance(part, Text):
        if not part.wire:
            return {"type": "text", "text": part.text}
        block: dict[str, Any] = _decode_object(part.wire)
        block["text"] = part.text
        return block
    if isinstance(part, ToolCall):
        call: dict[str, Any] = _decode_object(part.wire) if part.wire else {"type": "tool_use"}
        call["id"], call["name"], call["input"] = part.id, part.name, _input(part.arguments)
        return call
    framing = framings.take(part.call_id)
    if framing is None:
        plain = {"type": _RESULT, "tool_use_id": part.call_id,
                 "content": _render_content(part.parts, _STR, framings)}
        return {**plain, "is_error": True} if part.error else plain
    out: dict[str, Any] = {}
    for key, value in framing.items():
        if key == "tool_use_id":
            out[key] = part.call_id
        elif key == "content":
            out[key] = _render_content(part.parts, _string(value) or _LIST, framings)
        else:
            out[key] = value
    if "content" not in out and part.parts:
        out["content"] = _render_content(part.parts, _STR, framings)
    return out


def _write_item(message: Message) -> bytes:
    if message.role == "other":
        whole = message.parts[0] if len(message.parts) == 1 else None
        if isinstance(whole, Opaque) and whole.kind == _WHOLE and not message.wire:
            return whole.raw
        raise ValueError("a message of role 'other' must hold exactly its opaque item")
    fields = {part.kind[len(_FIELD):]: part for part in message.parts
              if isinstance(part, Opaque) and part.kind.startswith(_FIELD)}
    content = [part for part in message.parts
               if not (isinstance(part, Opaque) and part.kind.startswith(_FIELD))]
    if message.wire:
        role, layout, raws = _decode_wire(message.wire)
    else:
        role = "assistant" if message.role == "assistant" else "user"
        layout, raws = [("role", _ROLE), ("content", _STR if _plain(content) else _LIST)], []
    framings = _Framings(raws)
    out: dict[str, Any] = {}
    placed = False
    for key, form in layout:
        if form == _ROLE:
            out[key] = role
        elif form in (_STR, _LIST) and not placed:
            out[key] = _render_content(content, form, framings)
            placed = True
        elif form == _OTHER and (field := fields.pop(key, None)) is not None:
            out[key] = msgspec.Raw(field.raw)
    # What the framing has no place for (parts governance added) goes after it, plainly.
    if content and not placed and "content" not in out:
        out["content"] = _render_content(content, _STR, framings)
    for key, field in fields.items():
        out.setdefault(key, msgspec.Raw(field.raw))
    return _encode(out)


class AnthropicItems:
    """Anthropic ``messages``, one at a time: the :class:`ItemCodec` of this format."""

    items_key = "messages"
    tool_choice_none = b'{"type":"none"}'

    def read_item(self, raw: bytes) -> Message | str:
        """The message as a neutral :class:`Message`, or why it is not a valid message.

        Never raises: what it cannot read it keeps as opaque (module doc).
        """
        return _read_item(raw)

    def write_item(self, message: Message) -> bytes:
        """The message's JSON bytes (an untouched message: its item's keys and values).

        Raises:
            ValueError: an ``other`` message that is not exactly its opaque item (a
                programming error in the caller).
        """
        return _write_item(message)

    def is_system(self, raw: bytes) -> bool:
        """False: Anthropic's system prompt is the ``system`` field, never an item."""
        del raw
        return False
