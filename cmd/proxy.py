"""The OpenAI-compatible proxy: ``POST /v1/chat/completions``, plain and streaming.

One call, in order: parse and validate the body; admit it to its session and lease a key
(concurrently); forward it upstream with the leased key and ``include_usage`` forced on
streams; relay the response unchanged (a stream chunk for chunk, minus the usage chunk
the client did not ask for); record the upstream response, release the key, and record
exactly one UsageRecorded. The response's last bytes — the whole body, or a stream's
``[DONE]`` — are held until the ledger row is committed, so every call that returned to
a client is in the ledger even if the daemon dies the next instant. When the client
disconnects mid-stream, the upstream is drained (bounded) for its usage and the row is
written all the same, marked ``client_disconnected``.
"""

import asyncio
import re
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import msgspec
import pykka
from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.errors import ActorUnavailable, NoCredential, UsageRejected
from sessionwarden.actors.messages import Admit, Lease, Leased, RecordUsage, Release, Responded
from sessionwarden.actors.ratelimits import parse_rate_limits
from sessionwarden.actors.usage import CanonicalUsage, estimate_tokens, estimate_usage
from sessionwarden.actors.usage import normalise_usage as normalise
from sessionwarden.cmd.config import ProviderConfig, find_model
from sessionwarden.cmd.errors import UnknownModel
from sessionwarden.cmd.http import ASGIReceive, ASGISend, send_error
from sessionwarden.cmd.runtime import Runtime
from sessionwarden.events import (
    CallAdmitted,
    RateLimitBucketSeen,
    UpstreamResponded,
    UsageRecorded,
)
from sessionwarden.redact import default_redactor

__all__ = ["IMPLICIT_SESSION", "chat_completions"]

IMPLICIT_SESSION = "implicit"
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_DRAIN_AFTER_DISCONNECT_S = 30.0

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode

# Never forwarded upstream: ours (auth, session), hop-by-hop, or recomputed by the client.
_DROP_UP = frozenset({
    "host", "authorization", "x-api-key", "api-key", "proxy-authorization", "cookie",
    "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
    "x-session-id", "accept-encoding",
})
# Never relayed to the client: hop-by-hop, or describing a body encoding we undid.
_DROP_DOWN = frozenset({
    "content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding",
    "server", "date",
})


class _Call:
    """What the proxy knows about one call while it is in flight."""

    __slots__ = ("call_id", "lease", "messages", "model", "provider", "recorded", "session_id",
                 "started", "stream")

    def __init__(self, session_id: str, provider: ProviderConfig, model: str, messages: Any,
                 stream: bool) -> None:
        self.call_id = uuid.uuid4().hex
        self.session_id = session_id
        self.provider = provider
        self.model = model
        self.messages = messages
        self.stream = stream
        self.lease: Leased | None = None
        self.recorded = False
        self.started = time.perf_counter()


async def chat_completions(
    rt: Runtime, headers: dict[str, str], body: bytes, receive: ASGIReceive, send: ASGISend
) -> None:
    """Serve one chat-completions request (the body has been read and size-checked)."""
    try:
        payload = _decode(body)
    except msgspec.DecodeError as exc:
        await send_error(send, 400, f"malformed JSON body: {_short(str(exc))}")
        return
    except RecursionError:
        await send_error(send, 400, "malformed JSON body: nested too deeply")
        return
    if not isinstance(payload, dict):
        await send_error(send, 400, "the body must be a JSON object")
        return
    model_name, messages = payload.get("model"), payload.get("messages")
    if not isinstance(model_name, str) or not model_name:
        await send_error(send, 400, "'model' must be a non-empty string", code="invalid_model")
        return
    if not isinstance(messages, list):
        await send_error(send, 400, "'messages' must be a list")
        return
    session_id = headers.get("x-session-id", IMPLICIT_SESSION)
    if not _SESSION_ID.fullmatch(session_id):
        await send_error(
            send, 400, "X-Session-Id must be 1-128 characters of A-Z a-z 0-9 . _ : @ -"
        )
        return
    try:
        provider, upstream_model = find_model(rt.config, model_name)
    except UnknownModel as exc:
        await send_error(send, 404, str(exc), code="model_not_found")
        return
    if provider.api_mode != "chat_completions":
        await send_error(send, 501, f"provider {provider.name!r} uses api_mode "
                         f"{provider.api_mode!r}, which the proxy cannot translate yet")
        return
    stream = payload.get("stream") is True
    call = _Call(session_id, provider, upstream_model, messages, stream)
    admit = Admit(
        CallAdmitted(
            call_id=call.call_id, session_id=session_id, provider=provider.name,
            model=upstream_model, message_count=len(messages),
            estimated_tokens=estimate_tokens(messages), stream=stream,
        ),
        headers.get("user-agent", "")[:200],
    )
    # Admission is told, not asked: the shard's mailbox is FIFO, so CallAdmitted is
    # queued before this call's UpstreamResponded whatever happens, and the call does not
    # wait for it. Only the key is worth waiting for.
    try:
        rt.session_ref(session_id).tell(admit)
    except pykka.ActorDeadError:
        logger.warning("call {}: session actor restarting; admission not recorded", call.call_id)
    try:
        call.lease = await ask(rt.ref("credentials"), Lease(provider.name, call.call_id))
    except (NoCredential, ActorUnavailable) as exc:
        await _record(rt, call, 503, {}, None, error=str(exc))
        await send_error(send, 503, str(exc), kind="server_error", code="no_credential")
        return
    assert call.lease is not None

    upstream = dict(payload)
    upstream["model"] = upstream_model
    injected = False
    if stream:
        options = upstream.get("stream_options")
        options = dict(options) if isinstance(options, dict) else {}
        injected = options.get("include_usage") is not True
        options["include_usage"] = True
        upstream["stream_options"] = options
    out_headers = {k: v for k, v in headers.items() if k not in _DROP_UP}
    out_headers["authorization"] = f"Bearer {call.lease.secret}"
    out_headers["content-type"] = "application/json"
    out_headers["accept-encoding"] = "identity"
    try:
        await _forward(rt, call, upstream, out_headers, injected, receive, send)
    except asyncio.CancelledError:
        # Cancelled before the relay could record (shutdown past its grace period).
        await asyncio.shield(_record(rt, call, 499, {}, None, error="cancelled at shutdown",
                                     disconnected=True))
        raise


