"""Fake LLM provider used as the upstream in sessionwarden integration tests and benchmarks.

Speaks the OpenAI chat-completions wire format (``POST /v1/chat/completions``, plain and
SSE streaming, ``GET /v1/models``), the Anthropic Messages API (``POST /v1/messages`` and
``/v1/messages/count_tokens``: :mod:`fake_anthropic`) and the OpenAI Responses API
(``POST /v1/responses``, ``/v1/responses/compact``, ``GET /v1/responses/{id}``:
:mod:`fake_responses`), and serves an OpenRouter-style price listing (``GET /v1/pricing``,
from the state). Responses are deterministic; on the Messages and Responses routes a model
named ``…agent-N…`` acts as a scripted tool-using agent (:mod:`fake_agent`). Each request
can steer the behaviour with a ``"fake"`` object in the JSON body or with ``x-fake-*`` headers
(the header wins), e.g. ``x-fake-status: 429`` or ``x-fake-delay-ms: 50``; see
:class:`FakeOptions`. Every request is recorded in a
:class:`FakeProviderState` so tests can assert what the proxy forwarded.

Run in-process with :class:`FakeProviderServer`, or as a script for benchmarks::

    python tests/support/fake_provider.py --port 8123   # prints "listening http://127.0.0.1:8123/v1"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import importlib.util
import json
import socket
import sys
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "overloaded"),
}
_ANTHROPIC_ERRORS: dict[int, str] = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error",
}


@dataclass(frozen=True)
class FakeOptions:
    """Per-request behaviour controls, from body ``"fake"`` and ``x-fake-*`` headers."""

    delay_ms: int = 0  # sleep before responding
    chunk_delay_ms: int = 0  # sleep between stream events
    status: int | None = None  # answer with this HTTP error status
    echo_key: bool = False  # error message echoes the Authorization header
    usage: str = "normal"  # "normal" | "missing" | "custom" (then usage_block verbatim)
    usage_block: dict[str, Any] | None = None
    stream_chunks: int = 3  # number of content delta chunks
    hang_after_chunks: int | None = None  # stop after N SSE events, keep the connection open
    echo_key_ok: bool = False  # a 200 answer's text holds the key, its first char \u-escaped
    echo_key_header: bool = False  # response headers hold the key (raw and as a Bearer)
    gzip: bool = False  # gzip the response whatever Accept-Encoding says
    redirect: str | None = None  # answer 307 with this Location instead
    end_after_chunks: int | None = None  # end the stream cleanly after N events (no [DONE])
    break_after_chunks: int | None = None  # break the connection after N events
    junk_bytes: int = 0  # a stream of this many bytes with no event separator at all
    reply: str | None = None  # the answer's text instead of "ok: <last user text>"
    raw_body: str | None = None  # a 200 answer's body verbatim (a malformed one, say)
    headers: dict[str, str] | None = None  # extra headers on a chat answer (credits, say)
    error_message: str | None = None  # an error answer's message instead of the default
    error_code: str | None = None  # an error answer's code instead of the default
    fail_first: int = 0  # with status or break_after_chunks: only this key's first N fail
    max_prompt_chars: int | None = None  # a longer prompt gets OpenAI's context-length 400
    stream_error_at: int | None = None  # a 200 stream ends with an error event after N events
    stream_comments: int = 0  # keep-alive comments (": PROCESSING") before a stream's events
    # A scripted agent: while the request offers tools, the k-th answer to a conversation
    # (known by its first user message) calls the first tool with {"path": tool_paths[k]};
    # then a text answer. Plain (not streamed) answers only.
    tool_paths: list[str] | None = None
    # Or the k-th answer's arguments whole; a ``"tool"`` key in one names the offered tool
    # it calls (default: the first).
    tool_arguments: list[dict[str, Any]] | None = None
    ignore_tool_choice: bool = False  # a model that calls tools though told not to
    # Messages/Responses only: the offered tool an ``agent`` model calls (default: the first).
    tool_name: str | None = None
    tool_command: str | None = None  # the shell command an ``agent`` model's tool call runs
    compaction: bool = False  # Messages only: the answer starts with a ``compaction`` block

    @classmethod
    def parse(cls, body: dict[str, Any], headers: dict[str, str],
              defaults: dict[str, Any] | None = None) -> FakeOptions:
        """Merge ``defaults``, the body ``fake`` object and ``x-fake-*`` headers, later winning.

        Header values are JSON-decoded when possible.
        """
        raw = body.get("fake")
        opts: dict[str, Any] = dict(defaults or {})
        opts.update(raw if isinstance(raw, dict) else {})
        for f in fields(cls):
            value = headers.get("x-fake-" + f.name.replace("_", "-"))
            if value is not None:
                try:
                    opts[f.name] = json.loads(value)
                except ValueError:
                    opts[f.name] = value
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in opts.items() if k in known})

    def pick_usage(self, normal: dict[str, Any]) -> dict[str, Any] | None:
        """Return the usage block to send: ``normal``, None ("missing") or ``usage_block``."""
        if self.usage == "missing":
            return None
        return self.usage_block if self.usage == "custom" else normal


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received by the fake provider."""

    method: str
    path: str
    headers: dict[str, str]  # lowercase keys
    body: Any  # parsed JSON body, or None
    raw: bytes = b""  # the body's bytes as received
    query: str = ""  # the query string as received (Claude Code sends ``?beta=true``)


