"""Small ASGI helpers shared by the daemon's endpoints: JSON responses, errors, bodies.

The daemon speaks raw ASGI (no framework) so that the proxy's hot path is a handful of
function calls: routing is a dict lookup and the security checks run before it.

An error keeps the shape of the door its request came through (:func:`door_errors`):
an Anthropic client gets Anthropic's error JSON and ``event: error``, an OpenAI client
OpenAI's. The shape is a context variable set once per request, not an argument, so the
dozens of places that refuse a call do not each carry the door: a request is served in
its own task, whose context no other request sees.
"""

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any, Protocol

import msgspec
from sessionwarden.cmd.daemon.access import note_error
from sessionwarden.cmd.errors import BodyTooLarge
from sessionwarden.upstream.chat_completions import ChatCompletions

__all__ = [
    "ASGIReceive",
    "ASGISend",
    "ErrorShape",
    "door_errors",
    "header_map",
    "read_body",
    "send_error",
    "send_json",
    "sse_error",
]

ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_encode = msgspec.json.Encoder().encode


class ErrorShape(Protocol):
    """How a wire format says an error (every adapter is one)."""

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> bytes:
        """An error answer's JSON body."""
        ...

    def sse_error(self, message: str, kind: str, code: str) -> bytes:
        """An error as a server-sent event."""
        ...


_CHAT = ChatCompletions()
#: The request's door's shape; None outside a door: OpenAI's (the control API's too).
_shape: contextvars.ContextVar[ErrorShape | None] = contextvars.ContextVar(
    "sessionwarden_error_shape", default=None)


def _current() -> ErrorShape:
    return _shape.get() or _CHAT


@contextlib.contextmanager
def door_errors(shape: ErrorShape | None) -> Iterator[None]:
    """Within the block, errors take ``shape`` (the door the request came through)."""
    token = _shape.set(shape)
    try:
        yield
    finally:
        _shape.reset(token)


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
    """Send an error body in the door's shape (OpenAI's ``{"error": {…}}`` by default).

    ``kind`` is the OpenAI error type; a door of another format maps it to its own.
    ``message`` is also the error the request's access line shows.
    """
    note_error(message)
    body = _current().error_body(status, message, kind, code)
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


def sse_error(message: str, kind: str, code: str) -> bytes:
    """An error as the door's server-sent event, to end a stream that went wrong."""
    return _current().sse_error(message, kind, code)
