"""The fake provider's Anthropic Messages API: ``POST /v1/messages`` and ``…/count_tokens``.

A Messages answer, plain or streamed with Anthropic's event sequence (``message_start``,
``content_block_start``, ``ping``, ``content_block_delta`` with ``text_delta``,
``input_json_delta``, ``thinking_delta``, ``signature_delta`` or ``compaction_delta``,
``content_block_stop``, ``message_delta``, ``message_stop``), holds in order:

- a ``compaction`` block when the options say ``compaction: true``;
- a ``thinking`` block with a ``signature`` when the request enables ``thinking``
  (``{"type": "enabled" | "adaptive", …}``);
- for an ``agent-N`` model (:mod:`fake_agent`) that made fewer than N tool-using turns since
  the user's last prompt (a user message holding no ``tool_result``): a ``tool_use`` block
  calling the first offered tool (``stop_reason: "tool_use"``); else a text block,
  ``ok: <last prompt>`` or the options' ``reply`` (``stop_reason: "end_turn"``).

Usage counts tools, system and messages (:func:`fake_agent.size`); a prefix seen before is
read from the cache; the rest up to the last ``cache_control`` marker is written, split into
5-minute and 1-hour writes by each marker's ``ttl``. Errors have Anthropic's shape, every
answer a ``request-id`` header; the key for ``fail_first`` and ``by_key`` is ``x-api-key``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.fake_agent import (
    NOTICE_PREFIX,
    SseResponse,
    agent_rounds,
    breaks_now,
    cached_prefix,
    fails_now,
    json_answer,
    new_id,
    opaque,
    pick_tool,
    size,
    sse_event,
    tool_input,
    tools_allowed,
)
from tests.support.fake_provider import (
    FakeOptions,
    FakeProviderState,
    _error,
    _prepare,
    _ratelimit_headers,
    _split,
    _text,
)


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as a list of blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _is_prompt(msg: dict[str, Any]) -> bool:
    """Whether ``msg`` is the user's prompt: a user message holding no tool_result (nor
    only the daemon's runtime notice, which a model reads as a note, not a new task)."""
    return msg.get("role") == "user" and not any(
        b.get("type") == "tool_result" for b in _blocks(msg.get("content"))) and not \
        _text(msg.get("content")).startswith(NOTICE_PREFIX)


def _turn(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The user's last prompt's text and the tool-using turns the assistant made since."""
    at = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=-1)
    prompt = _text(messages[at].get("content")) if at >= 0 else ""
    turns = sum(1 for m in messages[at + 1:] if m.get("role") == "assistant" and any(
        b.get("type") == "tool_use" for b in _blocks(m.get("content"))))
    return prompt, turns


def _thinks(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _content(body: dict[str, Any], opts: FakeOptions) -> tuple[list[dict[str, Any]], str]:
    """The answer's content blocks and its stop reason."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompt, turns = _turn(messages)
    blocks: list[dict[str, Any]] = []
    if opts.compaction:
        summary = f"Summary of {len(messages)} messages; the user asked: {prompt[:40]}"
        blocks.append({"type": "compaction", "content": summary})
    if _thinks(body):
        thought = f"The user asked: {prompt[:40]}. Answer briefly."
        blocks.append({"type": "thinking", "thinking": thought,
                       "signature": opaque("signature", [thought, messages[-1:]])})
    rounds = agent_rounds(body.get("model"))
    tool = (pick_tool(body.get("tools"), opts.tool_name)
            if rounds is not None and tools_allowed(body) else None)
    if tool is not None and rounds is not None and turns < rounds:
        blocks.append({"type": "tool_use", "id": new_id("toolu_"), "name": tool["name"],
                       "input": tool_input(tool.get("input_schema"),
                                                   opts.tool_command)})
        return blocks, "tool_use"
    text = opts.reply if opts.reply is not None else "ok: " + prompt[:40]
    blocks.append({"type": "text", "text": text})
    return blocks, "end_turn"


def _ttl(obj: Any) -> str | None:
    """The ``ttl`` of the last ``cache_control`` marker in ``obj`` (``5m`` by default)."""
    found: str | None = None
    if isinstance(obj, dict):
        marker = obj.get("cache_control")
        if isinstance(marker, dict):
            found = str(marker.get("ttl") or "5m")
        for key, value in obj.items():
            if key != "cache_control":
                found = _ttl(value) or found
    elif isinstance(obj, list):
        for value in obj:
            found = _ttl(value) or found
    return found


def _usage(st: FakeProviderState, body: dict[str, Any], out: int) -> dict[str, Any]:
    """Usage for a request: cache read by prefix, cache writes up to the last marker."""
    head = {"tools": body.get("tools"), "system": body.get("system")}
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    total, cached = cached_prefix(st, body.get("model"), head, messages)
    marks, pos = [], size(head)
    if (ttl := _ttl(head)) is not None:
        marks.append((pos, ttl))
    for msg in messages:
        pos += size(msg)
        if (ttl := _ttl(msg)) is not None:
            marks.append((pos, ttl))
    writes, start = {"5m": 0, "1h": 0}, cached
    for end, ttl in marks:
        if end > start:
            writes["1h" if ttl == "1h" else "5m"] += end - start
            start = end
    written = writes["5m"] + writes["1h"]
    return {"input_tokens": max(0, total - cached - written),
            "cache_creation_input_tokens": written, "cache_read_input_tokens": cached,
            "cache_creation": {"ephemeral_5m_input_tokens": writes["5m"],
                               "ephemeral_1h_input_tokens": writes["1h"]},
            "output_tokens": out, "service_tier": "standard"}


def _rejection(st: FakeProviderState, body: dict[str, Any], opts: FakeOptions,
               headers: dict[str, str], rid: str) -> Response | None:
    """The error answer this request gets (``status``, ``max_prompt_chars``), if any."""
    if fails_now(st, opts, headers):
        st.count("errors")
        answer = _error(opts, headers, anthropic=True)
        answer.headers["request-id"] = rid
        return answer
    if opts.max_prompt_chars is not None:
        chars = sum(len(_text(m.get("content"))) for m in body.get("messages") or []
                    if isinstance(m, dict))
        if chars > opts.max_prompt_chars:
            st.count("too_long")
            message = f"prompt is too long: {chars // 4} tokens > " \
                      f"{opts.max_prompt_chars // 4} maximum"
            error = {"type": "error", "error": {"type": "invalid_request_error",
                                                "message": message}}
            return json_answer(error, opts, {"request-id": rid}, status=400)
    return None


def _block_events(index: int, block: dict[str, Any], opts: FakeOptions) -> list[str]:
    """``content_block_start``, its deltas and ``content_block_stop`` for one block."""
    kind = block["type"]
    start: dict[str, Any]
    deltas: list[dict[str, Any]]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p}
                  for p in _split(block["thinking"], 2)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {**block, "input": {}}
        args = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": p}
                  for p in ["", *_split(args, 2)]]
    elif kind == "compaction":
        start = {"type": "compaction", "content": None}
        deltas = [{"type": "compaction_delta", "content": block["content"]}]
    else:
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p}
                  for p in _split(block["text"], opts.stream_chunks)]
    return [sse_event("content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": start}),
            *(sse_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": d}) for d in deltas),
            sse_event("content_block_stop", {"type": "content_block_stop", "index": index})]


