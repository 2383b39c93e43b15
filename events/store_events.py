"""Events the store's own caretakers record: checkpoints of the write-ahead log."""

from typing import Any, ClassVar

from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster

__all__ = ["STORE_UPCASTERS", "WalCheckpointed"]


class WalCheckpointed(Event, frozen=True):
    """A WAL checkpoint ran; ``mode`` is PASSIVE, FULL, RESTART or TRUNCATE."""

    TAG: ClassVar[str] = "store.wal_checkpointed.v2"

    mode: str
    wal_frames: int
    checkpointed_frames: int
    reason: str = ""


def _same(fields: dict[str, Any]) -> dict[str, Any]:
    return fields  # v2 only stopped storing the tag inside the payload


STORE_UPCASTERS = (Upcaster("store.wal_checkpointed.v1", "store.wal_checkpointed.v2", _same),)
