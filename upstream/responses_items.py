"""OpenAI Responses ``input`` items to and from the wire-neutral model: :class:`ResponsesItems`.

The item codec of the ``codex_responses`` adapter (``responses.py``): it reads one input
item into a :class:`~sessionwarden.domain.context.messages.Message` when governance needs
it, and writes a message governance changed or built back, keeping every byte it was not
asked to change (encrypted reasoning, a provider's compaction, item ids and statuses).

Rules:

The contract, property-tested: ``write_item(read_item(raw))`` decodes to the item ``raw``
holds (same keys, same order, same values), every value it did not rewrite copied from
``raw`` byte for byte (``msgspec.Raw``); a reasoning, compaction or unknown item is
written as its exact bytes, so ``encrypted_content`` never changes.

How an item is read:

* a message (``"type": "message"``, or a ``role`` and no ``type``): roles ``user``,
  ``assistant``, ``system`` and ``developer`` (both → ``system``). A string ``content``
  is one :class:`Text`; a list gives one part per element: ``input_text`` /
  ``output_text`` → :class:`Text` (other keys, ``annotations``, ``logprobs``, kept in the
  part's framing), anything else (``input_image``, ``input_file``, ``refusal``, unknown)
  an :class:`Opaque` whose kind is its type (``"part"`` without one).
* a call → role ``assistant``, one :class:`ToolCall`: ``function_call`` (``arguments``),
  ``custom_tool_call`` (``input``), and the built-in tools' calls, whose payload is an
  object (``local_shell_call``, ``shell_call``, ``computer_call``: ``action``;
  ``apply_patch_call``: ``operation``): named by their type less ``_call``, their
  arguments the payload's exact JSON text.
* a call's output (``function_call_output``, ``custom_tool_call_output``, the built-in
  tools') with a string ``call_id`` → role ``tool``, one :class:`ToolResult`: a string
  ``output`` is one Text, a list one part per element (as a message's; a shell output's
  ``stdout`` and ``stderr`` count as opaque chars), any other value one Opaque.
* ``reasoning`` → role ``assistant``, an Opaque of kind ``THINKING`` (chars: its summary
  and reasoning text); a type containing ``compaction`` → role ``assistant``, kind
  ``NATIVE_COMPACTION``; a hosted tool's item (web or file search, MCP, code interpreter,
  image generation) → role ``assistant``, kind ``item:<type>``; ``item_reference``, an
  unknown type or a known one in a shape not expected → role ``other``, kind
  ``item:<type>``. Each holds the whole item.
* the keys the parts do not hold (``id``, ``status``, …) are the item's framing, recorded
  in ``Message.wire`` with the values the parts hold left as null, and not counted as
  text (they are ids and states, which the model does not read as text).

How a message is written: its recorded framing, filled with its parts as they are now (a
result whose parts governance replaced keeps its other keys; a string ``content`` or
``output`` stays a string while its parts are plain text). A message governance built
(``wire == b""``) is written plainly: ``{"role", "content": "…"}``, a ``function_call``,
a ``function_call_output`` (a result's ``name`` has no place on this wire).

One message, several items: Responses holds a call, a result or a reasoning in an item of
its own, where governance may put text beside one (a compaction merges its summary into
the first message it keeps). Such a message is written as consecutive items joined by
``,`` — ``assemble_body`` joins items so, and the provider reads them as separate items —
and :meth:`ResponsesItems.read_item` reads those bytes back as the one message. Only the
daemon writes such bytes: a client's item is always one JSON value.
"""

import msgspec
from sessionwarden.domain.context.messages import (
    NATIVE_COMPACTION,
    THINKING,
    Message,
    Opaque,
    ResultPart,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from sessionwarden.domain.usage.canonical import text_chars as wire_chars
from sessionwarden.upstream.responses_render import (
    INPUT_TEXT,
    ITEM_KIND,
    OUTPUT_TEXT,
    Form,
    Shape,
    framing,
    render,
    text_framing,
    whole_kind,
)

__all__ = ["ResponsesItems"]

_decode = msgspec.json.Decoder().decode
_decode_object = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_string = msgspec.json.Decoder(str).decode

_PART = "part"  # the kind of a content element without a string type
_NOT_AN_OBJECT = "each input item must be a JSON object"
_NOT_JSON = "an input item is not valid JSON"
_TOO_DEEP = "an input item is nested too deeply"

_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system",
                           "developer": "system"}
