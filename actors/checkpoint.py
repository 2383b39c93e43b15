"""CheckpointActor: the safety net that keeps the write-ahead log short; records checkpoints.

In the daemon the writer connection keeps SQLite's automatic checkpoint (every 1,000 WAL
pages, run by the writer between two commits): that is when a checkpoint can complete
and let the next commit restart the WAL (docs/architecture/store.md, "Checkpoints").

On top of it, the store tells this actor about each commit, and every ``every`` commits it runs a
PASSIVE checkpoint on its own connection (it never blocks writers or readers). PASSIVE
cannot reset the WAL while readers keep starting transactions on it, so when the WAL
file grows beyond ``max_wal_bytes`` it escalates to TRUNCATE, whose busy handler waits
(briefly) for the current readers to finish so the next writer starts at the front of a
zero-length file. At shutdown it runs a final TRUNCATE. Each checkpoint is recorded as
WalCheckpointed on ``store-checkpoints``.
"""

import os
from collections.abc import Callable
from pathlib import Path

import apsw
from loguru import logger
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.actors.messages import Committed, new_event
from sessionwarden.events import WalCheckpointed
from sessionwarden.store import ANY, EventLog, StreamAppend
from sessionwarden.store.schema import connect

__all__ = ["CHECKPOINT_STREAM", "CheckpointActor"]

CHECKPOINT_STREAM = "store-checkpoints"

_MODES = {
    "PASSIVE": apsw.SQLITE_CHECKPOINT_PASSIVE,
    "TRUNCATE": apsw.SQLITE_CHECKPOINT_TRUNCATE,
}


class CheckpointActor(GovernedActor):
    """Runs WAL checkpoints every ``every`` commits and at shutdown."""

    def __init__(
        self,
        log: EventLog,
        *,
        every: int = 50,
        max_wal_bytes: int = 64 * 1024 * 1024,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Checkpoint the database of ``log`` every ``every`` (at least 2) commits.

        Each checkpoint appends an event, which is itself a commit: with ``every`` of 1
        the actor would feed itself forever; from 2 on, its own events alone never reach
        the threshold again.
        """
        if every < 2:
            raise ValueError("checkpoint every must be at least 2 commits")
        super().__init__(on_failure)
        self._log = log
        self._every = every
        self._max_wal = max_wal_bytes
        self._commits = 0
        self._conn: apsw.Connection | None = None
        self.checkpoints: list[tuple[str, int, int]] = []

    @property
    def wal_path(self) -> Path:
        """The database's write-ahead log file."""
        return self._log.path.with_name(self._log.path.name + "-wal")

    def on_start(self) -> None:
        """Open the actor's own connection (checkpoints need one that may write)."""
        self._conn = connect(self._log.path)
        # A TRUNCATE holds the write lock while it waits for readers: keep that wait short
        # so appends stall for at most this long (they retry on busy), and try again at
        # the next threshold instead.
        self._conn.set_busy_timeout(100)

    def on_stop(self) -> None:
        """Final TRUNCATE checkpoint, then close the connection."""
        try:
            self._checkpoint("TRUNCATE", "shutdown", wait=True)
        finally:
            if self._conn is not None:
                self._conn.close()

    def handle(self, message: object, reply: Reply) -> object:
        """Count commits; checkpoint every ``every`` of them."""
        if not isinstance(message, Committed):
            raise TypeError(f"CheckpointActor cannot handle {type(message).__name__}")
        self._commits += max(message.commits, 1)  # any tick counts, even a batch of none
        if self._commits >= self._every:
            self._commits = 0
            try:
                wal = os.stat(self.wal_path).st_size
            except FileNotFoundError:
                wal = 0
            if wal > self._max_wal:
                self._checkpoint("TRUNCATE", f"wal {wal} bytes > {self._max_wal}")
            else:
                self._checkpoint("PASSIVE", f"{self._every} commits")
        return None

    def _checkpoint(self, mode: str, reason: str, wait: bool = False) -> None:
        assert self._conn is not None
        try:
            frames, done = self._conn.wal_checkpoint(mode=_MODES[mode])
        except apsw.BusyError:
            logger.warning("{} checkpoint skipped: readers still hold the WAL", mode)
            return
        self.checkpoints.append((mode, frames, done))
        event = new_event(WalCheckpointed(
            mode=mode, wal_frames=frames, checkpointed_frames=done, reason=reason))
        request = self._log.submit([StreamAppend(CHECKPOINT_STREAM, (event,), ANY)])
        if wait:
            request.wait(30)
            # The event itself went to the WAL: truncate once more so a clean shutdown
            # leaves no WAL content behind.
            self._conn.wal_checkpoint(mode=_MODES[mode])
