"""Chat-completions messages to and from the wire-neutral model of ``domain.context.messages``.

The one place that knows how an OpenAI chat-completions ``messages`` list is shaped for
context governance (issue 11, "A neutral message model"): :func:`to_neutral` reads each
message into a :class:`~sessionwarden.domain.context.messages.Message`, :func:`from_neutral`
writes one back.

Rules:

The contract, property-tested: ``from_neutral(to_neutral(m)) == m`` for
any list of messages, and msgspec encodes both to the same bytes (same keys, same order,
same values), so an untouched message is re-sent byte for byte and a provider's prompt
cache keeps hitting.

How a message is read:

* roles ``system`` and ``developer`` → ``system``; ``user``; ``assistant``; ``tool`` and
  the legacy ``function`` → ``tool``. Anything else (not an object, no string role, an
  unknown role) becomes a message of role ``other`` holding one opaque part, the whole
  item, returned unchanged.
* ``content``: a string is one :class:`Text`; a list gives one part per element — a
  ``{"type": "text", "text": …}`` element is a :class:`Text`, any other (``image_url``,
  ``input_audio``, ``file``, ``refusal``, unknown) an :class:`Opaque` whose ``kind`` is
  its ``type``; ``null`` gives no part.
* assistant ``tool_calls`` → one :class:`ToolCall` each; the legacy ``function_call`` →
  a :class:`ToolCall` with ``id == ""``.
* a ``tool`` (or ``function``) message → one :class:`ToolResult` holding its content,
  with ``tool_call_id`` as ``call_id`` (``""`` for ``function``) and ``name`` if given.
* every other key (``refusal``, ``reasoning_content``, ``audio``, a message's ``name``,
  unknown keys) and any governed key whose value has an unexpected shape → an
  :class:`Opaque` of kind ``"field:<key>"`` holding the value. Opaque ``chars`` is what
  ``usage.text_chars`` counts in it, so the neutral count agrees with the wire's, except
  for legacy ``function_call`` arguments, which the neutral count includes, and text
  under extra keys of a tool call (``content`` beside ``function``), which it leaves
  out; a text part with text under an extra key is opaque for the same reason.

Framing that the neutral parts do not say — the role's spelling, the keys' order, whether
``content`` was a string, a list or ``null`` — is recorded in ``Message.wire`` (a small
JSON list), and a text part or tool call with extra keys or another key order keeps its
own framing in its ``wire``. :func:`from_neutral` replays that framing, filling in the
parts as they are now, so a message governance rewrote (a tool result replaced by a
preview, arguments truncated) keeps its other keys and their order. A message governance
built itself (``wire == b""``) is written in the plain form.
"""

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from sessionwarden.domain.context.messages import (
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

__all__ = ["from_neutral", "to_neutral"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

_ROLES: dict[str, Role] = {
    "system": "system", "developer": "system", "user": "user", "assistant": "assistant",
    "tool": "tool", "function": "tool",
}
_PLAIN_ROLE: dict[str, str] = {
    "system": "system", "user": "user", "assistant": "assistant", "tool": "tool",
}
_WHOLE = "message"  # the kind of the opaque part holding a whole unreadable item
_FIELD = "field:"

# Forms recorded per key in Message.wire: how the key's value was shaped.
_ROLE_KEY, _STR, _LIST, _NULL = "r", "s", "l", "n"
_CALLS, _NO_CALLS, _LEGACY, _CALL_ID, _NAME, _OTHER = "t", "e", "c", "i", "m", "f"


def _opaque_field(key: str, value: object) -> Opaque:
    return Opaque(_FIELD + key, _encode(value), wire_chars({key: value}))


def _content_part(element: object) -> ResultPart:
    if isinstance(element, dict):
        text = element.get("text")
        if element.get("type") == "text" and isinstance(text, str):
            if len(element) == 2 and next(iter(element)) == "type":
                return Text(text)
            # Extra keys are kept in the part's framing, unless the model reads text in
            # them (counted then as opaque, so the estimate stays right).
            if wire_chars(element) == len(text):
                return Text(text, _encode(element))
        kind = element.get("type")
        return Opaque(kind if isinstance(kind, str) else "part", _encode(element),
                      wire_chars(element))
    return Opaque("part", _encode(element), wire_chars(element))


def _content(value: object) -> tuple[str, tuple[ResultPart, ...]] | None:
    """The form and parts of a ``content`` value; None when it has no readable shape."""
    if isinstance(value, str):
        return _STR, (Text(value),)
    if value is None:
        return _NULL, ()
    if isinstance(value, list):
        return _LIST, tuple(_content_part(element) for element in value)
    return None


def _call(element: object) -> ToolCall | None:
    if not isinstance(element, dict):
        return None
    call_id, function = element.get("id"), element.get("function")
    if not isinstance(call_id, str) or not isinstance(function, dict):
        return None
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        return None
    plain = (list(element) == ["id", "type", "function"] and element["type"] == "function"
             and list(function) == ["name", "arguments"])
    return ToolCall(call_id, name, arguments, b"" if plain else _encode(element))


def _legacy_call(value: object) -> ToolCall | None:
    if not isinstance(value, dict):
        return None
    name, arguments = value.get("name"), value.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        return None
    plain = list(value) == ["name", "arguments"]
    return ToolCall("", name, arguments, b"" if plain else _encode(value))


def _read(item: object) -> Message:
    role = item.get("role") if isinstance(item, dict) else None
    neutral = _ROLES.get(role) if isinstance(role, str) else None
    if neutral is None or not isinstance(item, dict):
        return Message("other", (Opaque(_WHOLE, _encode(item), wire_chars(item)),))
    is_result = neutral == "tool"
    layout: list[list[str]] = []
    parts: list[Part] = []
    result_parts: tuple[ResultPart, ...] = ()
    call_id, name = "", None
    for key, value in item.items():
        form = _OTHER
        if key == "role":
            form = _ROLE_KEY
        elif key == "content" and (content := _content(value)) is not None:
            form, found = content
            if is_result:
                result_parts = found
            else:
                parts.extend(found)
        elif key == "tool_calls" and not is_result and isinstance(value, list):
            calls = [_call(element) for element in value]
            if all(call is not None for call in calls):
                # An empty list is kept as sent, but a list governance emptied is
                # dropped: providers refuse an empty ``tool_calls``.
                form = _CALLS if calls else _NO_CALLS
                parts.extend(call for call in calls if call is not None)
        elif key == "function_call" and not is_result:
            if (legacy := _legacy_call(value)) is not None:
                form = _LEGACY
                parts.append(legacy)
        elif key == "tool_call_id" and is_result and isinstance(value, str):
            form, call_id = _CALL_ID, value
        elif key == "name" and is_result and isinstance(value, str):
            form, name = _NAME, value
        if form == _OTHER:
            parts.append(_opaque_field(key, value))
        layout.append([key, form])
    if is_result:
        parts.insert(0, ToolResult(call_id, result_parts, name))
    return Message(neutral, tuple(parts), _encode([role, layout]))


def to_neutral(messages: Sequence[object]) -> list[Message]:
    """Read a chat-completions ``messages`` list into neutral messages, one per item.

    Never raises for decoded JSON: what it cannot read it keeps as opaque (module doc).
    """
    return [_read(item) for item in messages]


def _render_part(part: ResultPart) -> Any:
    if isinstance(part, Opaque):
        return _decode(part.raw)
    if part.wire:
        element = _decode(part.wire)
        element["text"] = part.text
        return element
    return {"type": "text", "text": part.text}


def _render_content(parts: Sequence[ResultPart], form: str) -> Any:
    """``content`` in its recorded form where the parts still allow it."""
    if form == _NULL and not parts:
        return None
    if form != _LIST and all(isinstance(part, Text) and not part.wire for part in parts):
        return "".join(part.text for part in parts if isinstance(part, Text))
    return [_render_part(part) for part in parts]


def _render_call(call: ToolCall) -> Any:
    if not call.wire:
        return {"id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": call.arguments}}
    element = _decode(call.wire)
    element["id"] = call.id
    element["function"]["name"] = call.name
    element["function"]["arguments"] = call.arguments
    return element


def _render_legacy(call: ToolCall) -> Any:
    value = _decode(call.wire) if call.wire else {}
    value["name"] = call.name
    value["arguments"] = call.arguments
    return value


def _plain_layout(role: Role, result: ToolResult | None, content: Sequence[ResultPart],
                  calls: Sequence[ToolCall]) -> list[list[str]]:
    """The framing of a message governance built: the plain chat-completions form."""
    layout = [["role", _ROLE_KEY]]
    if result is not None:
        layout.append(["tool_call_id", _CALL_ID])
        if result.name is not None:
            layout.append(["name", _NAME])
    if role == "assistant" and calls and not content:
        layout.append(["content", _NULL])
    else:
        layout.append(["content", _STR])
    if calls:
        layout.append(["tool_calls", _CALLS])
    return layout


def _write(message: Message) -> Any:
    if message.role == "other":
        whole = [part for part in message.parts if isinstance(part, Opaque)]
        if len(whole) == 1 and whole[0].kind == _WHOLE and not message.wire:
            return _decode(whole[0].raw)
        raise ValueError("a message of role 'other' must hold exactly its opaque item")
    results = [part for part in message.parts if isinstance(part, ToolResult)]
    if len(results) > 1 or (results and message.role != "tool"):
        raise ValueError("a chat-completions message holds one tool result, in a tool message")
    result = results[0] if results else None
    calls = [part for part in message.parts if isinstance(part, ToolCall)]
    content: list[ResultPart] = (list(result.parts) if result is not None else [
        part for part in message.parts
        if isinstance(part, Text) or (isinstance(part, Opaque)
                                      and not part.kind.startswith(_FIELD))])
    fields = {part.kind[len(_FIELD):]: part for part in message.parts
              if isinstance(part, Opaque) and part.kind.startswith(_FIELD)}
    if message.wire:
        role, layout = _decode(message.wire)
    else:
        role = _PLAIN_ROLE[message.role]
        layout = _plain_layout(message.role, result, content, calls)
    legacy = None
    if any(form == _LEGACY for _, form in layout):
        legacy = next((call for call in calls if not call.id), None)
        calls = [call for call in calls if call is not legacy]
    out: dict[str, Any] = {}
    for key, form in layout:
        if form == _ROLE_KEY:
            out[key] = role
        elif form in (_STR, _LIST, _NULL):
            out[key] = _render_content(content, form)
            content = []
        elif form in (_CALLS, _NO_CALLS):
            if calls or form == _NO_CALLS:
                out[key] = [_render_call(call) for call in calls]
            calls = []
        elif form == _LEGACY:
            if legacy is not None:
                out[key] = _render_legacy(legacy)
        elif form == _CALL_ID and result is not None:
            out[key] = result.call_id
        elif form == _NAME and result is not None and result.name is not None:
            out[key] = result.name
        elif form == _OTHER and (field := fields.pop(key, None)) is not None:
            out[key] = _decode(field.raw)
    # What the recorded framing has no place for (parts governance added to a message
    # read from the wire) goes after it, in the plain form.
    if result is not None and result.call_id and "tool_call_id" not in out:
        out["tool_call_id"] = result.call_id
    if result is not None and result.name is not None and "name" not in out:
        out["name"] = result.name
    if content and "content" not in out:
        out["content"] = _render_content(content, _STR)
    if calls and "tool_calls" not in out:
        out["tool_calls"] = [_render_call(call) for call in calls]
    for key, field in fields.items():
        out.setdefault(key, _decode(field.raw))
    return out


def from_neutral(messages: Iterable[Message]) -> list[Any]:
    """Write neutral messages back as a chat-completions ``messages`` list, one per message.

    Raises:
        ValueError: a message cannot be said in chat-completions (more than one tool
            result, a tool result outside a ``tool`` message, an ``other`` message that is
            not one opaque item) — a programming error in the caller.
    """
    return [_write(message) for message in messages]