#: The call types, with the key holding their payload and, for a built-in tool's call
#: (which has no ``name``), the tool's name.
_CALLS: dict[str, tuple[str, str | None]] = {
    "function_call": ("arguments", None), "custom_tool_call": ("input", None),
    "local_shell_call": ("action", "local_shell"), "shell_call": ("action", "shell"),
    "computer_call": ("action", "computer"), "apply_patch_call": ("operation", "apply_patch")}
_RESULTS = frozenset({"function_call_output", "custom_tool_call_output",
                      "local_shell_call_output", "shell_call_output",
                      "computer_call_output", "apply_patch_call_output"})
#: Items the model produced with a hosted tool: the assistant's, carried whole.
_HOSTED = frozenset({"web_search_call", "file_search_call", "code_interpreter_call",
                     "image_generation_call", "mcp_call", "mcp_list_tools",
                     "mcp_approval_request"})


def _string(raw: msgspec.Raw | None) -> str | None:
    if raw is None:
        return None
    try:
        return _decode_string(raw)
    except msgspec.ValidationError:
        return None


def _head(raw: msgspec.Raw) -> bytes:
    """The first byte of a value (a Raw starts at its value): which JSON type it is."""
    return memoryview(raw)[:1].tobytes()


def _chars(value: object) -> int:
    """Characters the model reads in a decoded value (a shell output's streams too)."""
    chars = wire_chars(value)
    if isinstance(value, dict):
        for key in ("stdout", "stderr"):  # shell_call_output chunks: text under no text key
            stream = value.get(key)
            chars += len(stream) if isinstance(stream, str) else 0
    return chars


def _element(raw: msgspec.Raw, plain_type: str) -> ResultPart:
    """One element of a ``content`` or ``output`` list as a part."""
    try:
        element = _decode_object(raw)
    except msgspec.ValidationError:
        return Opaque(_PART, bytes(raw), _chars(_decode(raw)))
    kind = _string(element.get("type"))
    text = _string(element.get("text")) if kind in (INPUT_TEXT, OUTPUT_TEXT) else None
    if text is not None:
        if kind == plain_type and list(element) == ["type", "text"]:
            return Text(text)
        return Text(text, text_framing(element))
    return Opaque(_part_kind(kind), bytes(raw), _chars(_decode(raw)))


def _part_kind(kind: object) -> str:
    """An element's opaque kind: its type, never one a whole item's part is labelled with."""
    if not isinstance(kind, str):
        return _PART
    return f"{_PART}:{kind}" if whole_kind(kind) else kind


def _content(raw: msgspec.Raw, plain_type: str) -> tuple[Form, tuple[ResultPart, ...]]:
    """The form and parts of a ``content`` or ``output`` value."""
    head = _head(raw)
    if head == b'"':
        return Form.STR, (Text(_decode_string(raw)),)
    if head == b"[":
        return Form.LIST, tuple(_element(element, plain_type) for element in _decode_list(raw))
    if head == b"n":
        return Form.NONE, ()
    value = _decode(raw)
    kind = value.get("type") if isinstance(value, dict) else None
    return Form.VALUE, (Opaque(_part_kind(kind), bytes(raw), _chars(value)),)


def _message(item: dict[str, msgspec.Raw]) -> Message | None:
    role = _ROLES.get(_string(item.get("role")) or "")
    content = item.get("content")
    if role is None or content is None or _head(content) not in (b'"', b"["):
        return None
    form, parts = _content(content, OUTPUT_TEXT if role == "assistant" else INPUT_TEXT)
    return Message(role, parts, framing(Shape.MESSAGE, "content", form, item, ("content",)))