@dataclass
class FakeProviderState:
    """Thread-safe record of the requests received, plus counters (``total``, per path, errors).

    ``by_model`` steers requests the test cannot add a ``fake`` object or header to (the
    daemon's own side calls): options, as in :class:`FakeOptions`, for every request
    naming that model (the body's ``fake`` and the headers still win).
    """

    requests: list[RecordedRequest] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    by_model: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Options for every request sent with this API key (``Authorization: Bearer <key>``),
    #: under the body's and the headers': the daemon's choice of key steers the answer.
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What ``GET /v1/key`` (OpenRouter's key endpoint) answers, and with which status.
    key_answer: Any = None
    key_status: int = 200
    #: ``GET /v1/pricing``: the price listing's bytes (None: 404), its HTTP status, and
    #: whether it is sent in chunks without a Content-Length.
    listing: bytes | None = None
    listing_status: int = 200
    listing_chunked: bool = False
    #: Tool-calling answers given so far, by conversation (``FakeOptions.tool_paths``).
    rounds: Counter[str] = field(default_factory=Counter)
    #: Prompt-prefix hashes seen (Messages/Responses): a later request sharing one reads
    #: that prefix from the "cache".
    prefixes: set[str] = field(default_factory=set)
    #: Responses API: stored responses by id, each ``{"response": <object>, "history":
    #: [<input and output items so far>]}`` (``previous_response_id`` continues one).
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, request: RecordedRequest) -> None:
        """Append a request and bump its counters."""
        with self._lock:
            self.requests.append(request)
            self.counters["total"] += 1
            self.counters[request.path] += 1

    def count(self, name: str) -> None:
        """Increment one named counter."""
        with self._lock:
            self.counters[name] += 1

    def next_round(self, conversation: str) -> int:
        """The number of tool-calling answers ``conversation`` had, counting this one."""
        with self._lock:
            self.rounds[conversation] += 1
            return self.rounds[conversation] - 1

    def remember_prefixes(self, hashes: list[str]) -> list[bool]:
        """Whether each prefix hash was seen before; all of them are seen from now on."""
        with self._lock:
            seen = [h in self.prefixes for h in hashes]
            self.prefixes.update(hashes)
            return seen

    def store_response(self, response_id: str, entry: dict[str, Any]) -> None:
        """Keep a Responses API answer (``{"response": ..., "history": [...]}``) by its id."""
        with self._lock:
            self.stored[response_id] = entry

    def stored_response(self, response_id: str) -> dict[str, Any] | None:
        """A stored Responses API answer's entry, or None."""
        with self._lock:
            return self.stored.get(response_id)

    def snapshot(self) -> list[RecordedRequest]:
        """Return a copy of the recorded requests."""
        with self._lock:
            return list(self.requests)

    @property
    def last(self) -> RecordedRequest:
        """The most recent request (raises IndexError when none)."""
        with self._lock:
            return self.requests[-1]

    def clear(self) -> None:
        """Forget all recorded requests, counters and per-model options."""
        with self._lock:
            self.requests.clear()
            self.counters.clear()
            self.by_model.clear()
            self.rounds.clear()
            self.prefixes.clear()
            self.stored.clear()

    def reset(self) -> None:
        """Back to a new state's: nothing recorded, nothing steered, no key answer or listing."""
        fresh = FakeProviderState()
        with self._lock:
            for f in fields(self):
                if f.name != "_lock":
                    setattr(self, f.name, getattr(fresh, f.name))


