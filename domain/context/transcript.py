"""What a call sent upstream, as content keys: the rules a replay of a call rebuilds by.

A governed request is two things: its *fields* (every JSON field of the body but the
conversation, already adjusted for upstream: the upstream model name, usage requested)
and its *items* (the conversation's messages, each as the exact JSON bytes sent). The
upstream body is :func:`assemble_body` of the two — plain concatenation, so the daemon
never re-encodes a long history and replay rebuilds the body byte for byte.

Each distinct piece of content is stored once, under :func:`content_key`; a call's
:class:`~sessionwarden.events.RequestRecord` (in its CallAdmitted) lists keys, and only
the keys it added to the governed history of an earlier call (``base`` / ``kept``), and
its fields and system messages only when they changed: :func:`sent_items` follows that
chain back.
"""

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sessionwarden.domain.errors import BrokenChain
from sessionwarden.events import ContentRef, RequestRecord

__all__ = ["SentItems", "assemble_body", "content_key", "content_ref", "sent_items"]


def content_key(data: bytes) -> str:
    """The key a content is stored under: SHA-256, first 16 bytes, as 32 hex characters.

    SHA-256 rather than BLAKE2: it runs on the CPU's SHA extensions here, about twice as
    fast as BLAKE2b over a 7 MB history, and recognising a resent history hashes all of it.
    """
    return hashlib.sha256(data).digest()[:16].hex()


def content_ref(data: bytes) -> ContentRef:
    """``(content_key(data), len(data))``."""
    return content_key(data), len(data)


def assemble_body(fields: bytes, items_key: str, items: Sequence[bytes]) -> bytes:
    """The JSON body: the object ``fields`` with ``items_key`` first, holding ``items``.

    ``fields`` is a JSON object as msgspec encodes it (no whitespace); ``items`` are JSON
    values. The conversation goes first so a request's cacheable prefix is all the body's
    start up to the newest message.
    """
    head = b'{"' + items_key.encode() + b'":[' + b",".join(items) + b"]"
    rest = fields.strip()
    if rest in (b"{}", b""):
        return head + b"}"
    return head + b"," + rest[1:]


class SentItems(NamedTuple):
    """What a call sent, as content refs: its fields, system messages and history."""

    fields: ContentRef
    items_key: str
    system: tuple[ContentRef, ...]
    history: tuple[ContentRef, ...]


def sent_items(call_id: str, find: Callable[[str], RequestRecord | None]) -> SentItems:
    """The fields, system messages and governed history ``call_id`` sent, as content refs.

    ``find`` returns a call's :class:`~sessionwarden.events.RequestRecord` (None if it
    has none). Fields and system messages a record leaves out (None) are its base's.

    Raises:
        BrokenChain: a record, or a base it names, is missing, or a base is shorter than
            what a later call kept of it, or no record in the chain names the fields.
    """
    record = find(call_id)
    if record is None:
        raise BrokenChain(f"call {call_id} has no recorded request")
    chain = [(call_id, record)]
    seen = {call_id}
    while chain[-1][1].base:
        base = chain[-1][1].base
        if base in seen:
            raise BrokenChain(f"call {base}'s recorded request refers back to itself")
        seen.add(base)
        found = find(base)
        if found is None:
            raise BrokenChain(f"call {base} has no recorded request")
        chain.append((base, found))
    fields = next((r.fields for _, r in chain if r.fields is not None), None)
    system = next((r.system for _, r in chain if r.system is not None), ())
    if fields is None:
        raise BrokenChain(f"call {call_id}'s recorded request names no fields")
    history: list[ContentRef] = []
    for step_id, step in reversed(chain):
        if step.kept > len(history):
            raise BrokenChain(f"call {step_id} keeps {step.kept} messages of a "
                              f"history of {len(history)}")
        del history[step.kept:]
        history.extend(step.appended)
    return SentItems(fields, record.items_key, system, tuple(history))
