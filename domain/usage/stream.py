"""Usage in streams: which event carries the block, and folding Anthropic's pieces.

A streamed call's usage is not in one place on every wire (peers.md lesson 9: streams
that drop usage show $0 and let budgets be dodged with ``stream: true``):

- **Chat Completions**: the last chunk with a non-null ``usage`` (the daemon forces
  ``stream_options.include_usage``); :func:`chat_chunk_usage` reads one chunk.
- **Responses**: the terminal event (``response.completed``, or ``response.incomplete``
  / ``response.failed``, which are billed too) carries the whole ``response`` with its
  ``usage``; :func:`responses_event_usage` reads it.
- **Anthropic Messages**: ``message_start`` carries ``message.usage`` (input and cache
  counts, an early ``output_tokens``); each ``message_delta`` carries a ``usage`` whose
  counts are *cumulative*, so a later figure replaces an earlier one, never adds to it;
  a null there means "not restated". :class:`AnthropicStreamUsage` folds them into the
  one block :func:`~sessionwarden.domain.usage.canonical.normalise_usage` reads.

Everything here is pure and never raises: a hostile value is kept for
``normalise_usage`` to reject (a ``usage`` that is not an object replaces the fold and
stays, so the rejection is recorded rather than a later piece hiding it).
"""

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "RESPONSES_TERMINAL_EVENTS",
    "AnthropicStreamUsage",
    "chat_chunk_usage",
    "responses_event_usage",
]

#: The Responses stream events that end a response and carry its usage.
RESPONSES_TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def chat_chunk_usage(chunk: object) -> object:
    """The ``usage`` of one decoded chat-completion chunk, or None (keep the last non-None)."""
    return chunk.get("usage") if isinstance(chunk, Mapping) else None


def responses_event_usage(event: object) -> object:
    """The ``response.usage`` of a terminal Responses stream event, else None."""
    if not isinstance(event, Mapping) or event.get("type") not in RESPONSES_TERMINAL_EVENTS:
        return None
    response = event.get("response")
    return response.get("usage") if isinstance(response, Mapping) else None


class AnthropicStreamUsage(msgspec.Struct, frozen=True):
    """The usage of an Anthropic Messages stream so far: fold each decoded event in.

    ``AnthropicStreamUsage().fold(e1).fold(e2)…``; ``block`` is None until an event
    carried usage, then the merged usage object (a fresh dict per fold, never mutated).
    """

    block: Any = None

    def fold(self, event: object) -> "AnthropicStreamUsage":
        """This usage with ``event``'s usage laid over it (other events change nothing)."""
        if not isinstance(event, Mapping):
            return self
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
        elif kind == "message_delta":
            usage = event.get("usage")
        else:
            return self
        if usage is None or (self.block is not None and not isinstance(self.block, Mapping)):
            return self
        if not isinstance(usage, Mapping):
            return AnthropicStreamUsage(usage)
        merged = dict(self.block) if self.block is not None else {}
        merged.update((key, value) for key, value in usage.items() if value is not None)
        return AnthropicStreamUsage(merged)
