"""A session's governed history: what the daemon forwarded, kept as hashes and stand-ins.

Issue 11, "Transparent to stateless clients". A client resends its whole history every
call; the daemon forwards a *governed* form of it (tool results spilled, old turns
compressed). Invariant: between two compressions what is forwarded is append-only — the
items sent at call k are sent again, byte for byte, at call k+1, followed by the new
ones, governed in their turn. So a summary is computed once, spills are not redone, and
the provider's prompt cache keeps hitting on the stable prefix.

:class:`GovernedHistory` is what makes that possible without keeping a copy of the
history: the digests of the client's items it covers (in order) and, per forwarded
item, either "the client's own item number *i*" (its bytes come from the request being
governed, whose prefix matched digest by digest) or the replaced bytes (a spill's stand-in,
a pruned form, a summary). Memory per session is 16 bytes a client item plus the
stand-ins.

The client's leading system (and developer) items are not part of it: they are always
taken from the request itself (agents put dates and directory listings there).
:func:`recognise` compares a request's digests with the history's; a history that no
longer matches (the client edited or compacted its own) is recorded with the reason and
governed afresh.
"""

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sessionwarden.domain.context.summariser import SummariserHealth
from sessionwarden.domain.context.trigger import CompressionGuard

__all__ = ["ContextUpdate", "GovernedHistory", "Item", "Recognition", "digest", "recognise"]


def digest(raw: bytes) -> bytes:
    """An item's digest: the first 16 bytes of its SHA-256 (its content key, in bytes)."""
    return hashlib.sha256(raw).digest()[:16]


class Item(NamedTuple):
    """One forwarded item (after the system items).

    Attributes:
        digest: for a stand-in, :func:`digest` of ``raw``; for a client item, its
            identity (``domain.context.markers.identity``: its digest without cache
            markers, which the client moves from round to round).
        size: their length.
        tokens: our estimate of its tokens.
        raw: the bytes sent when they are not the client's (a stand-in), else None.
        source: the client item it forwards unchanged (index among the client's
            non-system items), -1 for a stand-in.
        key: the content key of the bytes last forwarded for it when it is not
            ``digest`` (a client item sent with a cache marker, a stand-in given the
            client's marker); empty otherwise.
        origin: the client item a stand-in replaces (a spill's), whose cache marker it
            takes when forwarded; -1 for none (a summary, or not known after a restart).
    """

    digest: bytes
    size: int
    tokens: int
    raw: bytes | None = None
    source: int = -1
    key: bytes = b""
    origin: int = -1


class GovernedHistory(NamedTuple):
    """What a session forwarded last, and the client items it covers.

    Attributes:
        client: the digests of the client's non-system items, in order, that the items
            stand for (all of them: a compression replaces items, not coverage).
        items: the forwarded items, in order.
        call_id: the call that forwarded them ("" for none yet).
        tokens: the items' estimated tokens, summed.
        compressed: how many compressions it went through.
        summary: the last summary (the builtin's structure or a model's text), to be
            updated at the next compression.
        fields, system: the content refs of the fields and system messages that call
            sent (a record names them again only when they change); ``system_tokens``
            their estimate (not read again while they stay the same).
    """

    client: tuple[bytes, ...] = ()
    items: tuple[Item, ...] = ()
    call_id: str = ""
    tokens: int = 0
    compressed: int = 0
    summary: object = None
    fields: tuple[str, int] | None = None
    system: tuple[tuple[str, int], ...] | None = None
    system_tokens: int = 0
    #: The tokens of the items before the newest one holding a provider's own compaction
    #: (the provider drops them: ``domain.context.boundaries.unread_tokens``); None when
    #: not known yet (rebuilt after a restart, or just compressed): found by one scan.
    unread: int | None = None

    def forwarded(self, client_items: Sequence[bytes]) -> list[bytes]:
        """The bytes of each item, the unchanged ones taken from ``client_items``."""
        return [item.raw if item.raw is not None else client_items[item.source]
                for item in self.items]


class Recognition(NamedTuple):
    """How a request's items compare with a governed history.

    ``matched`` client items are the history's (all of them when ``reason`` is "").
    """

    matched: int
    reason: str = ""


def recognise(history: GovernedHistory, digests: Sequence[bytes]) -> Recognition:
    """Whether ``digests`` (a request's non-system items) extend ``history``'s client items."""
    known = history.client
    size = len(known)
    if len(digests) >= size and tuple(digests[:size]) == known:
        return Recognition(size)
    matched = 0
    for ours, theirs in zip(known, digests, strict=False):
        if ours != theirs:
            break
        matched += 1
    # Short reasons: a stateless client starts a new conversation at every call, and each
    # reset is an event of the log (``matched`` says how much still matched).
    if matched == len(digests) < size:
        return Recognition(matched, f"shortened to {len(digests)} of {size} messages")
    if matched == 0:
        return Recognition(matched, "a new conversation (message 1 differs)")
    return Recognition(matched, f"message {matched + 1} differs (edited or compacted)")


class ContextUpdate(NamedTuple):
    """A session's context state after an admission, adopted once that is durable.

    Derived state: a session loaded afresh (a restart, an idle session unloaded) folds
    it back from its stream (``domain.session.recover``), the history rebuilt from the
    call records (``domain.context.rebuild``).
    """

    history: GovernedHistory
    guard: CompressionGuard
    threshold: int
    health: SummariserHealth = SummariserHealth()
    #: The model's window and whether compression was on (recorded with the threshold).
    window: int = 0
    compression: bool = True
    #: When this call was admitted: the next one measures the session's idle time (and so
    #: whether the provider's prompt cache is still warm) from it.
    last_at: datetime | None = None
    #: A compaction to prepare ahead from this history (a ``domain.context.prepared.
    #: PrepareWork``), started by the proxy once the admission is durable; never kept in
    #: the session's state (it holds the request's items).
    prepare: object = None
    #: The tokens of the items before a provider's own compaction, which the provider
    #: drops (``domain.context.boundaries.unread_tokens``): not in the call's estimate.
    unread: int = 0