def _text(content: Any) -> str:
    """Flatten an OpenAI/Anthropic message content (string or list of parts) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _token_counts(body: dict[str, Any]) -> tuple[int, int, str]:
    """Return (prompt tokens, cached prefix tokens, reply text) for a chat request body."""
    msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    texts = [_text(body.get("system"))] + [_text(m.get("content")) for m in msgs]
    prompt = max(1, sum(map(len, texts)) // 4)
    cached = min(prompt, sum(map(len, texts[:-1])) // 4) if len(msgs) > 1 else 0
    users = [_text(m.get("content")) for m in msgs if m.get("role") == "user"]
    last_user = users[-1] if users else ""
    return prompt, cached, "ok: " + last_user[:40]


def _tool_call(state: FakeProviderState, body: dict[str, Any],
               opts: FakeOptions) -> list[dict[str, Any]]:
    """The scripted agent's tool call for this request (``FakeOptions.tool_paths``), if any."""
    tools = body.get("tools")
    script = opts.tool_arguments or [{"path": p} for p in opts.tool_paths or ()]
    if not script or not isinstance(tools, list) or not tools:
        return []
    if body.get("tool_choice") == "none" and not opts.ignore_tool_choice:  # as real ones do
        return []
    msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    first = next((_text(m.get("content")) for m in msgs if m.get("role") == "user"), "")
    done = state.next_round(first)
    if done >= len(script):
        return []
    arguments = dict(script[done])
    name = arguments.pop("tool", None) or tools[0].get("function", {}).get("name", "tool")
    return [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]


def _split(text: str, n: int) -> list[str]:
    n = max(1, n)
    size = -(-len(text) // n)
    return [text[i * size : (i + 1) * size] for i in range(n)]


def _ratelimit_headers(state: FakeProviderState, prompt: int) -> dict[str, str]:
    remaining = max(0, 10_000 - state.counters["total"])
    return {
        "x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": "6ms", "x-ratelimit-limit-tokens": "2000000",
        "x-ratelimit-remaining-tokens": str(2_000_000 - prompt), "x-ratelimit-reset-tokens": "1ms",
        "x-request-id": "req_" + uuid.uuid4().hex[:16],
    }


def _escape_key(text: str, key: str, opts: FakeOptions) -> str:
    """``text`` (JSON) with the key's first character written as a \\u escape."""
    if not (opts.echo_key_ok and key):
        return text
    return text.replace(key, f"\\u{ord(key[0]):04x}" + key[1:])


def _fails(state: FakeProviderState, opts: FakeOptions, headers: dict[str, str]) -> bool:
    """Whether this request gets its error: always, or among its key's first ``fail_first``.

    The key is the ``Authorization`` header, else Anthropic's ``x-api-key``.
    """
    if not opts.fail_first:
        return True
    name = "failed " + (headers.get("authorization") or headers.get("x-api-key", ""))
    state.count(name)
    return state.counters[name] <= opts.fail_first


def _error(opts: FakeOptions, headers: dict[str, str], anthropic: bool) -> JSONResponse:
    status = int(opts.status or 500)
    message = opts.error_message or f"fake provider error {status}"
    if opts.echo_key:
        key = headers.get("authorization") or headers.get("x-api-key", "")
        message += f"; Incorrect API key provided: {key}"
    err_type, code = _ERROR_KINDS.get(status, ("server_error", f"http_{status}"))
    code = opts.error_code or code
    extra: dict[str, str] = {}
    if status == 429:
        extra = {"retry-after": "1", "x-ratelimit-remaining-requests": "0",
                 "x-ratelimit-reset-requests": "20s"}
    extra.update(opts.headers or {})
    if anthropic:
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=extra)


