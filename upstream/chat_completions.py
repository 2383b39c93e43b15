"""The OpenAI chat-completions wire format, both ways: the one adapter for ``chat_completions``.

Everything the daemon knows about this format's shapes is here, so the proxy never parses
a wire format itself.

What it holds: reading a client's request into a wire-neutral
:class:`~sessionwarden.domain.calls.RequestShape` and a
:class:`~sessionwarden.domain.context.conversation.Conversation` (its fields decoded, its messages
left as the client's bytes, read one at a time by :class:`ChatItems` when governance
needs them); the fields sent upstream (the upstream model name, usage always requested
on streams) and the body they make with the governed messages; what a plain response says (its usage
block, the text generated); and, per streamed call, a :class:`ChatStream` that frames the
server-sent events, keeps the usage chunk the client did not ask for out of the relay,
holds back ``[DONE]`` until the call is recorded, and notes usage and text on the way.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from sessionwarden.config import MAX_MODEL_NAME, ApiMode
from sessionwarden.domain.calls import RequestShape
from sessionwarden.domain.context.conversation import Conversation, ItemCodec
from sessionwarden.domain.context.messages import Message
from sessionwarden.domain.context.transcript import assemble_body
from sessionwarden.domain.usage.canonical import text_chars
from sessionwarden.upstream.chat_messages import from_neutral, to_neutral
from sessionwarden.upstream.errors import MalformedRequest
from sessionwarden.upstream.sse import DEFAULT_MAX_EVENT_BYTES, SseFramer, sse_data

__all__ = ["ChatCompletions", "ChatItems", "ChatStream", "ResponseFacts"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_DONE = b"[DONE]"


class ResponseFacts(msgspec.Struct, frozen=True):
    """What a complete (non-streamed) response says about the call."""

    usage_block: Any = None
    has_output: bool = False
    output_chars: int = 0
    #: The response's id, in a format whose requests can continue one (Responses).
    response_id: str = ""


def _decode_or_none(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


class _Role(msgspec.Struct):
    role: object = None


_decode_role = msgspec.json.Decoder(_Role).decode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_items = msgspec.json.Decoder(list[msgspec.Raw]).decode
_SYSTEM_ROLES = ("system", "developer")


class ChatItems:
    """Chat-completions ``messages``, one at a time: the :class:`ItemCodec` of this format."""

    items_key = "messages"
    tool_choice_none = b'"none"'

    def read_item(self, raw: bytes) -> Message | str:
        """The message as a neutral :class:`Message`, or why it is not a valid message."""
        try:
            item = _decode(raw)
        except (msgspec.DecodeError, RecursionError):
            return "a message is not valid JSON"
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            return "each message must be an object with a string 'role'"
        return to_neutral([item])[0]

    def write_item(self, message: Message) -> bytes:
        """The message's JSON bytes."""
        return _encode(from_neutral([message])[0])

    def is_system(self, raw: bytes) -> bool:
        """Whether the message is a ``system`` or ``developer`` one."""
        try:
            return _decode_role(raw).role in _SYSTEM_ROLES
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return False


_ITEMS = ChatItems()

#: The fields that count answers or output tokens: each must be a JSON integer when
#: given (null is "not given"). The worst case a cap holds reads only integers, and a
#: lenient server reads ``"100"`` or ``100.0`` as 100 (issue 21 §7: ``n: "100"`` reserved
#: one answer and was billed a hundred), so such a value is refused, never forwarded.
#: ``max_output_tokens`` is the Responses API's name, which a lenient server may honour.
_INTEGER_FIELDS = ("n", "max_tokens", "max_completion_tokens", "max_output_tokens")


def _integer_problems(fields: Mapping[str, Any]) -> tuple[str, ...]:
    """A sentence for each of :data:`_INTEGER_FIELDS` given as anything but an integer.

    A boolean is not an integer (``True`` is 1 to Python, not to JSON). The range is
    the provider's to judge: a non-positive value reserves as none does (the default
    bound), which no server bills beyond.
    """
    problems = []
    for key in _INTEGER_FIELDS:
        value = fields.get(key)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            continue
        shown = _encode(value)[:40].decode(errors="replace")
        problems.append(f"'{key}' must be an integer (a JSON number without a fraction or "
                        f"an exponent), not {shown}")
    return tuple(problems)


