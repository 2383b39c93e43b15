"""The OpenAI Responses wire format, both ways: the one adapter for ``codex_responses``.

Codex CLI and the OpenAI Agents SDK speak it. Everything the daemon knows about its shapes
is here and in ``responses_items.py`` (one ``input`` item ↔ one neutral message), so the
proxy never parses the format itself: the request read into a wire-neutral
:class:`~sessionwarden.domain.calls.RequestShape` and a
:class:`~sessionwarden.domain.context.conversation.Conversation`, the upstream body, what a
whole response says, and, per streamed call, a :class:`ResponsesStream` (its own module).

Rules:

* The conversation is ``input``: a list keeps each item's bytes; a string is one user
  message, ``{"role":"user","content":<the string>}``, so the upstream is sent the list
  form. Every other field (``instructions``, ``tools``, ``previous_response_id``,
  ``store``, ``include``, ``reasoning``, ``prompt_cache_key``, ``context_management``, …)
  is forwarded as the client sent it, the model name aside.
* A request asks the provider to compact (``RequestShape.native_compaction``) when its
  ``context_management`` holds an entry whose ``type`` contains ``compact``.
* A stream always carries its usage (in its terminal event), so nothing is asked on the
  client's behalf. The terminal event (``response.completed``, ``response.incomplete``,
  ``response.failed``) and anything after it are held back until the call is recorded.
* The session a client names: Codex sends its conversation id as a ``session-id`` header
  (older versions ``session_id``, ``conversation_id``) and as ``prompt_cache_key``.
* Errors take OpenAI's shape; a stream ends on an ``error`` event shaped as the openai SDK's
  ``ResponseErrorEvent`` (``type``, ``code``, ``message``, ``param``, ``sequence_number``)
  with the nested ``error`` object the SDK raises on.
* :func:`response_id` and :attr:`ResponsesStream.response_id` name the response an answer
  made, for following ``previous_response_id`` chains.
* The usage block handed to the domain is the provider's ``usage`` with one key the
  daemon adds: ``"server_tool_use": {"web_search_requests": n}``, the count of the
  response's ``web_search_call`` output items (billed per search, not counted in
  ``usage``), only when ``n > 0`` (``responses_stream.with_web_searches``, for plain and
  streamed answers alike).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from sessionwarden.config import MAX_MODEL_NAME, ApiMode
from sessionwarden.domain.calls import RequestShape
from sessionwarden.domain.context.conversation import Conversation, ItemCodec
from sessionwarden.domain.context.transcript import assemble_body
from sessionwarden.upstream.chat_completions import ResponseFacts
from sessionwarden.upstream.errors import MalformedRequest
from sessionwarden.upstream.responses_items import ResponsesItems
from sessionwarden.upstream.responses_stream import ResponsesStream, with_web_searches
from sessionwarden.upstream.sse import DEFAULT_MAX_EVENT_BYTES, SseFramer, sse_data

__all__ = ["Responses", "ResponsesStream", "response_id"]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_items = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_string = msgspec.json.Decoder(str).decode

_ITEMS = ResponsesItems()
_NOT_ITEMS = "'input' must be a string or a list"
#: Counts a cap reads (chat_completions._INTEGER_FIELDS says why a non-integer is refused).
_INTEGER_FIELDS = ("max_output_tokens",)
#: The headers Codex names its conversation in, in the order they are trusted.
_SESSION_HEADERS = ("session-id", "session_id", "thread-id", "conversation_id")
#: Where a response's ``output`` items hold generated text, by item type.
_OUTPUT_KEYS = {"function_call": "arguments", "custom_tool_call": "input"}


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
    """Whether ``context_management`` holds an entry (or is one) of a compacting type."""
    management = fields.get("context_management")
    entries = management if isinstance(management, list) else [management]
    return any(isinstance(entry, dict) and isinstance(entry.get("type"), str)
               and "compact" in entry["type"] for entry in entries)


def _texts(values: object, key: str) -> int:
    """Characters of the ``key`` strings of a list of objects."""
    if not isinstance(values, list):
        return 0
    return sum(len(value[key]) for value in values
               if isinstance(value, dict) and isinstance(value.get(key), str))


def _output_chars(output: object) -> int:
    """Characters generated in a response's ``output``: text, arguments, reasoning summaries."""
    total = 0
    for item in output if isinstance(output, list) else ():
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            total += _texts(item.get("content"), "text") + _texts(item.get("content"),
                                                                  "refusal")
        elif kind == "reasoning":
            total += _texts(item.get("summary"), "text")
        elif isinstance(kind, str) and kind in _OUTPUT_KEYS:
            value = item.get(_OUTPUT_KEYS[kind])
            total += len(value) if isinstance(value, str) else 0
    return total


def response_id(data: bytes | Mapping[str, Any] | None) -> str | None:
    """The id of the response a whole answer or a stream event's data names, else None.

    ``data`` is a response body (``"object": "response"``) or an event's data holding a
    ``response`` (``response.created``, ``response.completed``, …), as bytes or decoded.
    """
    found = _decode_or_none(data) if isinstance(data, bytes) else data
    if not isinstance(found, Mapping):
        return None
    inner = found.get("response")
    if isinstance(inner, Mapping):
        found = inner
    elif found.get("object", "response") != "response" or "type" in found:
        return None  # another object, or an event about something else (an item)
    value = found.get("id")
    return value if isinstance(value, str) and value else None


