"""Small ASGI helpers shared by the daemon's endpoints: JSON responses, errors, bodies.

The daemon speaks raw ASGI (no framework) so that the proxy's hot path is a handful of
function calls: routing is a dict lookup and the security checks run before it.
"""

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import msgspec
from sessionwarden.cmd.daemon.access import note_error
from sessionwarden.cmd.errors import BodyTooLarge

__all__ = [
    "ASGIReceive",
    "ASGISend",
    "header_map",
    "read_body",
    "send_error",
    "send_json",
    "sse_error",
]

ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_encode = msgspec.json.Encoder().encode


def header_map(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Request headers as a dict with lower-case names (last value wins).

    Values are decoded as Latin-1, which never fails: a malformed header is then
    rejected by whoever reads it, with a clear message, instead of crashing here.
    """
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


async def read_body(receive: ASGIReceive, limit: int) -> bytes:
    """Read the request body, refusing as soon as it exceeds ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(
    send: ASGISend,
    status: int,
    payload: object,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send a complete JSON response."""
    body = _encode(payload)
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    })
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: ASGISend,
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send an OpenAI-style error body: ``{"error": {"message", "type", "code"}}``.

    ``message`` is also the error the request's access line shows.
    """
    note_error(message)
    await send_json(
        send, status, {"error": {"message": message, "type": kind, "code": code}}, headers
    )


def sse_error(message: str, kind: str, code: str) -> bytes:
    """An OpenAI-style error as a server-sent event, to end a stream that went wrong."""
    body = _encode({"error": {"message": message, "type": kind, "code": code}})
    return b"data: " + body + b"\n\n"
