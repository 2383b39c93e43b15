"""The offline simulated provider ``sim``: OpenAI chat completions answered in-process.

No socket, no key, no network: :meth:`UpstreamClient.post
<sessionwarden.upstream.client.UpstreamClient.post>` hands a simulated provider's request
to :func:`simulate`, which returns a :class:`SimResponse` — the same small surface as
aiohttp's response (:class:`~sessionwarden.upstream.client.UpstreamResponse`) — so a call
to ``sim`` goes through admission, relay and completion like any other and is recorded.

Rules:

The answer's content is deterministic for a request: it is seeded by the body without
``stream`` and ``stream_options``, so a streamed call and a plain one say the same. Its
``id`` (and ``x-request-id``) is not: each answer gets its own, random, as a provider's
does, so a framework that merges answers by id never merges two calls. Its usage
block is plausible: ``prompt_tokens`` estimates the request's text at four characters a
token (plus three per message), ``completion_tokens`` counts the pieces generated, and a
stream carries it in a last chunk (``choices: []``) when ``stream_options.include_usage``
is set, as OpenAI does. The model (the part after ``sim/``) chooses the behaviour:

=================  ====================================================================
``chat``, or any   a text answer; offered ``tools`` are ignored
other name
``agent``          plays an agent's turns: while the request offers ``tools`` and fewer
``agent-N``        than N (default 1) tool-calling turns follow the last user message,
                   it calls one tool (``finish_reason: tool_calls``, JSON arguments
                   built from its schema); then a final text answer
``error-NNN``      answers HTTP NNN (400-599) with an OpenAI error body
``priced``,        plays ``chat``, or ``<model>``; the only ``sim`` models that cost
``priced-<model>`` something (``config.SIM_PRICE``: the daemon prices them, this module
                   only plays them)
=================  ====================================================================

``max_tokens`` / ``max_completion_tokens`` cut a text answer (``finish_reason: length``).
A text answer follows ``response_format``: ``json_object`` gives a JSON object,
``json_schema`` JSON valid against the schema, streamed or not; a malformed one is a 400.
The text itself lives in :mod:`sessionwarden.upstream.sim_text`.
"""

import asyncio
import hashlib
import re
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
from sessionwarden.config import SIM_PRICED_MODEL
from sessionwarden.domain.usage.canonical import text_chars
from sessionwarden.upstream.sim_text import Turn, answer_format, plan_turn

__all__ = ["SIM_MODELS", "SimBody", "SimResponse", "estimate_prompt_tokens", "simulate"]

#: The models ``GET /v1/models`` lists for a simulated provider (any name is accepted).
SIM_MODELS = ("chat", "agent", "agent-3", "priced", "error-429")

_encode = msgspec.json.Encoder(order="sorted").encode
_decode = msgspec.json.Decoder().decode
_ERROR_MODEL = re.compile(r"error-([45]\d\d)")
_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"


class SimBody:
    """A simulated response body, read whole or event by event."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[bytes]) -> None:
        """The body as the chunks a stream would deliver."""
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Yield the body's chunks, letting the loop run between them as a socket would."""
        for chunk in self._chunks:
            yield chunk
            await asyncio.sleep(0)


class SimResponse:
    """What :func:`simulate` answers: status, headers and body, like an aiohttp response."""

    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], chunks: list[bytes]) -> None:
        """A response with ``status``, ``headers`` and a body made of ``chunks``."""
        self.status = status
        self.headers: Mapping[str, str] = headers
        self.content = SimBody(chunks)

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join(self.content._chunks)

    def release(self) -> None:
        """Nothing to give back: there is no connection."""

    def close(self) -> None:
        """Nothing to drop: there is no connection."""


def _error(status: int, message: str, kind: str, code: str | None = None,
           param: str | None = None) -> SimResponse:
    body = _encode({"error": {"message": message, "type": kind, "param": param, "code": code}})
    headers = {"content-type": _JSON, "x-request-id": "req_sim_" + secrets.token_hex(8)}
    if status == 429:
        headers["retry-after"] = "1"
    return SimResponse(status, headers, [body])


