"""CompressorActor: compression work off the sessions' threads, and the summariser's record.

It runs a preparation's phases (:class:`Prepare`: decoding and cutting a history of
thousands of items; :class:`FinishPreparation`: assembling it around the summary) on its
own thread, never a session shard's nor the event loop (issue 23), and answers
:class:`SummariserCooling` from ``view_summarisers``: a summary model that fails for one
session is cooling for all, and after a restart. The flow: ``cmd/daemon/prepare.py``.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.domain.context.prepared import finish_preparation, start_preparation
from sessionwarden.store import EventLog
from sessionwarden.views.summarisers import summariser_cooldown

__all__ = ["CompressorActor", "FinishPreparation", "Prepare", "SummariserCooling"]


class SummariserCooling(msgspec.Struct, frozen=True):
    """Ask whether summary model ``model`` (``provider/model``) is cooling after failures.

    Reply: until when (a datetime), or None: it may be asked.
    """

    model: str


class Prepare(msgspec.Struct, frozen=True):
    """Start preparing ``work`` (a ``PrepareWork``).

    Reply: ``(Prepared, SummaryWork)``, or the reason there is nothing to prepare.
    """

    work: Any


class FinishPreparation(msgspec.Struct, frozen=True):
    """Assemble ``prepared`` around the summary ``result`` (a ``SummaryResult``).

    Reply: a ``PreparedCompression``, or the reason there is none.
    """

    work: Any
    prepared: Any
    result: Any


class CompressorActor(GovernedActor):
    """Runs compression work off the sessions' threads; knows the summariser's cooldowns."""

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None,
                 log: EventLog | None = None, clock: Clock | None = None) -> None:
        """Read the log's ``view_summarisers`` (None: no log, nothing is cooling)."""
        super().__init__(on_failure)
        self._log = log
        self._clock = clock or SystemClock()

    def handle(self, message: object, reply: Reply) -> object:
        """Answer :class:`SummariserCooling`, :class:`Prepare`, :class:`FinishPreparation`."""
        if isinstance(message, SummariserCooling):
            return self._cooling(message.model)
        if isinstance(message, Prepare):
            return start_preparation(message.work)
        if isinstance(message, FinishPreparation):
            return finish_preparation(message.work, message.prepared, message.result)
        raise TypeError(f"CompressorActor does not take {type(message).__name__}")

    def _cooling(self, model: str) -> datetime | None:
        if self._log is None:
            return None
        return summariser_cooldown(self._log.read_connection(), model, self._clock.now())