class ChatCompletions:
    """``POST /chat/completions`` in the OpenAI format."""

    api_mode: ApiMode = "chat_completions"
    path = "/chat/completions"
    items: ItemCodec = _ITEMS

    def read_request(self, body: bytes) -> tuple[Conversation, RequestShape]:
        """Split a client's body into its fields and its raw messages, and their shape.

        The messages are not decoded here: governance hashes them and decodes only the
        ones it has not seen (``domain.context.conversation``).

        Raises:
            MalformedRequest: not JSON, not an object, or no model named. A ``messages``
                that is not a list is reported in the shape's ``problems`` instead, for
                the validation stage to decide on (and record).
        """
        try:
            top = _decode_top(body)
            fields = {key: _decode(value) for key, value in top.items()
                      if key != "messages"}
        except msgspec.ValidationError:
            raise MalformedRequest("the body must be a JSON object") from None
        except msgspec.DecodeError as exc:
            text = str(exc)
            raise MalformedRequest(f"malformed JSON body: {text[:200]}") from None
        except RecursionError:
            raise MalformedRequest("malformed JSON body: nested too deeply") from None
        model = fields.get("model")
        if not isinstance(model, str) or not model:
            raise MalformedRequest("'model' must be a non-empty string", code="invalid_model")
        if len(model) > MAX_MODEL_NAME or not model.isprintable():
            # The name enters the permanent log and every table that shows it.
            raise MalformedRequest(f"'model' must be at most {MAX_MODEL_NAME} printable "
                                   "characters", code="invalid_model")
        items: list[bytes] = []
        problems: tuple[str, ...] = ()
        raw_messages = top.get("messages")
        try:
            # msgspec.Raw slices keep the body alive; bytes() copies each item once so
            # what governance keeps (and hashes) does not pin the whole request.
            if raw_messages is not None:
                items = [bytes(item) for item in _decode_items(raw_messages)]
            else:
                problems = ("'messages' must be a list",)
        except msgspec.ValidationError:
            problems = ("'messages' must be a list",)
        problems += _integer_problems(fields)
        return Conversation(fields, items, _ITEMS), RequestShape(
            model=model, stream=fields.get("stream") is True, message_count=len(items),
            problems=problems,
        )

    def auth_headers(self, secret: str) -> dict[str, str]:
        """The header that carries the key upstream."""
        return {"authorization": f"Bearer {secret}"}

    def upstream_fields(self, fields: Mapping[str, Any], model: str, stream: bool
                        ) -> tuple[bytes, bool]:
        """The fields to send (all but the messages), and whether usage was requested for us.

        Streams always ask for usage (``stream_options.include_usage``): without it a
        streamed call would have no usage to record. When the client did not ask, the
        usage chunk is kept out of what it receives (:class:`ChatStream`).
        """
        upstream = dict(fields)
        upstream["model"] = model
        injected = False
        if stream:
            options = upstream.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            injected = options.get("include_usage") is not True
            options["include_usage"] = True
            upstream["stream_options"] = options
        return _encode(upstream), injected

    def upstream_body(self, fields: bytes, items: Sequence[bytes]) -> bytes:
        """The body to send: the upstream ``fields`` with the (governed) ``items``."""
        return assemble_body(fields, "messages", items)

    def read_response(self, body: bytes) -> ResponseFacts:
        """The usage block and generated text of a successful plain response."""
        decoded = _decode_or_none(body)
        if not isinstance(decoded, dict):
            return ResponseFacts(has_output=True)
        output = 0
        choices = decoded.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            output = text_chars(choices[0].get("message"))
        return ResponseFacts(decoded.get("usage"), True, output)

    def stream_error(self, head: bytes) -> bytes | None:
        """The data of a stream's first data event if it is an error, else None.

        Some upstreams answer 200 and then an error event (``data: {"error": ...}``;
        OpenRouter's carries a ``choices`` with an empty delta) instead of an error
        status; seen before anything was relayed, it is judged as an error answer is.
        """
        for event in SseFramer(len(head) + 1).feed(head):
            data = sse_data(event)
            if data is None:
                continue  # a comment
            parsed = _decode_or_none(data)
            if isinstance(parsed, dict) and parsed.get("error") is not None \
                    and not _delta_chars(parsed):
                return data
            return None
        return None

    def stream(self, injected: bool, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
               ) -> "ChatStream":
        """A reader for one streamed response."""
        return ChatStream(injected, max_event_bytes)

    def session_hint(self, fields: Mapping[str, Any], headers: Mapping[str, str]
                     ) -> str | None:
        """None: a chat client names its session with ``X-Session-Id`` or not at all."""
        del fields, headers
        return None

    def continues(self, fields: Mapping[str, Any]) -> str | None:
        """None: a chat request sends its whole history."""
        del fields
        return None

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> bytes:
        """``{"error": {"message", "type", "code"}}``, as OpenAI answers."""
        del status
        return _encode({"error": {"message": message, "type": kind, "code": code}})

    def sse_error(self, message: str, kind: str, code: str) -> bytes:
        """The error as a ``data:`` event, as OpenAI ends a stream that failed."""
        return b"data: " + self.error_body(0, message, kind, code) + b"\n\n"


class ChatStream:
    """One streamed chat completion, read as it is relayed.

    :meth:`feed` returns the bytes to relay now; ``[DONE]`` (and anything after it) is
    held back in ``held`` until the call is recorded. ``usage_block``, ``output_chars`` and
    ``done`` say what the stream carried.
    """

    __slots__ = ("_framer", "_injected", "done", "held", "output_chars", "usage_block")

    #: A chat request continues no stored response: its id is never needed.
    response_id: str | None = None

    def __init__(self, injected: bool, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        """``injected``: usage was requested for us, so its chunk is not relayed."""
        self._framer = SseFramer(max_event_bytes)
        self._injected = injected
        self.usage_block: object = None
        self.output_chars = 0
        self.done = False
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        """Take a chunk of the upstream body; return what to relay to the client now.

        Raises:
            EventTooLarge: an event grew past the bound.
        """
        out = bytearray()
        for event in self._framer.feed(chunk):
            data = sse_data(event)
            if data == _DONE:
                self.done = True
                self.held += event
                continue
            keep = True
            parsed = _decode_or_none(data)
            if isinstance(parsed, dict):
                if parsed.get("usage") is not None:
                    self.usage_block = parsed["usage"]
                    keep = not (self._injected and not parsed.get("choices"))
                self.output_chars += _delta_chars(parsed)
            if self.held:  # nothing may follow [DONE]; keep the order if something does
                self.held += event
            elif keep:
                out += event
        return bytes(out)

    def rest(self) -> bytes:
        """What is left to send at the end: the held-back bytes and any unfinished event."""
        return self.held + self._framer.rest()


def _delta_chars(chunk: Mapping[str, Any]) -> int:
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return 0
    total = 0
    for choice in choices:
        if isinstance(choice, dict):
            total += text_chars(choice.get("delta"))
    return total