def _call(kind: str, item: dict[str, msgspec.Raw]) -> Message | None:
    key, tool = _CALLS[kind]
    call_id, payload = _string(item.get("call_id")), item.get(key)
    name = _string(item.get("name")) if tool is None or "name" in item else tool
    if call_id is None or payload is None or name is None:
        return None
    if _head(payload) == b'"':
        form, arguments = Form.STR, _decode_string(payload)
    else:
        form, arguments = Form.JSON, bytes(payload).decode()
    return Message("assistant", (ToolCall(call_id, name, arguments),),
                   framing(Shape.CALL, key, form, item, ("call_id", "name", key)))


def _result(item: dict[str, msgspec.Raw]) -> Message | None:
    call_id, output = _string(item.get("call_id")), item.get("output")
    if call_id is None:
        return None
    form, parts = _content(output, INPUT_TEXT) if output is not None else (Form.ABSENT, ())
    return Message("tool", (ToolResult(call_id, parts),),
                   framing(Shape.RESULT, "output", form, item, ("call_id", "output")))


def _whole(kind: str | None, raw: bytes) -> Message:
    """The item as one opaque part, its kind and role by its type (module doc)."""
    value = _decode(raw)
    chars = wire_chars(value)
    if kind == "reasoning":
        summary = value.get("summary") if isinstance(value, dict) else None
        chars += sum(len(entry["text"]) for entry in summary
                     if isinstance(entry, dict) and isinstance(entry.get("text"), str)
                     ) if isinstance(summary, list) else 0
        return Message("assistant", (Opaque(THINKING, raw, chars),))
    if kind is not None and "compaction" in kind:
        return Message("assistant", (Opaque(NATIVE_COMPACTION, raw, chars),))
    label = f"{ITEM_KIND}{kind or ''}"
    role: Role = "assistant" if kind is not None and (kind in _HOSTED or kind in _CALLS) \
        else "other"
    return Message(role, (Opaque(label, raw, chars),))


def _read(raw: bytes, item: dict[str, msgspec.Raw]) -> Message:
    kind = _string(item.get("type"))
    read: Message | None = None
    if kind == "message" or ("type" not in item and "role" in item):
        read = _message(item)
    elif kind in _CALLS:
        read = _call(kind, item)
    elif kind in _RESULTS:
        read = _result(item)
    return read if read is not None else _whole(kind, raw)


def _read_several(raw: bytes) -> Message | str:
    """Consecutive items the daemon wrote for one message (module doc), as that message."""
    try:
        found = _decode_list(b"[" + raw + b"]")
        items = [(bytes(element), _decode_object(element)) for element in found]
    except msgspec.ValidationError:
        return _NOT_AN_OBJECT
    except msgspec.DecodeError:
        return _NOT_JSON
    if len(items) < 2:
        return _NOT_JSON
    messages = [_read(element, item) for element, item in items]
    wires = [message.wire[1:-1] for message in messages if message.wire]
    return Message(messages[-1].role, tuple(part for m in messages for part in m.parts),
                   b"[" + b",".join(wires) + b"]" if wires else b"")


class _Head(msgspec.Struct):
    type: object = msgspec.UNSET
    role: object = None


_decode_head = msgspec.json.Decoder(_Head).decode


class ResponsesItems:
    """Responses ``input`` items, one at a time: the :class:`ItemCodec` of this format."""

    items_key = "input"
    tool_choice_none = b'"none"'

    def read_item(self, raw: bytes) -> Message | str:
        """The item as a neutral :class:`Message`, or why it is not a valid item.

        Every JSON object is an item (an unknown one is carried whole, role ``other``).
        """
        item: dict[str, msgspec.Raw] | None = None
        try:
            item = _decode_object(raw)
        except msgspec.ValidationError:
            return _NOT_AN_OBJECT
        except msgspec.DecodeError:
            pass  # maybe several items the daemon wrote for one message
        except RecursionError:
            return _TOO_DEEP
        try:
            return _read(raw, item) if item is not None else _read_several(raw)
        except RecursionError:
            return _TOO_DEEP

    def write_item(self, message: Message) -> bytes:
        """The message's JSON bytes (consecutive items when it needs several: module doc)."""
        return b",".join(render(message))

    def is_system(self, raw: bytes) -> bool:
        """Whether the item is a ``system`` or ``developer`` message."""
        try:
            head = _decode_head(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return False
        return head.role in ("system", "developer") and (
            head.type is msgspec.UNSET or head.type == "message")
