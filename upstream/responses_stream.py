"""A streamed OpenAI Responses answer, read as it is relayed: :class:`ResponsesStream`.

The stream reader of the ``codex_responses`` adapter (``responses.py``): it frames the
server-sent events (``event: <type>`` and ``data: {…}``, or data lines only, the type then
read from the JSON), relays each as it came, and notes what the answer said on the way —
its output's length, its usage, the id of the response it made.

Rules:

* The terminal event (``response.completed``, ``response.incomplete``,
  ``response.failed``: each billed, each carrying the whole response with its ``usage``)
  and anything after it are held back in ``held`` until the call is recorded.
* ``output_chars`` grows by the ``delta`` of ``response.output_text.delta``,
  ``response.function_call_arguments.delta`` and ``response.reasoning_summary_text.delta``.
* An ``error`` event mid-stream is relayed as any other event is.
* ``usage_block`` is the terminal response's ``usage`` with the one key the daemon adds
  to a provider's block: :func:`with_web_searches` (the ``web_search_call`` items of the
  response's ``output``, which Responses bills but does not count in ``usage``).
"""

from collections.abc import Mapping

import msgspec
from sessionwarden.domain.usage.stream import RESPONSES_TERMINAL_EVENTS, responses_event_usage
from sessionwarden.upstream.sse import DEFAULT_MAX_EVENT_BYTES, SseFramer, sse_data

__all__ = ["ResponsesStream", "with_web_searches"]

#: The stream events whose ``delta`` is output the model generated.
_DELTA_EVENTS = frozenset({"response.output_text.delta",
                           "response.function_call_arguments.delta",
                           "response.reasoning_summary_text.delta"})


def with_web_searches(usage: object, output: object) -> object:
    """``usage`` with the web searches of ``output`` in Anthropic's shape, if there are any.

    Responses bills each ``web_search_call`` item of a response's ``output`` as a search
    and reports none in ``usage``; this is the one key the daemon adds to a provider's
    usage block, ``"server_tool_use": {"web_search_requests": n}`` (the key
    ``domain/usage/canonical.py`` reads in both formats), and only when ``n > 0`` and
    ``usage`` is an object (anything else is left for the domain to judge). A new dict:
    the provider's is not changed.
    """
    if not isinstance(usage, Mapping) or not isinstance(output, list):
        return usage
    searches = sum(1 for item in output
                   if isinstance(item, Mapping) and item.get("type") == "web_search_call")
    if not searches:
        return usage
    return {**usage, "server_tool_use": {"web_search_requests": searches}}


class _Event(msgspec.Struct):
    """What a stream event says that the reader needs (everything else is skipped)."""

    type: object = None
    delta: object = None
    response: object = None


_decode_event = msgspec.json.Decoder(_Event).decode


def _event_name(event: bytes) -> str | None:
    """The ``event:`` line's name, for an event whose data says no type."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip().decode(errors="replace")
    return None


class ResponsesStream:
    """One streamed response, read as it is relayed (module doc).

    :meth:`feed` returns the bytes to relay now; the terminal event (and anything after it)
    is held back in ``held`` until the call is recorded. ``usage_block`` (the terminal
    event's ``response.usage``, with its web searches: :func:`with_web_searches`),
    ``output_chars``, ``done`` and ``response_id`` say what the stream carried.
    """

    __slots__ = ("_framer", "done", "held", "output_chars", "response_id", "usage_block")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        """Frame events of at most ``max_event_bytes`` bytes."""
        self._framer = SseFramer(max_event_bytes)
        self.usage_block: object = None
        self.output_chars = 0
        self.done = False
        self.held = b""
        #: The id of the response, once ``response.created`` or the terminal event said it.
        self.response_id: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        """Take a chunk of the upstream body; return what to relay to the client now.

        Raises:
            EventTooLarge: an event grew past the bound.
        """
        out = bytearray()
        for event in self._framer.feed(chunk):
            if self.held:  # nothing should follow the end; keep the order if something does
                self.held += event
                continue
            terminal = self._note(event)
            if terminal:
                self.done = True
                self.held += event
            else:
                out += event
        return bytes(out)

    def _note(self, event: bytes) -> bool:
        """Read what ``event`` says; whether it ends the response."""
        data = sse_data(event)
        if data is None:
            return False
        try:
            parsed = _decode_event(data)
        except (msgspec.DecodeError, RecursionError):
            return False
        kind = parsed.type if isinstance(parsed.type, str) else _event_name(event)
        if kind in _DELTA_EVENTS and isinstance(parsed.delta, str):
            self.output_chars += len(parsed.delta)
            return False
        if isinstance(parsed.response, dict):
            found = parsed.response.get("id")
            if isinstance(found, str) and found:
                self.response_id = found
        if kind in RESPONSES_TERMINAL_EVENTS:
            usage = responses_event_usage({"type": kind, "response": parsed.response})
            output = (parsed.response.get("output")
                      if isinstance(parsed.response, dict) else None)
            self.usage_block = with_web_searches(usage, output)
            return True
        return False

    def rest(self) -> bytes:
        """What is left to send at the end: the held-back bytes and any unfinished event."""
        return self.held + self._framer.rest()
