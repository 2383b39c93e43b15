"""Server-sent events framing: split a byte stream into events, in linear time.

An event ends at a blank line (``\\n\\n`` or ``\\r\\n\\r\\n``). :class:`SseFramer` keeps
the bytes of the event in progress and remembers how far it has already looked for an
end, so each byte is scanned a bounded number of times however the stream is chunked:
rescanning the whole buffer on every chunk made an upstream that never sends a separator
cost quadratic time (128 MiB took 58 s and stalled the event loop). An event that grows
past ``max_event_bytes`` without ending raises :class:`EventTooLarge`.
"""

from sessionwarden.upstream.errors import EventTooLarge

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SseFramer", "sse_data"]

#: No real completion chunk comes near this; a stream that does is broken or hostile.
DEFAULT_MAX_EVENT_BYTES = 16 << 20

# The longest separator is 4 bytes: a new search must re-examine the last 3 bytes seen.
_OVERLAP = 3


class SseFramer:
    """Feed it bytes as they arrive; it returns the complete events, separators included."""

    __slots__ = ("_buffer", "_max", "_scanned", "examined")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        """Frame events of at most ``max_event_bytes`` bytes."""
        self._buffer = bytearray()
        self._scanned = 0
        self._max = max_event_bytes
        #: Bytes handed to searches so far (at most what the searches could read): the
        #: measure of the framing's cost, which stays linear in the bytes fed.
        self.examined = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the events it completed, in order (maybe none).

        Raises:
            EventTooLarge: the event in progress exceeds the bound.
        """
        buffer = self._buffer
        buffer += data
        events: list[bytes] = []
        start = 0
        scan = self._scanned
        # Each pattern's next position is searched for again only once the cursor has
        # passed it: re-searching for a separator the rest of the buffer does not have,
        # once per event found, would make a chunk of many events quadratic again.
        lf = buffer.find(b"\n\n", scan)
        crlf = buffer.find(b"\r\n\r\n", scan)
        self.examined += _span(lf, scan, buffer) + _span(crlf, scan, buffer)
        while lf >= 0 or crlf >= 0:
            end = lf + 2 if crlf < 0 or 0 <= lf < crlf else crlf + 4
            events.append(bytes(buffer[start:end]))
            start = scan = end
            if 0 <= lf < scan:
                lf = buffer.find(b"\n\n", scan)
                self.examined += _span(lf, scan, buffer)
            if 0 <= crlf < scan:
                crlf = buffer.find(b"\r\n\r\n", scan)
                self.examined += _span(crlf, scan, buffer)
        if start:
            del buffer[:start]
        if len(buffer) > self._max:
            raise EventTooLarge(self._max)
        self._scanned = max(0, len(buffer) - _OVERLAP)
        return events

    def rest(self) -> bytes:
        """The bytes of an unfinished event (what the stream ended with), and forget them."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        return rest


def _span(found: int, start: int, buffer: bytearray) -> int:
    """How many bytes a search from ``start`` that returned ``found`` looked at."""
    return (found + 4 if found >= 0 else len(buffer)) - start


def sse_data(event: bytes) -> bytes | None:
    """The ``data:`` lines of one event joined by newlines, or None if it has none."""
    if b"data:" not in event:
        return None
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None
