"""The fake provider's OpenAI Responses API: ``POST /v1/responses``, ``…/compact``, ``GET …/{id}``.

A Response's ``output`` holds in order:

- a ``reasoning`` item (a summary; ``encrypted_content`` too when ``include`` asks for
  ``reasoning.encrypted_content``) when the request asks for ``reasoning``;
- for an ``agent-N`` model (:mod:`fake_agent`) that made fewer than N function calls since
  the user's last message: a ``function_call`` item calling the first offered tool; else a
  ``message`` whose text is ``ok: <last user text>`` or the options' ``reply``.

Streamed, it is OpenAI's event sequence (``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
…, ``response.function_call_arguments.delta``/``.done``, ``response.output_item.done``,
``response.completed``), each event with its ``sequence_number``.

Every response (but those sent ``store: false``) is stored in the state with its input and
output, so ``previous_response_id`` continues it (its history counts into the input tokens;
an unknown id is a 400 ``previous_response_not_found``) and ``GET /v1/responses/{id}`` finds
it. ``/v1/responses/compact`` answers the input's user messages and one ``compaction`` item.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
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


def _items(value: Any) -> list[dict[str, Any]]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": value}]}]
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def _kind(item: dict[str, Any]) -> str:
    return str(item.get("type") or ("message" if "role" in item else ""))


def _is_user(item: dict[str, Any]) -> bool:
    """A user's message, not the daemon's runtime notice (a note, not a new task)."""
    return _kind(item) == "message" and item.get("role") == "user" and not \
        _text(item.get("content")).startswith(NOTICE_PREFIX)


def _output(body: dict[str, Any], opts: FakeOptions,
            history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer's output items."""
    at = max((i for i, item in enumerate(history) if _is_user(item)), default=-1)
    prompt = _text(history[at].get("content")) if at >= 0 else ""
    calls = sum(1 for item in history[at + 1:] if _kind(item) == "function_call")
    output: list[dict[str, Any]] = []
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") != "none":
        text = f"**Answering**\n\nThe user asked: {prompt[:40]}"
        item = {"type": "reasoning", "id": new_id("rs_"),
                "summary": [{"type": "summary_text", "text": text}]}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            item["encrypted_content"] = opaque("reasoning", [text, history[-1:]])
        output.append(item)
    rounds = agent_rounds(body.get("model"))
    tool = (pick_tool(body.get("tools"), opts.tool_name)
            if rounds is not None and tools_allowed(body) else None)
    if tool is not None and rounds is not None and calls < rounds:
        output.append({"type": "function_call", "id": new_id("fc_"),
                       "call_id": new_id("call_"), "name": tool["name"],
                       "arguments": json.dumps(
                           tool_input(tool.get("parameters"), opts.tool_command)),
                       "status": "completed"})
        return output
    text = opts.reply if opts.reply is not None else "ok: " + prompt[:40]
    output.append({"type": "message", "id": new_id("msg_"), "status": "completed",
                   "role": "assistant", "content": [
                       {"type": "output_text", "text": text, "annotations": [],
                        "logprobs": []}]})
    return output


def _response(body: dict[str, Any], rid: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None) -> dict[str, Any]:
    """A completed Response object echoing the request's settings."""
    reasoning = body.get("reasoning")
    return {
        "id": rid, "object": "response", "created_at": int(time.time()),
        "status": "completed", "background": False, "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model", "fake-model"), "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": reasoning if isinstance(reasoning, dict)
        else {"effort": None, "summary": None},
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation", "disabled"),
        "usage": usage, "user": None, "metadata": body.get("metadata") or {},
    }


def _item_events(index: int, item: dict[str, Any], opts: FakeOptions) -> list[dict[str, Any]]:
    """The events that stream one output item, from ``output_item.added`` to ``.done``."""
    at = {"item_id": item["id"], "output_index": index}
    events: list[dict[str, Any]]
    if item["type"] == "reasoning":
        added = {k: v for k, v in item.items() if k != "encrypted_content"} | {"summary": []}
        events = [{"type": "response.output_item.added", "output_index": index, "item": added}]
        for n, part in enumerate(item["summary"]):
            text, where = part["text"], {**at, "summary_index": n}
            events += [{"type": "response.reasoning_summary_part.added", **where,
                        "part": {"type": "summary_text", "text": ""}},
                       *({"type": "response.reasoning_summary_text.delta", **where, "delta": p}
                         for p in _split(text, 2)),
                       {"type": "response.reasoning_summary_text.done", **where, "text": text},
                       {"type": "response.reasoning_summary_part.done", **where, "part": part}]
    elif item["type"] == "function_call":
        args = item["arguments"]
        events = [{"type": "response.output_item.added", "output_index": index,
                   "item": {**item, "arguments": "", "status": "in_progress"}},
                  *({"type": "response.function_call_arguments.delta", **at, "delta": p}
                    for p in _split(args, 2)),
                  {"type": "response.function_call_arguments.done", **at,
                   "name": item["name"], "arguments": args}]
    else:
        part = item["content"][0]
        where = {**at, "content_index": 0}
        events = [{"type": "response.output_item.added", "output_index": index,
                   "item": {**item, "content": [], "status": "in_progress"}},
                  {"type": "response.content_part.added", **where,
                   "part": {**part, "text": ""}},
                  *({"type": "response.output_text.delta", **where, "delta": p, "logprobs": []}
                    for p in _split(part["text"], opts.stream_chunks)),
                  {"type": "response.output_text.done", **where, "text": part["text"],
                   "logprobs": []},
                  {"type": "response.content_part.done", **where, "part": part}]
    return [*events, {"type": "response.output_item.done", "output_index": index, "item": item}]