async def _sse(
    events: list[str], opts: FakeOptions, closing: threading.Event
) -> AsyncIterator[bytes]:
    """Yield SSE events with optional inter-chunk delay; hang after N events if asked.

    A hung stream ends when the client disconnects (Starlette cancels us) or the server stops.
    """
    packer = zlib.compressobj(wbits=31) if opts.gzip else None  # 31: the gzip format
    if opts.junk_bytes:
        yield b"data: "
        for _ in range(opts.junk_bytes // 65536):
            yield b"x" * 65536
        return
    events = [": PROCESSING\n\n"] * opts.stream_comments + events
    for i, event in enumerate(events):
        if opts.end_after_chunks is not None and i >= opts.end_after_chunks:
            return
        if opts.break_after_chunks is not None and i >= opts.break_after_chunks:
            raise ConnectionAbortedError("fake provider: connection broken on purpose")
        last = opts.stream_error_at is not None and i >= opts.stream_error_at \
            + opts.stream_comments
        if last:
            # OpenRouter's shape: the error beside a choice that ends with it.
            error = {"message": opts.error_message or "fake provider stream error",
                     "type": "server_error", "code": opts.error_code}
            choice = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
            event = f"data: {json.dumps({'error': error, 'choices': [choice]})}\n\n"
        if opts.hang_after_chunks is not None and i >= opts.hang_after_chunks:
            while not closing.is_set():
                await asyncio.sleep(0.02)
            return
        if i and opts.chunk_delay_ms:
            await asyncio.sleep(opts.chunk_delay_ms / 1000)
        if packer is None:
            yield event.encode()
        else:
            yield packer.compress(event.encode()) + packer.flush(zlib.Z_SYNC_FLUSH)
        if last:
            break
    if packer is not None:
        yield packer.flush()


async def _prepare(
    request: Request, state: FakeProviderState
) -> tuple[dict[str, Any], dict[str, str], FakeOptions]:
    """Parse and record a request, then apply its configured delay."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    state.record(RecordedRequest(request.method, request.url.path, headers, body, raw,
                                 request.url.query))
    body = body if isinstance(body, dict) else {}
    model = body.get("model")
    defaults = dict(state.by_model.get(model, {}) if isinstance(model, str) else {})
    key = headers.get("authorization", "").removeprefix("Bearer ") or headers.get("x-api-key", "")
    defaults.update(state.by_key.get(key, {}))
    opts = FakeOptions.parse(body, headers, defaults)
    if opts.delay_ms:
        await asyncio.sleep(opts.delay_ms / 1000)
    return body, headers, opts


def make_app(state: FakeProviderState | None = None) -> Starlette:
    """Build the fake provider ASGI app; requests are recorded into ``state`` (or a new one)."""
    st = state if state is not None else FakeProviderState()
    closing = threading.Event()  # set by FakeProviderServer.stop() to release hung streams

    def sse_response(events: list[str], opts: FakeOptions, hdrs: dict[str, str]) -> Response:
        return StreamingResponse(_sse(events, opts, closing), headers=hdrs,
                                 media_type="text/event-stream")

    async def chat_completions(request: Request) -> Response:
        body, headers, opts = await _prepare(request, st)
        if opts.status is not None and int(opts.status) >= 400 and _fails(st, opts, headers):
            st.count("errors")
            return _error(opts, headers, anthropic=False)
        if opts.max_prompt_chars is not None:
            chars = sum(len(_text(m.get("content"))) for m in body.get("messages", [])
                        if isinstance(m, dict))
            if chars > opts.max_prompt_chars:
                st.count("too_long")
                return JSONResponse({"error": {
                    "message": "This model's maximum context length is 8192 tokens. "
                               f"However, your messages resulted in {chars // 4} tokens. "
                               "Please reduce the length of the messages.",
                    "type": "invalid_request_error", "param": "messages",
                    "code": "context_length_exceeded"}}, status_code=400)
        if opts.redirect:
            return Response(status_code=307, headers={"location": opts.redirect})
        if opts.raw_body is not None:
            return Response(opts.raw_body.encode(), media_type="application/json")
        prompt, cached, text = _token_counts(body)
        if opts.reply is not None:
            text = opts.reply
        calls = _tool_call(st, body, opts)
        key = headers.get("authorization", "").removeprefix("Bearer ")
        if opts.echo_key_ok:
            text += f" (your key is {key})"
        completion = len(text) // 4 + 1
        usage = opts.pick_usage({
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        })
        base = {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "created": int(time.time()),
                "model": body.get("model", "fake-model")}
        rl = _ratelimit_headers(st, prompt) | dict(opts.headers or {})
        if opts.echo_key_header:
            rl |= {"x-echo-key": key, "x-echo-auth": f"Bearer {key}"}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message = {"role": "assistant", "content": None, "tool_calls": calls}
            resp = {**base, "object": "chat.completion", "choices": [{
                "index": 0, "message": message, "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop"}]}
            if usage is not None:
                resp["usage"] = usage
            raw = _escape_key(json.dumps(resp), key, opts).encode()
            if opts.gzip:
                raw = gzip.compress(raw)
                rl["content-encoding"] = "gzip"
            return Response(raw, headers=rl, media_type="application/json")
        st.count("streams")
        s_opts = body.get("stream_options")
        include_usage = isinstance(s_opts, dict) and bool(s_opts.get("include_usage"))

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            data = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            if include_usage:
                data.setdefault("usage", None)
            return f"data: {_escape_key(json.dumps(data), key, opts)}\n\n"

        def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}

        events = [chunk([delta({"role": "assistant", "content": ""})])]
        events += [chunk([delta({"content": p})]) for p in _split(text, opts.stream_chunks)]
        events.append(chunk([delta({}, "stop")]))
        if include_usage and usage is not None:
            events.append(chunk([], usage=usage))
        events.append("data: [DONE]\n\n")
        if opts.break_after_chunks is not None and not _fails(st, opts, headers):
            opts = replace(opts, break_after_chunks=None)
        if opts.gzip:
            rl["content-encoding"] = "gzip"
        return sse_response(events, opts, rl)

    async def models(request: Request) -> Response:
        await _prepare(request, st)
        data = [{"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
                for m in ("fake-model", "gpt-4o-mini", "claude-sonnet-4")]
        return JSONResponse({"object": "list", "data": data})

    async def key(request: Request) -> Response:
        await _prepare(request, st)
        if st.key_answer is None:
            return JSONResponse({"error": {"message": "no key answer set"}}, status_code=404)
        return JSONResponse(st.key_answer, status_code=st.key_status)

    async def pricing(request: Request) -> Response:
        await _prepare(request, st)
        body, status = st.listing, st.listing_status
        if body is None:
            return JSONResponse({"error": {"message": "no listing"}}, status_code=404)
        if not st.listing_chunked:
            return Response(body, status_code=status, media_type="application/json")

        async def chunks() -> AsyncIterator[bytes]:
            for at in range(0, len(body), 1 << 20):
                yield body[at:at + (1 << 20)]
        return StreamingResponse(chunks(), status_code=status, media_type="application/json")

    from tests.support import fake_anthropic, fake_responses  # they import this module

    app = Starlette(routes=[
        Route("/v1/key", key, methods=["GET"]),
        Route("/v1/pricing", pricing, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        *fake_anthropic.routes(st, sse_response),
        *fake_responses.routes(st, sse_response),
        Route("/v1/models", models, methods=["GET"]),
    ])
    app.state.closing = closing
    return app


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


class QuickServer(uvicorn.Server):
    """A uvicorn server that notices ``should_exit`` within 10 ms, not 100 ms.

    uvicorn checks for an exit once every 0.1 s; a test suite that starts and stops a few
    hundred servers waited that tick at every teardown (about 8 s of a default run).
    """

    async def main_loop(self) -> None:
        """uvicorn's loop at a 10 ms tick (its per-second work still runs every second)."""
        ticks = 0
        # on_tick(0) refreshes the Date header (uvicorn does it at every 10th tick of its own)
        while not await self.on_tick(0 if ticks % 100 == 0 else 1):
            ticks = (ticks + 1) % 8_640_000
            await asyncio.sleep(0.01)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, polling every 10 ms where it sleeps 100 ms."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await asyncio.sleep(0.01)
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                while (self.server_state.connections or self.server_state.tasks) and (
                        not self.force_exit):
                    await asyncio.sleep(0.01)
                for server in self.servers:
                    await server.wait_closed()
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


def _config(app: Starlette, fast: bool) -> uvicorn.Config:
    fast_ok = fast and all(importlib.util.find_spec(m) for m in ("uvloop", "httptools"))
    return uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1,
        http="httptools" if fast_ok else "auto", loop="uvloop" if fast_ok else "auto",
    )


