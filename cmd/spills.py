"""The performer of the context stage's spill work: writing spill files, off the loop.

The stage decides which tool results to spill and what their stand-ins say; the files
are I/O, so it asks for them (``domain.spill_turns.SpillWork``) and the proxy's
admission does the work here, in a worker thread — each write ends with two fsyncs,
which must not stall the event loop — then resumes the stage with what failed. A
failure is never an error for the call: the stage falls back to inline truncation
with an explicit marker, and the event that records it says why.
"""

import asyncio

from loguru import logger
from sessionwarden.domain.spill_turns import SpillOutcome, SpillWork
from sessionwarden.store.errors import SpillUnavailable
from sessionwarden.store.spill import SpillStore

__all__ = ["write_spills"]


def _write(store: SpillStore, work: SpillWork) -> SpillOutcome:
    failed: dict[str, str] = {}
    for spill in work.files:
        try:
            store.put(spill.data)
        except SpillUnavailable as exc:
            failed[spill.name] = str(exc)
    return SpillOutcome(failed)


async def write_spills(store: SpillStore, work: object) -> SpillOutcome:
    """Write every file of ``work`` (a :class:`SpillWork`); say which could not be."""
    assert isinstance(work, SpillWork), work
    outcome = await asyncio.to_thread(_write, store, work)
    for name, why in outcome.failed.items():
        logger.warning("spill {} not written ({}): truncated inline instead", name, why)
    return outcome
