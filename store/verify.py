"""Verify the hash chain: find the first event that was modified, removed, moved or forged.

The chain is walked in sequence order with one event of look-ahead, which is enough to
tell the kinds of damage apart:

- ``missing``: a sequence number is absent (an event was deleted);
- ``modified``: an event links to its predecessor but its bytes no longer match its hash;
- ``reordered``: an event links to the event stored *after* it (two events were swapped);
- ``inserted``: the next event links past this one, to its predecessor, so this event
  was forged into the chain even though its own hash is self-consistent;
- ``unlinked``: an event links to nothing we know.

Truncation of the newest events leaves a valid, shorter chain; only an anchor kept
elsewhere can reveal it: the head hash ``replay --verify`` prints, written down and
compared with the hash of that event later (there is no option that checks it for you).
"""

from collections.abc import Iterable

import msgspec
from sessionwarden.store.hashing import GENESIS, event_hash
from sessionwarden.store.records import RecordedEvent

__all__ = ["ChainReport", "verify_chain"]


class ChainReport(msgspec.Struct, frozen=True):
    """The outcome of a chain walk; ``clean_through`` is the last event found intact."""

    ok: bool
    events: int
    clean_through: int
    head_hash: str
    first_bad_seq: int | None = None
    kind: str | None = None
    detail: str = ""


def verify_chain(events: Iterable[RecordedEvent]) -> ChainReport:
    """Walk ``events`` (the whole log, in sequence order) and report the first damage."""
    expected = 1
    running = GENESIS
    last_good: RecordedEvent | None = None
    count = 0

    def bad(seq: int, kind: str, detail: str) -> ChainReport:
        return ChainReport(
            ok=False, events=count, clean_through=seq - 1, head_hash=running.hex(),
            first_bad_seq=seq, kind=kind, detail=detail,
        )

    iterator = iter(events)
    current = next(iterator, None)
    while current is not None:
        following = next(iterator, None)
        if current.seq != expected:
            return bad(expected, "missing", f"sequence jumps from {expected - 1} to {current.seq}")
        if current.prev_hash != running:
            if last_good is not None and current.prev_hash == last_good.prev_hash:
                running, count = last_good.prev_hash, count - 1  # the forged event is not clean
                return bad(
                    last_good.seq, "inserted",
                    f"event {current.seq} links past event {last_good.seq}, which is not "
                    "part of the original chain",
                )
            if following is not None and following.hash == current.prev_hash:
                return bad(current.seq, "reordered", f"event {current.seq} links to the event "
                           f"stored after it (seq {following.seq})")
            return bad(current.seq, "unlinked", "its prev_hash matches no preceding event")
        digest = event_hash(
            current.prev_hash, current.seq, current.stream, current.version, current.type,
            current.schema_version, current.recorded_at, current.idempotency_key, current.data,
        )
        if digest != current.hash:
            return bad(current.seq, "modified", "its stored bytes do not match its hash")
        running = current.hash
        last_good = current
        expected += 1
        count += 1
        current = following
    return ChainReport(ok=True, events=count, clean_through=count, head_hash=running.hex())