class Responses:
    """``POST /responses`` in the OpenAI Responses format."""

    api_mode: ApiMode = "codex_responses"
    path = "/responses"
    items: ItemCodec = _ITEMS

    def read_request(self, body: bytes) -> tuple[Conversation, RequestShape]:
        """Split a client's body into its fields and its raw ``input`` items, and their shape.

        A string ``input`` becomes one user message item, so the upstream is sent the
        list form of the same request.

        Raises:
            MalformedRequest: not JSON, not an object, or no model named. An ``input``
                neither a string nor a list, a ``max_output_tokens`` that is not an
                integer, are reported in the shape's ``problems`` for the validation
                stage to decide on.
        """
        try:
            top = _decode_top(body)
            fields = {key: _decode(value) for key, value in top.items() if key != "input"}
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
        items, problems = self._items(top.get("input"))
        problems += _integer_problems(fields)
        return Conversation(fields, items, _ITEMS), RequestShape(
            model=model, stream=fields.get("stream") is True, message_count=len(items),
            problems=problems, native_compaction=_asks_compaction(fields),
        )

    @staticmethod
    def _items(raw: msgspec.Raw | None) -> tuple[list[bytes], tuple[str, ...]]:
        """The ``input`` items' bytes, or the problem with ``input``."""
        if raw is None:
            return [], (_NOT_ITEMS,)
        try:
            # bytes() copies each item once: what governance keeps does not pin the body.
            return [bytes(item) for item in _decode_items(raw)], ()
        except msgspec.ValidationError:
            pass
        try:
            text = _decode_string(raw)
        except msgspec.ValidationError:
            return [], (_NOT_ITEMS,)
        return [_encode({"role": "user", "content": text})], ()

    def auth_headers(self, secret: str) -> dict[str, str]:
        """The header that carries the key upstream."""
        return {"authorization": f"Bearer {secret}"}

    def upstream_fields(self, fields: Mapping[str, Any], model: str, stream: bool
                        ) -> tuple[bytes, bool]:
        """The fields to send (all but ``input``) with the upstream model; never injected.

        A Responses stream carries its usage in its terminal event: nothing is asked on
        the client's behalf, so nothing is kept from it.
        """
        del stream
        upstream = dict(fields)
        upstream["model"] = model
        return _encode(upstream), False

    def upstream_body(self, fields: bytes, items: Sequence[bytes]) -> bytes:
        """The body to send: the upstream ``fields`` with the (governed) ``input`` items."""
        return assemble_body(fields, "input", items)

    def read_response(self, body: bytes) -> ResponseFacts:
        """The usage block (with its web searches) and output of a successful plain response."""
        decoded = _decode_or_none(body)
        if not isinstance(decoded, dict):
            return ResponseFacts(has_output=True)
        output = decoded.get("output")
        return ResponseFacts(with_web_searches(decoded.get("usage"), output), True,
                             _output_chars(output), response_id(decoded) or "")

    def stream_error(self, head: bytes) -> bytes | None:
        """The data of a stream's first data event if it is an error, else None.

        An ``error`` event or a ``response.failed`` first (or a gateway's bare
        ``{"error": …}``): seen before anything was relayed, it is judged as an error
        answer is.
        """
        for event in SseFramer(len(head) + 1).feed(head):
            data = sse_data(event)
            if data is None:
                continue  # a comment, or an event without data
            parsed = _decode_or_none(data)
            if not isinstance(parsed, dict):
                return None
            kind = parsed.get("type")
            if kind in ("error", "response.failed") or (
                    kind is None and parsed.get("error") is not None):
                return data
            return None
        return None

    def stream(self, injected: bool, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
               ) -> ResponsesStream:
        """A reader for one streamed response (``injected`` is never True here)."""
        del injected
        return ResponsesStream(max_event_bytes)

    def session_hint(self, fields: Mapping[str, Any], headers: Mapping[str, str]
                     ) -> str | None:
        """Codex's conversation id, from its headers or ``prompt_cache_key``; else None.

        The ``session-id`` header (Codex 0.171), ``session_id``, ``thread-id`` and
        ``conversation_id`` (older versions), then the ``prompt_cache_key`` field (Codex
        sets it to the same id).
        """
        for name in _SESSION_HEADERS:
            value = headers.get(name)
            if value:
                return value
        key = fields.get("prompt_cache_key")
        return key if isinstance(key, str) and key else None

    def continues(self, fields: Mapping[str, Any]) -> str | None:
        """``previous_response_id``, when the request names one (its history is stored)."""
        found = fields.get("previous_response_id")
        return found if isinstance(found, str) and found else None

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> bytes:
        """``{"error": {"message", "type", "param", "code"}}``, as OpenAI answers."""
        del status
        return _encode({"error": {"message": message, "type": kind, "param": None,
                                  "code": code}})

    def sse_error(self, message: str, kind: str, code: str) -> bytes:
        """The error as an ``event: error``, the SDK's ``ResponseErrorEvent`` and its error.

        The event holds the ``ResponseErrorEvent`` fields plus the ``error`` object OpenAI's
        stream errors carry. The nested object is what makes the SDK raise: its stream
        reader raises :class:`openai.APIError` only on an event whose data has a truthy
        ``error`` (a bare ``ResponseErrorEvent`` is yielded as an ordinary event and the
        client reads a stream that just stops).
        """
        data = {"type": "error", "code": code, "message": message, "param": None,
                "sequence_number": 0,
                "error": {"type": kind, "code": code, "message": message, "param": None}}
        return b"event: error\ndata: " + _encode(data) + b"\n\n"
