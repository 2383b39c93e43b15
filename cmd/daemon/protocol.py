"""uvicorn's httptools protocol with a bound on a request's head, counted as it arrives.

httptools buffers a header (name and value) until it ends, and uvicorn keeps every
header of a request, with no limit on either: a client could stream megabytes of
headers, or one endless header, before the app — and so the token check — ever runs.

Here the bytes received while a request's head is still incomplete are counted, and
past the bound the connection gets a 431 and is closed, so memory per connection stays
within the bound plus one read. The chunk that completes a head is not counted (it is
one read, itself bounded by the transport), which keeps the count free of body bytes.
"""

from typing import Any

import msgspec
from loguru import logger
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["bounded_head_protocol"]

_encode = msgspec.json.Encoder().encode


class _BoundedHead(HttpToolsProtocol):
    max_head_bytes = 64 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # httptools begins a message at its first byte, so a head is counted from the
        # chunk that begins it; between a message's end and the next one's begin, the
        # bytes are the previous body's and are not a head's.
        self._in_head = False
        self._head_bytes = 0

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._refuse()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = False

    def _refuse(self) -> None:
        limit = self.max_head_bytes >> 10
        logger.warning("refused a request whose line and headers exceed {} KiB (431)", limit)
        body = _encode({"error": {
            "message": f"request line and headers exceed {limit} KiB",
            "type": "invalid_request_error", "code": "headers_too_large"}})
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body)
        self.transport.close()


def bounded_head_protocol(max_head_bytes: int) -> type[HttpToolsProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)``, bounding heads to that size."""
    return type("BoundedHeadProtocol", (_BoundedHead,), {"max_head_bytes": max_head_bytes})
