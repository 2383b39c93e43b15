"""What the proxy asks of a wire format: the :class:`Adapter` protocol.

One adapter per ``api_mode`` (``chat_completions.py`` today; Anthropic Messages and
OpenAI Responses next) reads a client's request into the wire-neutral
:class:`~sessionwarden.domain.context.conversation.Conversation` and
:class:`~sessionwarden.domain.calls.RequestShape`, writes the upstream body, and reads
the answer — whole (:meth:`Adapter.read_response`) or as a stream
(:class:`StreamReader`).

The HTTP layer holds an ``Adapter``, never a concrete format,
so a new format is a new module and an entry in ``upstream.ADAPTERS``.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sessionwarden.config import ApiMode
from sessionwarden.domain.calls import RequestShape
from sessionwarden.domain.context.conversation import Conversation, ItemCodec
from sessionwarden.upstream.chat_completions import ResponseFacts

__all__ = ["Adapter", "StreamReader"]


class StreamReader(Protocol):
    """One streamed answer, fed chunk by chunk: what to relay, and what it said."""

    #: The stream's end marker came.
    done: bool
    #: Characters of output text seen so far (the estimate's input, the bound's measure).
    output_chars: int
    #: The usage block, once one came (the format's own shape; the domain normalises it).
    usage_block: object
    #: An event begun but not finished (dropped, not relayed, when the stream breaks).
    held: bytes
    #: The response's id once the stream named it, in a format whose requests can
    #: continue one (Responses); None otherwise.
    response_id: str | None

    def feed(self, chunk: bytes) -> bytes:
        """Take ``chunk``; the bytes to relay to the client now."""
        ...

    def rest(self) -> bytes:
        """The bytes still to relay once the upstream's stream has ended."""
        ...


class Adapter(Protocol):
    """One wire format, both ways (see the module doc).

    The same adapter serves both sides of a call: the *door* a client came through (its
    request read, its errors shaped, its session named) and the provider's wire (the
    upstream body, the answer read). Without translation the two are one format.
    """

    #: The upstream path a request is posted to, after the provider's base URL.
    path: str

    @property
    def api_mode(self) -> ApiMode:
        """The ``api_mode`` a provider names to be reached in this format."""
        ...

    @property
    def items(self) -> ItemCodec:
        """The conversation's items, read and written one at a time."""
        ...

    def read_request(self, body: bytes) -> tuple[Conversation, RequestShape]:
        """A client's request body as a conversation and its shape (model, stream…)."""
        ...

    def auth_headers(self, secret: str) -> dict[str, str]:
        """The headers that carry a key upstream."""
        ...

    def upstream_fields(self, fields: Mapping[str, Any], model: str, stream: bool
                        ) -> tuple[bytes, bool]:
        """The request's fields as sent upstream, and whether usage was asked for.

        Usage asked for on the client's behalf is not relayed (its chunk is dropped).
        """
        ...

    def upstream_body(self, fields: bytes, items: Sequence[bytes]) -> bytes:
        """The upstream body: the fields and the conversation's items."""
        ...

    def read_response(self, body: bytes) -> ResponseFacts:
        """What a whole answer says: its usage block, its output, an error."""
        ...

    def stream_error(self, head: bytes) -> bytes | None:
        """The error event a stream began with, if it began with one."""
        ...

    def stream(self, injected: bool, max_event_bytes: int = ...) -> StreamReader:
        """A reader for one streamed answer."""
        ...

    def session_hint(self, fields: Mapping[str, Any], headers: Mapping[str, str]
                     ) -> str | None:
        """The session the client names in its own way, without ``X-Session-Id``.

        ``headers`` have lower-case names. None when the client names none (the session
        is then derived from the conversation). The value is checked by the caller.
        """
        ...

    def continues(self, fields: Mapping[str, Any]) -> str | None:
        """The stored response the request continues (its history is the provider's).

        A Responses ``previous_response_id``; None for a request that sends its whole
        history (every request of the other formats).
        """
        ...

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> bytes:
        """An error answer's JSON body in this format's shape (``kind`` is the OpenAI type)."""
        ...

    def sse_error(self, message: str, kind: str, code: str) -> bytes:
        """An error as this format's server-sent event, to end a stream that went wrong."""
        ...
