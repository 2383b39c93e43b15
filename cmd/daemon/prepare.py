"""Compressions prepared ahead: the background work a call past the prepare mark starts.

The compression stage decides (``domain.admission.ahead``); this module runs the work on
the event loop, never in a client call's path, and a call that crosses the trigger while
it runs waits for it a bounded while (:func:`await_preparation`).

Rules:
- Once the admission of a call past the prepare mark is durable, :func:`start_preparation`
  starts a task: phases 1-2 in the CompressorActor (:class:`~sessionwarden.actors.shells.
  Prepare`), the summary side call (``cmd.daemon.summarise``: admitted, metered and
  completed like any, its parent the call that started it), phase 4 in the
  CompressorActor, then the session records the result or drops it
  (:class:`~sessionwarden.actors.messages.AdoptPrepared`).
- A call that crosses the trigger meanwhile waits up to ``[compression]
  prepare_wait_s``, then compacts on its own.
- Tasks are memory only: a preparation in flight at a stop is cancelled; the next call
  past the mark prepares again.
"""

import asyncio
import time
from functools import partial
from typing import Any

from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.messages import AdoptPrepared
from sessionwarden.actors.shells import FinishPreparation, Prepare
from sessionwarden.cmd.daemon.runtime import Performer, Runtime
from sessionwarden.cmd.daemon.summarise import summarise
from sessionwarden.domain.context.prepared import (
    AwaitPreparation,
    Preparation,
    PreparedCompression,
    PrepareWork,
)
from sessionwarden.domain.context.summariser import SummaryResult
from sessionwarden.errors import Unavailable

__all__ = ["await_preparation", "preparation_performers", "start_preparation"]


def preparation_performers(rt: Runtime) -> dict[type, Performer]:
    """The performer this module adds to ``rt.performers`` (and its starter)."""
    rt.starters[PrepareWork] = partial(start_preparation, rt)
    return {AwaitPreparation: partial(await_preparation, rt)}


def start_preparation(rt: Runtime, work: Any) -> None:
    """Start preparing ``work`` (a PrepareWork) in the background; one per session."""
    key = (work.session_id, work.call_id)
    task = asyncio.get_running_loop().create_task(_prepare(rt, work),
                                                  name=f"prepare-{work.call_id}")
    rt.preparations[key] = task
    # Dropped from the map once done: a waiting call that comes later finds the session's
    # state (CompressionPrepared) instead, and memory does not grow with sessions.
    task.add_done_callback(lambda _: rt.preparations.pop(key, None))


async def _prepare(rt: Runtime, work: PrepareWork) -> PreparedCompression | None:
    started = time.monotonic()
    outcome: object
    try:
        first = await ask(rt.compressor, Prepare(work))
        if isinstance(first, str):
            outcome = first
        else:
            prepared, summary_work = first
            result = await summarise(rt, summary_work)
            outcome = (await ask(rt.compressor, FinishPreparation(work, prepared, result))
                       if isinstance(result, SummaryResult) else "no summary")
    except Unavailable as exc:
        outcome = f"the compressor is unavailable: {exc}"
    except Exception as exc:  # recorded as dropped: the session must not wait for it
        logger.exception("session {}: preparing from call {} failed", work.session_id,
                         work.call_id)
        outcome = f"failed: {type(exc).__name__}"
    try:
        adopted = await ask(rt.session_ref(work.session_id),
                            AdoptPrepared(work.session_id, work.call_id, outcome))
    except Unavailable as exc:
        logger.warning("session {}: the compression prepared from call {} is lost: {}",
                       work.session_id, work.call_id, exc)
        return None
    logger.info("session {}: compression from call {} {} in {:.0f} ms", work.session_id,
                work.call_id, "prepared" if adopted is not None else f"dropped ({outcome})",
                (time.monotonic() - started) * 1000)
    return adopted if isinstance(adopted, PreparedCompression) else None


async def await_preparation(rt: Runtime, work: AwaitPreparation) -> Preparation:
    """The preparation ``work`` names, once done, waited for up to ``work.wait_s``."""
    task = rt.preparations.get((work.session_id, work.call_id))
    if task is None:
        return Preparation(None, 0)
    started = time.monotonic()
    try:
        # Shielded: the wait may end, the preparation goes on (a later call may use it).
        prepared = await asyncio.wait_for(asyncio.shield(task), timeout=work.wait_s)
    except TimeoutError:
        prepared = None
    except Exception:  # a failed preparation is no preparation; it logged why
        prepared = None
    return Preparation(prepared, round((time.monotonic() - started) * 1000))
