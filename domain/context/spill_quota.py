"""The spill directory's quota: which files go, least recently referenced first (issue 21, §11).

Pure bookkeeping, no I/O: ``cmd/daemon/spills.py`` owns the directory and asks this module what
to evict before it writes, then tells it what it wrote, reused and deleted.

The rules:

* **The bound** is ``[tools] spill_max_mib`` (256 MiB unless written), in bytes of file
  content (what ``stat`` calls the size; a file's blocks and the directory's entries
  are not counted).
* **The order** is the order of last reference: a file is referenced when it is written
  and every time a later spill names it again (the same content spilled again, in any
  session, or after a restart); :meth:`SpillQuota.load` takes the order at start from
  the files' modification times, which a reference renews.
* **Room** (:meth:`SpillQuota.room_for`): a new file that does not fit evicts the least
  recently referenced files until it does, but never one the same write needs (a call's
  own spills never push each other out), and a file larger than the quota, or one that
  only fits by evicting such files, is not written at all (the stand-in is the inline
  truncation, which says the output could not be saved).
* **At start** (:meth:`SpillQuota.over`): a directory already over its quota (the
  setting was lowered, files were copied in) is brought under it the same way.
* **What was evicted** is remembered (:meth:`SpillQuota.gone`), at most
  :data:`MAX_REMEMBERED` names, the newest: a live session's stand-in that names such a
  file is re-rendered at its next call to say so (``domain.context.spill_turns.mark_evicted``).
  A name written again is forgotten. Memory only: after a restart every session's
  history is governed afresh from the client's own results, so its files are written
  again and its stand-ins are true.
"""

from collections import OrderedDict
from collections.abc import Collection, Iterable, Set
from typing import NamedTuple

__all__ = ["MAX_REMEMBERED", "MIB", "Eviction", "SpillQuota"]

#: Bytes in a MiB (``spill_max_mib``'s unit).
MIB = 1024 * 1024
#: How many evicted names are remembered for the stand-ins that still name them.
MAX_REMEMBERED = 65_536


class Eviction(NamedTuple):
    """One file to evict: its name and its size in bytes."""

    name: str
    size: int


class SpillQuota:
    """The spill directory's files in order of last reference, and its bound in bytes.

    Mutable and not thread-safe: its owner serialises the calls (``cmd/daemon/spills.py`` holds a
    lock around each decision and the I/O that follows it).
    """

    def __init__(self, max_bytes: int, remembered: int = MAX_REMEMBERED) -> None:
        """A quota of ``max_bytes`` (≥ 1) over no file yet."""
        self.max_bytes = max_bytes
        self.used = 0
        self._files: OrderedDict[str, int] = OrderedDict()  # least recent first
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered

    def load(self, files: Iterable[tuple[str, int, int]]) -> None:
        """Take the directory as found: ``(name, size, last reference in ns)`` per file.

        Ordered by the time, then the name (so two files of one instant keep one order).
        """
        for name, size, _ in sorted(files, key=lambda f: (f[2], f[0])):
            self.add(name, size)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a file the quota counts."""
        return name in self._files

    def __len__(self) -> int:
        """How many files the quota counts."""
        return len(self._files)

    def size_of(self, name: str) -> int | None:
        """The size ``name`` was counted at, None when it is not counted."""
        return self._files.get(name)

    def order(self) -> list[str]:
        """The counted files, least recently referenced first."""
        return list(self._files)

    def touch(self, name: str) -> None:
        """``name`` was referenced again: it becomes the most recent."""
        if name in self._files:
            self._files.move_to_end(name)

    def add(self, name: str, size: int) -> None:
        """``name`` (``size`` bytes) was written: counted, the most recent, not gone."""
        self.remove(name)
        self._files[name] = size
        self.used += size
        self._gone.pop(name, None)

    def remove(self, name: str) -> None:
        """``name`` is no longer counted (rewritten, or deleted by someone else)."""
        size = self._files.pop(name, None)
        if size is not None:
            self.used -= size

    def evicted(self, name: str) -> None:
        """``name`` was evicted: not counted, and remembered as gone."""
        self.remove(name)
        self._gone[name] = None
        self._gone.move_to_end(name)
        while len(self._gone) > self._remembered:
            self._gone.popitem(last=False)

    def room_for(self, size: int, keep: Set[str] = frozenset()) -> list[Eviction] | None:
        """The files to evict, least recent first, so that ``size`` more bytes fit.

        ``[]`` when it fits already; None when it cannot fit: larger than the quota, or
        only by evicting a file of ``keep`` (the files the same write needs).
        """
        if size > self.max_bytes:
            return None
        excess = self.used + size - self.max_bytes
        victims: list[Eviction] = []
        for name, held in self._files.items():
            if excess <= 0:
                break
            if name in keep:
                continue
            victims.append(Eviction(name, held))
            excess -= held
        return victims if excess <= 0 else None

    def over(self) -> list[Eviction]:
        """The files to evict, least recent first, to bring the directory under its quota."""
        excess = self.used - self.max_bytes
        victims: list[Eviction] = []
        for name, held in self._files.items():
            if excess <= 0:
                break
            victims.append(Eviction(name, held))
            excess -= held
        return victims

    def gone(self) -> Collection[str]:
        """The names evicted and not written since (a live view, newest last)."""
        return self._gone.keys()
