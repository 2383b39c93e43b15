"""The single-instance lock: a daemon claims a database through a sidecar file.

The lock is an ``flock`` on ``<db>.lock``, never on the database or its ``-wal``/``-shm``
files: SQLite's own locks are POSIX record locks, which a process loses the moment it
closes *any* descriptor of the same file. ``flock`` locks belong to the open file
description, so the kernel releases ours when the process dies, even by SIGKILL.
"""

import fcntl
import os
from pathlib import Path

from sessionwarden.store.errors import StoreClaimed, StoreUnavailable

__all__ = ["InstanceLock"]


class InstanceLock:
    """An exclusive claim on a database, held until :meth:`release` or process exit."""

    def __init__(self, db_path: Path) -> None:
        """Claim ``db_path``.

        Raises:
            StoreClaimed: another process holds the claim (its pid is named).
            StoreUnavailable: the lock file cannot be created.
        """
        self.path = db_path.with_name(db_path.name + ".lock")
        db_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"{self.path}: cannot create the lock file ({exc})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            self._fd = None
            raise StoreClaimed(
                f"{db_path} is in use by another sessionwarden daemon (pid {holder})"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Give up the claim."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "InstanceLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