def estimate_prompt_tokens(request: Mapping[str, Any]) -> int:
    """The prompt's tokens as a tokenizer-free estimate: 4 characters a token, 3 a message."""
    messages = request.get("messages")
    count = len(messages) if isinstance(messages, list) else 0
    chars = text_chars(messages)
    tools = request.get("tools")
    if tools is not None:
        chars += len(_encode(tools))
    return (chars + 3) // 4 + 3 * count + 3


def simulate(path: str, body: bytes) -> SimResponse:
    """Answer one request to the simulated provider (``path`` relative to its base URL)."""
    if path != "/chat/completions":
        return _error(404, f"the simulated provider does not serve {path}", "not_found_error")
    try:
        request = _decode(body)
    except msgspec.DecodeError:
        return _error(400, "malformed JSON body", "invalid_request_error")
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return _error(400, "'messages' must be a list", "invalid_request_error")
    model = str(request.get("model", ""))
    priced = SIM_PRICED_MODEL.fullmatch(model)
    plays = (priced.group("plays") or "chat") if priced else model
    failing = _ERROR_MODEL.fullmatch(plays)
    if failing:
        status = int(failing.group(1))
        return _error(status, f"simulated error {status} (model {model!r})",
                      "rate_limit_error" if status == 429 else "api_error", f"sim_{status}")
    try:
        form = answer_format(request)
    except ValueError as exc:
        return _error(400, str(exc), "invalid_request_error", param="response_format")
    seed_of = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    seed = hashlib.sha256(_encode(seed_of)).digest()
    turn = plan_turn(request, plays, seed, form)
    prompt = estimate_prompt_tokens(request)
    usage = {
        "prompt_tokens": prompt, "completion_tokens": turn.tokens,
        "total_tokens": prompt + turn.tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }
    # Random, not seeded: two calls alike are still two answers to a client that keys
    # answers by id (the content is what stays the same).
    answer_id = secrets.token_hex(12)
    head = {"id": "chatcmpl-sim" + answer_id, "created": int(time.time()),
            "model": model, "system_fingerprint": "fp_sim"}
    headers = {"x-request-id": "req_sim_" + answer_id[:16]}
    if request.get("stream") is True:
        options = request.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        frames = _stream_frames(head, turn, usage if with_usage else None)
        return SimResponse(200, {"content-type": _SSE, **headers}, frames)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
    if turn.tool_calls:
        message["tool_calls"] = turn.tool_calls
    answer = {**head, "object": "chat.completion",
              "choices": [{"index": 0, "message": message, "logprobs": None,
                           "finish_reason": turn.finish_reason}],
              "usage": usage, "service_tier": "default"}
    return SimResponse(200, {"content-type": _JSON, **headers}, [_encode(answer)])


def _stream_frames(head: Mapping[str, Any], turn: Turn, usage: object) -> list[bytes]:
    """The server-sent events of ``turn``: role, the pieces, the finish, usage, [DONE]."""
    extra = {"usage": None} if usage is not None else {}

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        body = {**head, "object": "chat.completion.chunk", "service_tier": "default",
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish}], **extra}
        return b"data: " + _encode(body) + b"\n\n"

    frames: list[bytes] = []
    if turn.tool_calls:
        frames.append(chunk({"role": "assistant", "content": None, "refusal": None}))
        for index, call in enumerate(turn.tool_calls):
            function = call["function"]
            frames.append(chunk({"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""}}]}))
            arguments = function["arguments"]
            for start in range(0, len(arguments), 16):
                frames.append(chunk({"tool_calls": [{
                    "index": index, "function": {"arguments": arguments[start:start + 16]}}]}))
    else:
        frames.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        frames += [chunk({"content": piece}) for piece in turn.pieces]
    frames.append(chunk({}, turn.finish_reason))
    if usage is not None:
        frames.append(b"data: " + _encode({**head, "object": "chat.completion.chunk",
                                           "service_tier": "default", "choices": [],
                                           "usage": usage}) + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return frames