def _stream(msg: dict[str, Any], usage: dict[str, Any] | None, opts: FakeOptions) -> list[str]:
    """The SSE events of a streamed answer ``msg`` (its content, stop reason, usage)."""
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None}
    final: dict[str, Any] = {}
    if usage is not None and opts.usage == "custom":
        start["usage"] = final["usage"] = usage
    elif usage is not None:
        start["usage"] = {**usage, "output_tokens": 1}
        final["usage"] = {"output_tokens": usage["output_tokens"]}
    events = [sse_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(msg["content"]):
        blocks = _block_events(index, block, opts)
        if index == 0:
            blocks.insert(1, sse_event("ping", {"type": "ping"}))
        events += blocks
    events += [sse_event("message_delta", {
                   "type": "message_delta", **final,
                   "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None}}),
               sse_event("message_stop", {"type": "message_stop"})]
    if opts.stream_error_at is not None:
        error = {"type": opts.error_code or "overloaded_error",
                 "message": opts.error_message or "Overloaded"}
        events = [*events[:opts.stream_error_at],
                  sse_event("error", {"type": "error", "error": error})]
    return events


def routes(st: FakeProviderState, sse_response: SseResponse) -> list[Route]:
    """The Messages API routes, recording into ``st``."""

    async def messages(request: Request) -> Response:
        body, headers, opts = await _prepare(request, st)
        rid = new_id("req_")
        rejection = _rejection(st, body, opts, headers, rid)
        if rejection is not None:
            return rejection
        if opts.redirect:
            return Response(status_code=307, headers={"location": opts.redirect})
        blocks, stop = _content(body, opts)
        out = 1 + sum(size(b.get("text") or b.get("thinking") or b.get("input")
                           or b.get("content")) for b in blocks)
        usage = opts.pick_usage(_usage(st, body, out))
        msg: dict[str, Any] = {
            "id": new_id("msg_"), "type": "message", "role": "assistant",
            "model": body.get("model", "fake-model"), "content": blocks,
            "stop_reason": stop, "stop_sequence": None}
        if usage is not None:
            msg["usage"] = usage
        hdrs = _ratelimit_headers(st, usage["input_tokens"] if usage else 0) | {
            "request-id": rid} | dict(opts.headers or {})
        if not body.get("stream"):
            return json_answer(msg, opts, hdrs)
        st.count("streams")
        events = _stream(msg, usage, opts)
        opts = breaks_now(st, opts, headers)
        if opts.gzip:
            hdrs["content-encoding"] = "gzip"
        return sse_response(events, replace(opts, stream_error_at=None), hdrs)

    async def count_tokens(request: Request) -> Response:
        body, headers, opts = await _prepare(request, st)
        rid = new_id("req_")
        rejection = _rejection(st, body, opts, headers, rid)
        if rejection is not None:
            return rejection
        head = {"tools": body.get("tools"), "system": body.get("system")}
        total = max(1, size(head) + sum(size(m) for m in body.get("messages") or []))
        return json_answer({"input_tokens": total}, opts, {"request-id": rid})

    return [Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"])]
