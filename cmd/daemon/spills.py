"""The performer of the context stage's spill work: spill files written off the loop, bounded.

The stage decides which tool results to spill and what their stand-ins say; the files
are I/O, so it asks for them (``domain.context.spill_turns.SpillWork``) and the proxy's
admission does the work here, in a worker thread — each write ends with two fsyncs,
which must not stall the event loop — then resumes the stage with what failed. A
failure is never an error for the call: the stage falls back to inline truncation
with an explicit marker, and the event that records it says why.

:class:`SpillKeeper` keeps the directory under ``[tools] spill_max_mib`` (issue 21, §11;
the policy is ``domain.context.spill_quota``): before a file that does not fit is written, the
least recently referenced files are evicted. Each eviction is a
:class:`~sessionwarden.events.SpillEvicted` on the ``spill`` stream, appended (durable)
*before* the file is deleted, so the log never misses one; when that append fails
nothing is deleted and the new file is not written (truncated inline instead). A file
named again by a later spill is referenced (moved last, its time renewed), and reused
only when it holds those very bytes (``store.spill``). The names evicted are
remembered for the context stage, which re-renders a live session's stand-in that still
names one (``domain.context.spill_turns.mark_evicted``). At start (:meth:`SpillKeeper.recover`)
the directory is read and, when it is already over the quota, brought under it.

One lock serialises the decisions and the writes: spills are rare (a result over
~100,000 characters) and a write is a few milliseconds; two calls deciding room at once
would each count the room the other takes.
"""

import asyncio
import threading
from collections.abc import Collection

from loguru import logger
from sessionwarden.actors.messages import new_event
from sessionwarden.domain.context.spill_quota import MIB, Eviction, SpillQuota
from sessionwarden.domain.context.spill_turns import SpillOutcome, SpillWork
from sessionwarden.events import SPILL_STREAM, SpillEvicted
from sessionwarden.store import EventLog
from sessionwarden.store.errors import SpillUnavailable, StoreError
from sessionwarden.store.spill import SpillStore

__all__ = ["SpillKeeper", "write_spills"]


class SpillKeeper:
    """The spill directory under its quota: writes, reuses, evicts (each eviction recorded)."""

    def __init__(self, store: SpillStore, max_mib: int, log: EventLog) -> None:
        """Keep ``store``'s directory under ``max_mib`` MiB, recording evictions in ``log``."""
        self.store = store
        self.quota = SpillQuota(max_mib * MIB)
        self._log = log
        self._lock = threading.Lock()
        self._loaded = False

    def recover(self) -> int:
        """Read the directory and evict what is over the quota; the number evicted.

        Runs at start, before any request. An unreadable directory is only logged: every
        write will fail the same way and say so in its call's event.
        """
        with self._lock:
            if not self._load():
                return 0
            victims = self.quota.over()
            if victims and not self._evict(victims, "quota_at_start"):
                return 0
        if victims:
            logger.info("spill directory over its quota of {} MiB at start: {} file(s), "
                        "{:.1f} MiB evicted", self.quota.max_bytes // MIB, len(victims),
                        sum(v.size for v in victims) / MIB)
        return len(victims)

    def gone(self) -> Collection[str]:
        """The names evicted and not written since (the context stage reads it)."""
        return self.quota.gone()

    def write(self, work: SpillWork) -> SpillOutcome:
        """Write every file of ``work``, evicting as needed; say which could not be."""
        failed: dict[str, str] = {}
        written: set[str] = set()
        with self._lock:
            self._load()
            for spill in work.files:
                why = self._put(spill.name, spill.data, written)
                if why:
                    failed[spill.name] = why
                else:
                    written.add(spill.name)
        return SpillOutcome(failed)

    def _load(self) -> bool:
        """Count the files found in the directory, once; False when it cannot be read."""
        if self._loaded:
            return True
        try:
            self.quota.load(self.store.files())
        except SpillUnavailable as exc:
            logger.warning("spill directory not read: {}", exc)
            return False
        self._loaded = True
        return True

    def _put(self, name: str, data: bytes, written: set[str]) -> str:
        """Write (or reuse) one file; "" when it is in place, else why not."""
        size = len(data)
        if self.quota.size_of(name) == size:
            # Named again: the store reuses it if it holds these very bytes; either way it
            # is referenced now, so it moves last.
            self.quota.touch(name)
            written.add(name)
        else:
            self.quota.remove(name)  # counted at another size: whatever it holds goes
        victims = [] if name in self.quota else self.quota.room_for(size, keep=written)
        if victims is None:
            return (f"the spill quota ([tools] spill_max_mib = {self.quota.max_bytes // MIB}) "
                    "has no room for it")
        if victims and not self._evict(victims, "quota"):
            return "the spill quota is full and an eviction could not be recorded"
        try:
            self.store.put(data)
        except SpillUnavailable as exc:
            self.quota.remove(name)
            return str(exc)
        self.quota.add(name, size)
        return ""

    def _evict(self, victims: list[Eviction], reason: str) -> bool:
        """Record, then delete, each of ``victims``; False when nothing could be recorded."""
        used, events = self.quota.used, []
        for victim in victims:
            events.append(SpillEvicted(file=victim.name, bytes=victim.size, reason=reason,
                                       quota_bytes=self.quota.max_bytes, used_bytes=used))
            used -= victim.size
        try:
            self._log.append(SPILL_STREAM, [new_event(event) for event in events])
        except StoreError as exc:
            logger.warning("spill eviction not recorded ({}): nothing evicted",
                           type(exc).__name__)
            return False
        for victim in victims:
            try:
                self.store.remove(victim.name)
            except SpillUnavailable as exc:
                # Recorded as evicted, so no stand-in will promise it; the bytes stay
                # until a later start finds them over the quota.
                logger.warning("spill file {} not deleted: {}", victim.name, exc)
            self.quota.evicted(victim.name)
        return True


async def write_spills(keeper: SpillKeeper, work: object) -> SpillOutcome:
    """Write every file of ``work`` (a :class:`SpillWork`); say which could not be."""
    assert isinstance(work, SpillWork), work
    outcome = await asyncio.to_thread(keeper.write, work)
    for name, why in outcome.failed.items():
        logger.warning("spill {} not written ({}): truncated inline instead", name, why)
    return outcome
