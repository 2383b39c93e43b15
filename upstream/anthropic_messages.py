"""The Anthropic Messages wire format, both ways: the one adapter for ``anthropic_messages``.

Everything the daemon knows about ``POST /v1/messages`` is here and in its item codec
(``anthropic_items.py``): the request read into a wire-neutral shape and conversation,
the fields sent upstream, what an answer says, a stream read as it is relayed
(:class:`AnthropicStream`), and the door's side — Claude Code's own session id, errors
in Anthropic's shape.

Rules:

* The request: ``messages`` are the conversation (kept as the client's bytes); ``system``,
  ``tools``, ``thinking``, ``metadata``, ``context_management``… stay in the fields.
  ``RequestShape.native_compaction`` is set when ``context_management.edits`` holds an
  edit whose type starts with ``compact`` (``compact_20260112``): the provider compacts.
* Usage needs no asking: every Anthropic stream carries it (``injected`` is always
  False). ``message_start`` carries the prompt's counts and a provisional output count;
  each ``message_delta`` the cumulative counts. The stream's ``usage_block`` is the two
  merged (``domain.usage.stream.AnthropicStreamUsage``), and only once a
  ``message_delta`` carried usage: the start's output count is not the answer's, and a
  block seen ends the relay's drain of a stream whose client left.
* ``message_stop`` (and anything after it) is held back until the call is recorded, as
  chat's ``[DONE]``. An ``error`` event is the provider's and is relayed.
* Errors: ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's type for
  the status (504 is ``timeout_error``, as Anthropic's own gateway says); our ``code``
  rides along inside ``error`` (the SDKs ignore keys they do not know).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from sessionwarden.config import MAX_MODEL_NAME, ApiMode
from sessionwarden.domain.calls import RequestShape
from sessionwarden.domain.context.conversation import Conversation, ItemCodec
from sessionwarden.domain.context.transcript import assemble_body
from sessionwarden.domain.usage.canonical import text_chars
from sessionwarden.domain.usage.stream import AnthropicStreamUsage
from sessionwarden.upstream.anthropic_items import AnthropicItems
from sessionwarden.upstream.chat_completions import ResponseFacts
from sessionwarden.upstream.errors import MalformedRequest
from sessionwarden.upstream.sse import DEFAULT_MAX_EVENT_BYTES, SseFramer, sse_data

__all__ = ["AnthropicMessages", "AnthropicStream"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_items = msgspec.json.Decoder(list[msgspec.Raw]).decode

_ITEMS = AnthropicItems()
_NOT_A_LIST = "'messages' must be a list"
#: Counts a cap reads (chat_completions._INTEGER_FIELDS says why a non-integer is refused).
_INTEGER_FIELDS = ("max_tokens",)
#: Claude Code's session header, and the marker in its older ``metadata.user_id``.
_SESSION_HEADER = "x-claude-code-session-id"
_SESSION_MARK = "_session_"
#: Where a response's output is, by content block type.
_OUTPUT_KEYS = {"text": "text", "thinking": "thinking", "tool_use": "input"}

#: Anthropic's error type for an HTTP status.
_STATUS_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error",
    504: "timeout_error", 529: "overloaded_error",
}
#: Anthropic's error type for our (OpenAI) error kind.
_KIND_TYPES = {
    "invalid_request_error": "invalid_request_error", "auth_error": "authentication_error",
    "rate_limit_error": "rate_limit_error", "server_error": "api_error",
    "upstream_error": "api_error",
}


def _decode_or_none(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def _integer_problems(fields: Mapping[str, Any]) -> tuple[str, ...]:
    problems = []
    for key in _INTEGER_FIELDS:
        value = fields.get(key)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            continue
        shown = _encode(value)[:40].decode(errors="replace")
        problems.append(f"'{key}' must be an integer (a JSON number without a fraction or "
                        f"an exponent), not {shown}")
    return tuple(problems)


def _asks_compaction(fields: Mapping[str, Any]) -> bool:
    management = fields.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    return isinstance(edits, list) and any(
        isinstance(edit, dict) and isinstance(edit.get("type"), str)
        and edit["type"].startswith("compact") for edit in edits)


def _content_chars(content: object) -> int:
    """Characters of output in a response's ``content`` blocks: text, thinking, input."""
    total = 0
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        value = block.get(_OUTPUT_KEYS[kind]) if kind in _OUTPUT_KEYS else None
        if isinstance(value, str):
            total += len(value)
        elif kind == "tool_use" and value is not None:
            total += len(_encode(value))
    return total


