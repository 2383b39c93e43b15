"""Events the store's own caretakers record: checkpoints of the write-ahead log."""

from sessionwarden.events.base import Event

__all__ = ["WalCheckpointed"]


class WalCheckpointed(Event, frozen=True, tag="store.wal_checkpointed.v1"):
    """A WAL checkpoint ran; ``mode`` is PASSIVE, FULL, RESTART or TRUNCATE."""

    mode: str
    wal_frames: int
    checkpointed_frames: int
    reason: str = ""
