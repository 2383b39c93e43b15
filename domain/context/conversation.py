"""A request as context governance receives it: its fields, and its items as raw bytes.

A wire adapter does not decode a request's conversation: it hands over each item's exact
JSON bytes (:class:`Conversation`), with an :class:`ItemCodec` that reads one item into
the neutral :class:`~sessionwarden.domain.context.messages.Message` and writes one back.

So recognising a resent history costs one hash per item, O(bytes), and only the items the
daemon has not seen yet are decoded, O(new): a 7 MB history resent with one new message
is not decoded again. The upstream body is the fields and the governed items put back
together by concatenation (``domain.context.transcript.assemble_body``), never re-encoded.
"""

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

from sessionwarden.domain.context.messages import Message

__all__ = ["DERIVED_PREFIX", "Conversation", "ItemCodec", "derived_session_id"]

#: How the id of a session derived from its conversation starts.
DERIVED_PREFIX = "auto-"


class ItemCodec(Protocol):
    """One wire format's conversation items, read and written one at a time."""

    items_key: str
    #: The request's ``tool_choice`` that lets the model call no tool, in this format, as
    #: JSON (the runaway stage's grace call: the tools stay, so a tool history stays valid).
    tool_choice_none: bytes

    def read_item(self, raw: bytes) -> Message | str:
        """The item as a neutral message, or a short sentence saying why it is invalid."""
        ...

    def write_item(self, message: Message) -> bytes:
        """The item's JSON bytes (an untouched message: the bytes it was read from)."""
        ...

    def is_system(self, raw: bytes) -> bool:
        """Whether the item carries system (or developer) instructions."""
        ...


class Conversation:
    """A request body split for governance: ``fields`` decoded, ``items`` as raw bytes.

    ``fields`` is every top-level field but the conversation (``codec.items_key``), as the
    client sent them; an adapter adjusts a copy for upstream (the model name, usage on
    streams). ``items`` are never mutated; governance builds a new list.
    """

    __slots__ = ("codec", "fields", "fields_bytes", "items")

    def __init__(self, fields: dict[str, Any], items: Sequence[bytes], codec: ItemCodec,
                 fields_bytes: bytes = b"{}") -> None:
        """Hold ``fields``, the raw ``items`` and their ``codec``.

        ``fields_bytes`` is the encoded fields *as they will be sent upstream* (the
        upstream model name, usage requested): the HTTP layer sets it through the
        provider's adapter before admission, so what is recorded is what is sent.
        """
        self.fields = fields
        self.items = items
        self.codec = codec
        self.fields_bytes = fields_bytes

    def with_items(self, items: Sequence[bytes]) -> "Conversation":
        """The same request with other items (the governed ones)."""
        return Conversation(self.fields, items, self.codec, self.fields_bytes)

    def __repr__(self) -> str:
        return f"Conversation({len(self.items)} items)"


def derived_session_id(conversation: Conversation) -> str:
    """The session of a call that names none: a digest of how its conversation began.

    The leading system items and the first item after them (the task an agent was given)
    are the same bytes at every call of one agent's run, and differ between two agents
    (their prompts or their tasks), so two agents without ``X-Session-Id`` never share a
    governed history (one shared ``implicit`` session reset it at every call). Two runs
    of the very same prompt and task do share one: they need ``X-Session-Id``.
    """
    items = conversation.items
    leading = 0
    while leading < len(items) and conversation.codec.is_system(items[leading]):
        leading += 1
    digest = hashlib.sha256()
    for raw in items[:leading + 1]:
        digest.update(len(raw).to_bytes(8, "big"))  # framed: no two splits hash alike
        digest.update(raw)
    return DERIVED_PREFIX + digest.hexdigest()[:20]