class FakeProviderServer:
    """Runs the fake provider with uvicorn in a background thread on an OS-chosen port."""

    def __init__(self, state: FakeProviderState | None = None, host: str = "127.0.0.1") -> None:
        """Prepare (but do not start) a server recording into ``state``."""
        self.state = state if state is not None else FakeProviderState()
        self.host = host
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._app: Starlette | None = None

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 5.0) -> Self:
        """Bind a free port, start serving, and wait until uvicorn is ready."""
        sock = _bind(self.host, 0)
        self.port = sock.getsockname()[1]
        self._app = make_app(self.state)
        self._server = QuickServer(_config(self._app, fast=False))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-provider", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fake provider failed to start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask uvicorn to exit and join the thread; force-exit if it lingers."""
        if self._server is None or self._thread is None or self._app is None:
            return
        self._app.state.closing.set()
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        self._server = self._thread = self._app = None

    def __enter__(self) -> Self:
        """Start the server."""
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Script entry point: serve on ``--port`` until SIGTERM/SIGINT.

    Prints ``listening http://HOST:PORT/v1`` once ready. uvicorn re-raises the signal after a
    graceful shutdown, so SIGTERM ends with status -SIGTERM; SIGINT exits 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    sock = _bind(args.host, args.port)
    line = f"listening http://{args.host}:{sock.getsockname()[1]}/v1"

    class _Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            print(line, flush=True)  # only once ready and signal handlers are installed

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises SIGINT after shutdown
        _Announcing(_config(make_app(), fast=True)).run(sockets=[sock])


if __name__ == "__main__":
    # Run as a script, this file's folder is on sys.path but not the repository's root,
    # whence make_app imports the Messages and Responses modules (as tests.support.*).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