def _stream(resp: dict[str, Any], opts: FakeOptions) -> list[str]:
    """The SSE events of a streamed Response ``resp``, numbered in order."""
    begun = {**resp, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": begun},
                                    {"type": "response.in_progress", "response": begun}]
    for index, item in enumerate(resp["output"]):
        events += _item_events(index, item, opts)
    events.append({"type": "response.completed", "response": resp})
    if opts.stream_error_at is not None:
        error = {"code": opts.error_code or "server_error",
                 "message": opts.error_message or "fake provider stream error"}
        events = [*events[:opts.stream_error_at], {"type": "response.failed", "response": {
            **begun, "status": "failed", "error": error}}]
    return [sse_event(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def _openai_error(message: str, code: str, param: str | None, status: int = 400) -> Response:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code}}, status_code=status)


async def _history(request: Request, st: FakeProviderState) -> tuple[
        dict[str, Any], dict[str, str], FakeOptions, list[dict[str, Any]] | Response]:
    """Parse a request; its history (stored items plus input), or the error answer it gets."""
    body, headers, opts = await _prepare(request, st)
    if fails_now(st, opts, headers):
        st.count("errors")
        return body, headers, opts, _error(opts, headers, anthropic=False)
    prior: list[dict[str, Any]] = []
    if (prev := body.get("previous_response_id")) is not None:
        entry = st.stored_response(str(prev))
        if entry is None:
            return body, headers, opts, _openai_error(
                f"Previous response with id '{prev}' not found.",
                "previous_response_not_found", "previous_response_id")
        prior = entry["history"]
    history = prior + _items(body.get("input"))
    chars = sum(len(_text(item.get("content"))) for item in history)
    if opts.max_prompt_chars is not None and chars > opts.max_prompt_chars:
        st.count("too_long")
        return body, headers, opts, _openai_error(
            "Your input exceeds the context window of this model. "
            "Please adjust your input and try again.", "context_length_exceeded", "input")
    return body, headers, opts, history


def _usage(total: int, cached: int, out: int, reasoning: int) -> dict[str, Any]:
    return {"input_tokens": total,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": total + out}


def routes(st: FakeProviderState, sse_response: SseResponse) -> list[Route]:
    """The Responses API routes, recording into ``st``."""

    async def responses(request: Request) -> Response:
        body, headers, opts, history = await _history(request, st)
        if isinstance(history, Response):
            return history
        if opts.redirect:
            return Response(status_code=307, headers={"location": opts.redirect})
        output = _output(body, opts, history)
        head = {"instructions": body.get("instructions"), "tools": body.get("tools")}
        total, cached = cached_prefix(st, body.get("model"), head, history)
        reasoning = sum(size(i["summary"]) for i in output if i["type"] == "reasoning")
        out = 1 + reasoning + sum(size(i.get("content") or i.get("arguments"))
                                  for i in output if i["type"] != "reasoning")
        usage = opts.pick_usage(_usage(total, cached, out, reasoning))
        rid = new_id("resp_")
        resp = _response(body, rid, output, usage)
        if resp["store"]:
            st.store_response(rid, {"response": resp, "history": history + output})
        hdrs = _ratelimit_headers(st, total) | dict(opts.headers or {})
        if not body.get("stream"):
            return json_answer(resp, opts, hdrs)
        st.count("streams")
        events = _stream(resp, opts)
        opts = breaks_now(st, opts, headers)
        if opts.gzip:
            hdrs["content-encoding"] = "gzip"
        return sse_response(events, replace(opts, stream_error_at=None), hdrs)

    async def compact(request: Request) -> Response:
        body, _headers, opts, history = await _history(request, st)
        if isinstance(history, Response):
            return history
        kept = [item for item in history if _is_user(item)]
        item = {"type": "compaction", "id": new_id("cmp_"),
                "encrypted_content": opaque("compaction", history)}
        head = {"instructions": body.get("instructions"), "tools": body.get("tools")}
        total = max(1, size(head) + sum(size(i) for i in history))
        usage = opts.pick_usage(_usage(total, 0, size(item), 0))
        return json_answer({"id": new_id("resp_"), "object": "response.compaction",
                            "created_at": int(time.time()), "output": [*kept, item],
                            "usage": usage}, opts, _ratelimit_headers(st, total))

    async def retrieve(request: Request) -> Response:
        await _prepare(request, st)
        rid = request.path_params["response_id"]
        entry = st.stored_response(rid)
        if entry is None:
            return _openai_error(f"No response found with id '{rid}'.", "not_found", None,
                                 status=404)
        return JSONResponse(entry["response"])

    return [Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/responses/compact", compact, methods=["POST"]),
            Route("/v1/responses/{response_id}", retrieve, methods=["GET"])]