async def _forward(
    rt: Runtime, call: _Call, upstream: dict[str, Any], out_headers: dict[str, str],
    injected: bool, receive: ASGIReceive, send: ASGISend,
) -> None:
    provider = call.provider
    try:
        response = await rt.http().post(
            provider.base_url.rstrip("/") + "/chat/completions",
            data=_encode(upstream), headers=out_headers,
        )
    except TimeoutError:
        await _fail(rt, call, send, 504, "the upstream provider timed out")
        return
    except aiohttp.ClientError as exc:
        reason = f"the upstream provider is unreachable ({type(exc).__name__})"
        await _fail(rt, call, send, 502, reason)
        return
    try:
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if call.stream and response.status == 200 and is_sse:
            await _relay_stream(rt, call, response, injected, receive, send)
        else:
            await _relay_plain(rt, call, response, send)
    finally:
        response.release()


async def _relay_plain(
    rt: Runtime, call: _Call, response: aiohttp.ClientResponse, send: ASGISend
) -> None:
    try:
        body = await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        await _fail(rt, call, send, 502, f"the upstream response broke off ({type(exc).__name__})")
        return
    status = response.status
    usage_block: object = None
    output: object = None
    error = ""
    if status < 400:
        try:
            decoded = _decode(body)
        except (msgspec.DecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            usage_block = decoded.get("usage")
            choices = decoded.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                output = choices[0].get("message")
    else:
        body = default_redactor.redact_bytes(body)
        error = _short(body.decode(errors="replace"))
    await _record(rt, call, status, _lower(response.headers), usage_block, output=output,
                  error=error, has_output=status < 400)
    await _start(send, status, response, call, len(body))
    await send({"type": "http.response.body", "body": body})


async def _relay_stream(
    rt: Runtime, call: _Call, response: aiohttp.ClientResponse, injected: bool,
    receive: ASGIReceive, send: ASGISend,
) -> None:
    disconnected = asyncio.Event()
    usage_block: object = None
    text: list[str] = []
    held = b""
    buffer = b""

    async def forward(data: bytes) -> None:
        if disconnected.is_set() or not data:
            return
        try:
            await send({"type": "http.response.body", "body": data, "more_body": True})
        except Exception:  # the client went away between our check and the write
            disconnected.set()

    async def record() -> None:
        await _record(
            rt, call, 200, _lower(response.headers), usage_block, output="".join(text),
            has_output=True, disconnected=disconnected.is_set(),
        )

    loop = asyncio.get_running_loop()
    try:
        # Once the client is gone, the upstream is drained for its usage for a bounded
        # time; the bound must hold even when the upstream goes silent, so it is a
        # deadline on the whole read, armed by the disconnect watcher.
        async with asyncio.timeout(None) as drain:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                disconnected.set()
                drain.reschedule(loop.time() + _DRAIN_AFTER_DISCONNECT_S)

            watcher = asyncio.create_task(watch())
            try:
                await _start(send, 200, response, call, None)
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    out = bytearray()
                    while (cut := _event_end(buffer)) >= 0:
                        event, buffer = buffer[:cut], buffer[cut:]
                        data = _sse_data(event)
                        if data == b"[DONE]":
                            held += event
                            continue
                        keep = True
                        parsed = _decode_or_none(data)
                        if isinstance(parsed, dict):
                            if parsed.get("usage") is not None:
                                usage_block = parsed["usage"]
                                keep = not (injected and not parsed.get("choices"))
                            _collect_text(parsed, text)
                        if held:  # nothing may follow [DONE]; keep order if something does
                            held += event
                        elif keep:
                            out += event
                    await forward(bytes(out))
                    if disconnected.is_set() and usage_block is not None:
                        break
            finally:
                watcher.cancel()
    except (aiohttp.ClientError, TimeoutError) as exc:
        logger.warning("call {}: upstream stream ended early: {}", call.call_id, type(exc).__name__)
    except asyncio.CancelledError:
        # The daemon is shutting down past its grace period: the call still gets its row.
        disconnected.set()
        await asyncio.shield(record())
        raise
    # Record before the last bytes go out: a client that saw [DONE] has its ledger row.
    await asyncio.shield(record())
    if not disconnected.is_set():
        try:
            await send({"type": "http.response.body", "body": held + buffer, "more_body": False})
        except Exception:
            pass


def _decode_or_none(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def _event_end(buffer: bytes) -> int:
    """Index just past the first complete SSE event in ``buffer``, or -1."""
    a, b = buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n")
    if a < 0 and b < 0:
        return -1
    if b < 0 or (0 <= a < b):
        return a + 2
    return b + 4


def _sse_data(event: bytes) -> bytes | None:
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _collect_text(chunk: dict[str, Any], into: list[str]) -> None:
    choices = chunk.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                into.append(content)


async def _start(
    send: ASGISend, status: int, response: aiohttp.ClientResponse, call: _Call,
    length: int | None,
) -> None:
    headers = [
        (k.encode("latin-1"), v.encode("latin-1"))
        for k, v in response.headers.items() if k.lower() not in _DROP_DOWN
    ]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    headers.append((b"x-sessionwarden-call-id", call.call_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _fail(rt: Runtime, call: _Call, send: ASGISend, status: int, message: str) -> None:
    await _record(rt, call, status, {}, None, error=message)
    await send_error(send, status, message, kind="upstream_error")


def _release(rt: Runtime, call: _Call, status: int) -> None:
    lease = call.lease
    if lease is not None:
        call.lease = None
        try:
            rt.ref("credentials").tell(Release(lease.provider, lease.fingerprint, call.call_id,
                                               status))
        except Exception:
            logger.warning("call {}: could not release its key", call.call_id)


async def _record(
    rt: Runtime, call: _Call, status: int, headers: dict[str, str], usage_block: object,
    *, output: object = None, error: str = "", has_output: bool = False,
    disconnected: bool = False,
) -> None:
    """Record the upstream response and the call's usage; return once durable.

    Runs at most once per call, whichever path (normal end, error, cancellation) gets
    there first.
    """
    if call.recorded:
        return
    call.recorded = True
    latency_ms = round((time.perf_counter() - call.started) * 1000, 3)
    credential = call.lease.fingerprint if call.lease else ""
    limits = parse_rate_limits(headers, datetime.now(UTC)) if headers else None
    responded = UpstreamResponded(
        call_id=call.call_id, session_id=call.session_id, status=status, latency_ms=latency_ms,
        credential=credential,
        rate_limits=tuple(
            RateLimitBucketSeen(b.name, b.limit, b.remaining, b.reset_seconds)
            for b in (limits.buckets if limits else ())
        ),
        retry_after_seconds=limits.retry_after_seconds if limits else None,
        error=error,
    )
    usage, flags = _usage(call, usage_block, output, has_output)
    raw = ""
    if usage_block is not None:
        raw = _short(default_redactor.redact(_encode(usage_block).decode()), 2000)
    record = UsageRecorded(
        call_id=call.call_id, session_id=call.session_id, provider=call.provider.name,
        model=call.model, credential=credential, status=status,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens, source=usage.source, raw_usage=raw,
        flags=flags, stream=call.stream, client_disconnected=disconnected,
    )
    _release(rt, call, status)
    try:
        await ask(rt.session_ref(call.session_id), Responded(responded, record), timeout=60.0)
    except ActorUnavailable:
        # The session shard is restarting: the usage row matters most, record it directly.
        logger.warning("call {}: session actor unavailable; response not recorded", call.call_id)
        await ask(rt.ref("ledger"), RecordUsage(record), timeout=60.0)


def _usage(
    call: _Call, block: object, output: object, has_output: bool
) -> tuple[CanonicalUsage, tuple[str, ...]]:
    if not has_output:
        return CanonicalUsage(source="missing"), ()
    try:
        usage = normalise(call.provider.api_mode, block)
    except UsageRejected as exc:
        return estimate_usage(call.messages, output), (f"rejected:{exc.field or 'usage'}",)
    if usage.source == "missing":
        return estimate_usage(call.messages, output), ("usage_missing",)
    return usage, tuple(usage.flags)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
