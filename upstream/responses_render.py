"""Neutral messages written as Responses ``input`` items: the writing half of ``responses_items``.

:func:`render` turns a :class:`~sessionwarden.domain.context.messages.Message` into the
items it stands for, filling the framing ``responses_items`` recorded when it read the
item (:func:`framing`: the item with the values the parts hold as null) with the parts as
they are now; what no recorded item holds is written in the plain form governance builds.
The rules are ``responses_items``'s module doc; this module only keeps that one short.
"""

from collections.abc import Sequence
from enum import StrEnum
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

__all__ = [
    "INPUT_TEXT",
    "ITEM_KIND",
    "OUTPUT_TEXT",
    "Form",
    "Shape",
    "framing",
    "render",
    "text_framing",
    "whole_kind",
]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_decode_object = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
#: One entry of ``Message.wire`` per item: (shape, the key the parts fill, its form, the
#: item with the values the parts hold as null).
_Entry = tuple[str, str, str, dict[str, msgspec.Raw]]
_decode_wire = msgspec.json.Decoder(list[_Entry]).decode
_NULL = msgspec.Raw(b"null")

#: The text element types of a list ``content`` or ``output`` (the assistant's, the rest).
INPUT_TEXT, OUTPUT_TEXT = "input_text", "output_text"
#: How the kind of an opaque part holding a whole item starts: ``item:<type>``.
ITEM_KIND = "item:"
_WHOLE_KINDS = (THINKING, NATIVE_COMPACTION)
_PLAIN_ROLES = {"system": "system", "assistant": "assistant"}  # any other: user


class Shape(StrEnum):
    """Which part a recorded item holds."""

    MESSAGE = "m"  # a run of text and content elements
    CALL = "c"  # one ToolCall
    RESULT = "r"  # one ToolResult


class Form(StrEnum):
    """How the value the parts fill was given."""

    STR = "s"  # a string
    LIST = "l"  # a list of elements
    NONE = "n"  # null
    VALUE = "v"  # another value (an object): one opaque part
    JSON = "j"  # a call's payload given as JSON, its arguments the JSON text
    ABSENT = "-"  # not given


def whole_kind(kind: str) -> bool:
    """Whether an opaque part of ``kind`` is a whole item (not an element of a list)."""
    return kind in _WHOLE_KINDS or kind.startswith(ITEM_KIND)


def framing(shape: Shape, key: str, form: Form, item: dict[str, msgspec.Raw],
            filled: Sequence[str]) -> bytes:
    """The ``Message.wire`` of one item: ``item`` with the ``filled`` values left out."""
    template = {name: _NULL if name in filled else value for name, value in item.items()}
    return _encode([(shape, key, form, template)])


def text_framing(element: dict[str, msgspec.Raw]) -> bytes:
    """The ``Text.wire`` of a text element not in its plain form: its text left out."""
    return _encode({name: _NULL if name == "text" else value
                    for name, value in element.items()})


def _is_content(part: Part) -> bool:
    """Whether a message item holds ``part`` (text or a content element, no whole item)."""
    return isinstance(part, Text) or (isinstance(part, Opaque) and not whole_kind(part.kind))


def _holds(shape: str, part: Part) -> bool:
    if shape == Shape.MESSAGE:
        return _is_content(part)
    return isinstance(part, ToolCall if shape == Shape.CALL else ToolResult)


def _plain_type(role: Role) -> str:
    return OUTPUT_TEXT if role == "assistant" else INPUT_TEXT


def _render_part(part: ResultPart, plain_type: str) -> Any:
    if isinstance(part, Opaque):
        return msgspec.Raw(part.raw)
    if not part.wire:
        return {"type": plain_type, "text": part.text}
    element = _decode_object(part.wire)
    element["text"] = msgspec.Raw(_encode(part.text))
    return element


def _content(parts: Sequence[Part], form: str, plain_type: str) -> Any:
    """A ``content`` or ``output`` value in its recorded form where the parts allow it."""
    if form == Form.VALUE and len(parts) == 1 and isinstance(parts[0], Opaque):
        return msgspec.Raw(parts[0].raw)
    if form == Form.NONE and not parts:
        return None
    if form != Form.LIST and all(type(part) is Text and not part.wire for part in parts):
        return "".join(part.text for part in parts if isinstance(part, Text))
    return [_render_part(part, plain_type) for part in parts
            if isinstance(part, Text | Opaque)]


def _payload(arguments: str, form: str) -> Any:
    """A call's payload: its JSON text as JSON when it was a value, else the string."""
    if form == Form.JSON:
        try:
            data = arguments.encode()
            _decode(data)
            return msgspec.Raw(data)
        except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
            pass  # arguments governance made no JSON of: said as a string
    return arguments


def _filled(entry: _Entry, part: Part) -> bytes:
    """The call or result item an entry records, holding ``part``."""
    _, key, form, item = entry
    out: dict[str, Any] = dict(item)
    if isinstance(part, ToolCall):
        out["call_id"] = part.id
        if "name" in out:
            out["name"] = part.name
        out[key] = _payload(part.arguments, form)
    elif isinstance(part, ToolResult):
        out["call_id"] = part.call_id
        if form != Form.ABSENT or part.parts:
            out[key] = _content(part.parts, form, INPUT_TEXT)
    return _encode(out)


def _plain(parts: Sequence[Part], role: Role) -> list[bytes]:
    """Parts no recorded item holds, as the items governance would build for them."""
    out: list[bytes] = []
    run: list[Part] = []
    for part in [*parts, None]:
        if part is not None and _is_content(part):
            run.append(part)
            continue
        if run:
            out.append(_encode({"role": _PLAIN_ROLES.get(role, "user"),
                                "content": _content(run, Form.STR, _plain_type(role))}))
            run = []
        if isinstance(part, ToolCall):
            out.append(_encode({"type": "function_call", "call_id": part.id,
                                "name": part.name, "arguments": part.arguments}))
        elif isinstance(part, ToolResult):
            out.append(_encode({"type": "function_call_output", "call_id": part.call_id,
                                "output": _content(part.parts, Form.STR, INPUT_TEXT)}))
        elif isinstance(part, Opaque):
            out.append(part.raw)
    return out


def render(message: Message) -> list[bytes]:
    """The message's items: each recorded item with the parts it holds, the rest plainly.

    A recorded item whose part governance removed is left out; parts before the one an
    item holds go plainly before it (a summary merged into a call: a message, then the
    call). Never empty: a message with nothing to say is an empty message.
    """
    entries = _decode_wire(message.wire) if message.wire else []
    parts, role = message.parts, message.role
    out: list[bytes] = []
    done = 0
    for entry in entries:
        shape, key, form, item = entry
        found = next((i for i in range(done, len(parts)) if _holds(shape, parts[i])), None)
        if found is None:
            if shape == Shape.MESSAGE and len(entries) == 1:  # a message with no content
                out.append(_encode({**item, key: _content((), form, _plain_type(role))}))
            continue
        out.extend(_plain(parts[done:found], role))
        if shape == Shape.MESSAGE:
            end = found
            while end < len(parts) and _is_content(parts[end]):
                end += 1
            out.append(_encode({**item, key: _content(parts[found:end], form,
                                                      _plain_type(role))}))
            done = end
        else:
            out.append(_filled(entry, parts[found]))
            done = found + 1
    out.extend(_plain(parts[done:], role))
    if not out:
        out.append(_encode({"role": _PLAIN_ROLES.get(role, "user"), "content": ""}))
    return out
