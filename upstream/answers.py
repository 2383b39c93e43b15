"""The daemon's own answers: a whole, ordinary model answer in each wire format.

When a turn has spent its iteration budget (or a guardrail stops it), the daemon answers
the call itself, without sending it: a normal answer whose text says why, with no tool
calls and an ordinary stop, so an agent's loop ends its turn cleanly instead of
crashing or retrying. Plain or streamed as the client asked, in the client's format.

Rules:

- The answer is what a provider's would be, field for field where the SDKs read them:
  chat completions (``chat.completion``, streamed as chunks and ``[DONE]``), Anthropic
  Messages (``message``, streamed as ``message_start`` … ``message_stop``), Responses
  (``response``, streamed as ``response.created`` … ``response.completed`` with
  sequence numbers).
- Usage is all zeros: nothing was sent and nothing is billed.
- Ids are the daemon's (``…sw_<call id>``): a Responses client that continues such an
  answer with ``previous_response_id`` gets the provider's "not found", since the
  provider never saw it.
"""

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["LocalAnswer", "local_answer"]

_encode = msgspec.json.Encoder().encode


class LocalAnswer(msgspec.Struct, frozen=True):
    """An answer of the daemon's: its body and content type."""

    body: bytes
    content_type: bytes


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + _encode(data) + b"\n\n"


def _chat(call_id: str, model: str, text: str, created: int, stream: bool) -> LocalAnswer:
    ident = f"chatcmpl-sw_{call_id}"
    if not stream:
        return LocalAnswer(_encode({
            "id": ident, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }), b"application/json")
    base = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                              "logprobs": None, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                              "finish_reason": "stop"}]},
    ]
    body = b"".join(_sse(None, chunk) for chunk in chunks) + b"data: [DONE]\n\n"
    return LocalAnswer(body, b"text/event-stream")


def _messages(call_id: str, model: str, text: str, created: int, stream: bool) -> LocalAnswer:
    del created  # a Messages answer carries no time
    usage = {"input_tokens": 0, "output_tokens": 0}
    message = {"id": f"msg_sw_{call_id}", "type": "message", "role": "assistant",
               "model": model, "content": [{"type": "text", "text": text}],
               "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}
    if not stream:
        return LocalAnswer(_encode(message), b"application/json")
    body = b"".join([
        _sse("message_start", {"type": "message_start", "message": {
            **message, "content": [], "stop_reason": None}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": text}}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 0}}),
        _sse("message_stop", {"type": "message_stop"}),
    ])
    return LocalAnswer(body, b"text/event-stream")


def _responses(call_id: str, model: str, text: str, created: int, stream: bool
               ) -> LocalAnswer:
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"type": "message", "id": f"msg_sw_{call_id}", "status": "completed",
            "role": "assistant", "content": [part]}
    response: dict[str, Any] = {
        "id": f"resp_sw_{call_id}", "object": "response", "created_at": created,
        "status": "completed", "model": model, "output": [item], "error": None,
        "incomplete_details": None, "instructions": None, "metadata": {},
        "parallel_tool_calls": True, "temperature": None, "top_p": None,
        "tool_choice": "none", "tools": [],
        "usage": {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 0},
    }
    if not stream:
        return LocalAnswer(_encode(response), b"application/json")
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": {
            **item, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {"output_index": 0, "content_index": 0,
                                         "item_id": item["id"], "part": {**part, "text": ""}}),
        ("response.output_text.delta", {"output_index": 0, "content_index": 0,
                                        "item_id": item["id"], "delta": text}),
        ("response.output_text.done", {"output_index": 0, "content_index": 0,
                                       "item_id": item["id"], "text": text}),
        ("response.content_part.done", {"output_index": 0, "content_index": 0,
                                        "item_id": item["id"], "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": response}),
    ]
    body = b"".join(_sse(kind, {"type": kind, "sequence_number": n, **data})
                    for n, (kind, data) in enumerate(events))
    return LocalAnswer(body, b"text/event-stream")


_FORMATS: dict[str, Callable[[str, str, str, int, bool], LocalAnswer]] = {
    "chat_completions": _chat,
    "anthropic_messages": _messages,
    "codex_responses": _responses,
}


def local_answer(api_mode: str, call_id: str, model: str, text: str, *, created: int,
                 stream: bool) -> LocalAnswer:
    """The daemon's answer ``text`` to call ``call_id`` in ``api_mode``'s format.

    ``created`` is the answer's time (Unix seconds, from the daemon's clock); ``model``
    the model the client named. Raises KeyError for a format without an adapter.
    """
    return _FORMATS[api_mode](call_id, model, text, created, stream)
