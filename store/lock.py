"""The single-instance lock: a daemon claims a database through a sidecar file.

The lock is an ``flock`` on ``<db>.lock``, never on the database or its ``-wal``/``-shm``
files: SQLite's own locks are POSIX record locks, which a process loses the moment it
closes *any* descriptor of the same file. ``flock`` locks belong to the open file
description, so the kernel releases ours when the process dies, even by SIGKILL.

A clean release removes the file (a SIGKILLed holder leaves it behind; the next claim
takes it over). Removing a lock file is only safe if the holder unlinks it while still
holding the flock, and every claimant checks after its flock that the path still names
the file it locked: otherwise a process that opened the old file just before the unlink
would lock a file no longer in the directory while a third process created and locked a
new one, and both would believe they held the database.

The file's first line is the holder's pid (named when a second daemon is refused); once
the daemon listens, :meth:`InstanceLock.announce` adds its control URL on a second line,
so a command run beside it (``keys list``) can ask the running daemon what only its
memory holds. :func:`read_announcement` reads that back, and believes it only while the
pid is alive: a SIGKILLed daemon leaves the file behind, and a port it named may belong
to another program by now.
"""

import fcntl
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from sessionwarden.store.errors import StoreClaimed, StoreUnavailable

__all__ = ["Announcement", "InstanceLock", "read_announcement"]


class InstanceLock:
    """An exclusive claim on a database, held until :meth:`release` or process exit."""

    def __init__(self, db_path: Path) -> None:
        """Claim ``db_path``. Its directory must exist: the lock never creates it.

        Raises:
            StoreClaimed: another process holds the claim (its pid is named).
            StoreUnavailable: the lock file cannot be created.
        """
        self.path = db_path.with_name(db_path.name + ".lock")
        self._fd: int | None = None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise StoreUnavailable(
                    f"{self.path}: cannot create the lock file ({exc.strerror})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                first = os.pread(fd, 32, 0).decode(errors="replace").partition("\n")[0]
                holder = first.strip() or "?"
                os.close(fd)
                raise StoreClaimed(
                    f"{db_path} is in use by another sessionwarden daemon (pid {holder})"
                ) from None
            if self._names(fd):
                break
            # The holder we waited for released and unlinked the file between our open()
            # and our flock(): this lock guards nothing. Start over on the current name.
            os.close(fd)
        self._fd = fd
        # A leftover file may have been made open to others: a command believes the
        # announcement only from a file no one else could have written.
        try:
            os.fchmod(fd, 0o600)
        except OSError:
            pass  # another user's file: still a claim, but its announcement is not believed
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def announce(self, url: str) -> None:
        """Record where the daemon holding this claim listens (its base URL)."""
        if self._fd is not None:
            os.pwrite(self._fd, f"{os.getpid()}\n{url}\n".encode(), 0)

    def _names(self, fd: int) -> bool:
        """Whether :attr:`path` names the file open as ``fd``."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Give up the claim and remove the lock file; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # Unlink while the flock is still held (see the module docstring). Only our
            # own file: one a user replaced by hand belongs to someone else.
            if self._names(fd):
                os.unlink(self.path)
        except OSError:
            pass  # a lock file that cannot be removed is harmless: the next claim reuses it
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "InstanceLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Announcement(NamedTuple):
    """A running daemon of a database: its pid and the base URL it listens on."""

    pid: int
    url: str


#: An announcement is two short lines; anything longer is not ours.
_MAX_ANNOUNCEMENT = 512
#: A pid as :class:`InstanceLock` writes it: ASCII digits, no sign, not 0 (``kill(0, …)``
#: would signal our own process group, which is always alive).
_PID = re.compile(r"[1-9][0-9]{0,18}")
#: Linux's largest pid_max; anything above names no process.
_MAX_PID = 1 << 22


def read_announcement(db_path: Path) -> Announcement | None:
    """The daemon holding ``db_path`` and where it listens, or None: no daemon runs.

    None also when the lock file names no URL yet (the daemon is starting) or names a
    process that no longer exists (a SIGKILLed holder's leftover file), and for a file
    the daemon cannot have written: not a regular file (a FIFO would block the read),
    not this user's, or writable by others (whoever could write it could point a command
    and its token elsewhere). The URL is returned as written: the caller decides where
    it may send anything (``cmd/daemon/client.py``).
    """
    path = db_path.with_name(db_path.name + ".lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or info.st_mode & 0o022):
            return None
        text = os.pread(fd, _MAX_ANNOUNCEMENT, 0).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = text.split("\n")
    if len(lines) < 3 or not _PID.fullmatch(lines[0]) or not lines[1].startswith("http://"):
        return None
    pid = int(lines[0])
    if pid > _MAX_PID:
        return None  # os.kill would overflow: no process has it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return None  # alive, but another user's: not a daemon of this user's log
    return Announcement(pid, lines[1].strip())