class AnthropicMessages:
    """``POST /messages`` in Anthropic's format."""

    api_mode: ApiMode = "anthropic_messages"
    path = "/messages"
    items: ItemCodec = _ITEMS

    def read_request(self, body: bytes) -> tuple[Conversation, RequestShape]:
        """Split a client's body into its fields and its raw messages, and their shape.

        Raises:
            MalformedRequest: not JSON, not an object, or no model named. A ``messages``
                that is not a list, a ``max_tokens`` that is not an integer, are reported
                in the shape's ``problems`` for the validation stage to decide on.
        """
        try:
            top = _decode_top(body)
            fields = {key: _decode(value) for key, value in top.items()
                      if key != "messages"}
        except msgspec.ValidationError:
            raise MalformedRequest("the body must be a JSON object") from None
        except msgspec.DecodeError as exc:
            raise MalformedRequest(f"malformed JSON body: {str(exc)[:200]}") from None
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
            # bytes() copies each item once: what governance keeps does not pin the body.
            if raw_messages is not None:
                items = [bytes(item) for item in _decode_items(raw_messages)]
            else:
                problems = (_NOT_A_LIST,)
        except msgspec.ValidationError:
            problems = (_NOT_A_LIST,)
        problems += _integer_problems(fields)
        return Conversation(fields, items, _ITEMS), RequestShape(
            model=model, stream=fields.get("stream") is True, message_count=len(items),
            problems=problems, native_compaction=_asks_compaction(fields),
        )

    def auth_headers(self, secret: str) -> dict[str, str]:
        """The header that carries the key upstream (``anthropic-version`` is the client's)."""
        return {"x-api-key": secret}

    def upstream_fields(self, fields: Mapping[str, Any], model: str, stream: bool
                        ) -> tuple[bytes, bool]:
        """The fields to send (all but the messages) with the upstream model; never injected.

        An Anthropic stream always carries its usage: nothing is asked on the client's
        behalf, so nothing is kept from it.
        """
        del stream
        upstream = dict(fields)
        upstream["model"] = model
        return _encode(upstream), False

    def upstream_body(self, fields: bytes, items: Sequence[bytes]) -> bytes:
        """The body to send: the upstream ``fields`` with the (governed) ``items``."""
        return assemble_body(fields, "messages", items)

    def read_response(self, body: bytes) -> ResponseFacts:
        """The usage block and generated output of a successful plain response."""
        decoded = _decode_or_none(body)
        if not isinstance(decoded, dict):
            return ResponseFacts(has_output=True)
        return ResponseFacts(decoded.get("usage"), True, _content_chars(decoded.get("content")))

    def stream_error(self, head: bytes) -> bytes | None:
        """The data of a stream's first event if it is an ``error`` event, else None.

        Anthropic may answer 200 and then ``event: error`` (``overloaded_error``); seen
        before anything was relayed, it is judged as an error answer is.
        """
        for event in SseFramer(len(head) + 1).feed(head):
            data = sse_data(event)
            if data is None:
                continue  # a comment
            parsed = _decode_or_none(data)
            if isinstance(parsed, dict) and parsed.get("type") == "error":
                return data
            return None
        return None

    def stream(self, injected: bool, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
               ) -> "AnthropicStream":
        """A reader for one streamed response (``injected`` is never True here)."""
        del injected
        return AnthropicStream(max_event_bytes)

    def continues(self, fields: Mapping[str, Any]) -> str | None:
        """None: a Messages request sends its whole history."""
        del fields
        return None

    def session_hint(self, fields: Mapping[str, Any], headers: Mapping[str, str]
                     ) -> str | None:
        """Claude Code's session id: its header, else the one in ``metadata.user_id``.

        ``user_id`` is ``user_<hex>_account_<uuid>_session_<uuid>`` in older versions, a
        JSON object with a ``session_id`` in newer ones. None when neither names one.
        """
        header = headers.get(_SESSION_HEADER)
        if header:
            return header
        metadata = fields.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        if not isinstance(user_id, str):
            return None
        if user_id.startswith("{"):
            found = _decode_or_none(user_id.encode(errors="replace"))
            session = found.get("session_id") if isinstance(found, dict) else None
            return session if isinstance(session, str) and session else None
        _, mark, session = user_id.rpartition(_SESSION_MARK)
        return session if mark and session else None

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> bytes:
        """``{"type": "error", "error": {"type", "message"[, "code"]}}``, as Anthropic answers.

        The type is Anthropic's for ``status`` (by its class when it has none of its own;
        from ``kind`` without a status).
        """
        error_type = _STATUS_TYPES.get(status)
        if error_type is None:
            error_type = ("invalid_request_error" if 400 <= status < 500 else "api_error"
                          if 500 <= status < 600 else _KIND_TYPES.get(kind, "api_error"))
        error: dict[str, str] = {"type": error_type, "message": message}
        if code:
            error["code"] = code
        return _encode({"type": "error", "error": error})

    def sse_error(self, message: str, kind: str, code: str) -> bytes:
        """The error as an ``event: error``, as Anthropic ends a stream that failed."""
        return b"event: error\ndata: " + self.error_body(0, message, kind, code) + b"\n\n"


class AnthropicStream:
    """One streamed Anthropic message, read as it is relayed (module doc).

    :meth:`feed` returns the bytes to relay now; ``message_stop`` (and anything after it)
    is held back in ``held`` until the call is recorded. ``usage_block``,
    ``output_chars`` and ``done`` say what the stream carried.
    """

    __slots__ = ("_framer", "_usage", "done", "held", "output_chars", "usage_block")

    #: A Messages request continues no stored response: its id is never needed.
    response_id: str | None = None

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        """Frame events of at most ``max_event_bytes`` bytes."""
        self._framer = SseFramer(max_event_bytes)
        self._usage = AnthropicStreamUsage()
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
            parsed = _decode_or_none(sse_data(event))
            kind = parsed.get("type") if isinstance(parsed, dict) else None
            if kind == "message_stop":
                self.done = True
            elif isinstance(parsed, dict):
                self._note(kind, parsed)
            if self.held or self.done:  # nothing may follow message_stop; keep the order
                self.held += event
            else:
                out += event
        return bytes(out)

    def _note(self, kind: object, event: Mapping[str, Any]) -> None:
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                for key in ("text", "thinking", "partial_json"):
                    value = delta.get(key)
                    if isinstance(value, str):
                        self.output_chars += len(value)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") in ("text", "thinking"):
                self.output_chars += text_chars(block)
        elif kind in ("message_start", "message_delta"):
            self._usage = self._usage.fold(event)
            final = kind == "message_delta" and event.get("usage") is not None
            if final or self.usage_block is not None:  # module doc: not the start's alone
                self.usage_block = self._usage.block

    def rest(self) -> bytes:
        """What is left to send at the end: the held-back bytes and any unfinished event."""
        return self.held + self._framer.rest()
