"""The OpenAI-compatible proxy: ``POST /v1/chat/completions``, plain and streaming.

One call, in order: parse and validate the body; admit it to its session (told, not
awaited) and lease a key; forward it upstream with the leased key and ``include_usage``
forced on streams; relay the response unchanged (a stream chunk for chunk, minus the
usage chunk the client did not ask for); then ``record_call`` (``cmd/calls.py``) releases
the key and records the upstream response and exactly one UsageRecorded. The response's
last bytes — the whole body, or a stream's ``[DONE]`` — are held until the ledger row is
committed, so every call that returned to a client is in the ledger even if the daemon
dies the next instant. When the client
disconnects mid-stream, the upstream is drained (bounded) for its usage and the row is
written all the same, marked ``client_disconnected``.
"""

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec
import pykka
from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.errors import ActorUnavailable, NoCredential
from sessionwarden.actors.messages import Admit, Lease
from sessionwarden.actors.usage import estimate_tokens
from sessionwarden.cmd.calls import ProxiedCall, record_call, short
from sessionwarden.cmd.config import find_model
from sessionwarden.cmd.errors import UnknownModel
from sessionwarden.cmd.http import ASGIReceive, ASGISend, send_error
from sessionwarden.cmd.runtime import Runtime
from sessionwarden.events import (
    CallAdmitted,
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


async def chat_completions(
    rt: Runtime, headers: dict[str, str], body: bytes, receive: ASGIReceive, send: ASGISend
) -> None:
    """Serve one chat-completions request (the body has been read and size-checked)."""
    try:
        payload = _decode(body)
    except msgspec.DecodeError as exc:
        await send_error(send, 400, f"malformed JSON body: {short(str(exc))}")
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
    call = ProxiedCall(session_id, provider, upstream_model, messages, stream)
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
        await record_call(rt, call, 503, {}, None, error=str(exc))
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
        await asyncio.shield(record_call(rt, call, 499, {}, None, error="cancelled at shutdown",
                                     disconnected=True))
        raise


async def _forward(
    rt: Runtime, call: ProxiedCall, upstream: dict[str, Any], out_headers: dict[str, str],
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
    rt: Runtime, call: ProxiedCall, response: aiohttp.ClientResponse, send: ASGISend
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
        error = short(body.decode(errors="replace"))
    await record_call(rt, call, status, _lower(response.headers), usage_block, output=output,
                  error=error, has_output=status < 400)
    await _start(send, status, response, call, len(body))
    await send({"type": "http.response.body", "body": body})


async def _relay_stream(
    rt: Runtime, call: ProxiedCall, response: aiohttp.ClientResponse, injected: bool,
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
        await record_call(
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
    send: ASGISend, status: int, response: aiohttp.ClientResponse, call: ProxiedCall,
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


async def _fail(rt: Runtime, call: ProxiedCall, send: ASGISend, status: int, message: str) -> None:
    await record_call(rt, call, status, {}, None, error=message)
    await send_error(send, status, message, kind="upstream_error")


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


