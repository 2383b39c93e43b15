"""CompressorActor: the summariser's record across sessions (issue 23, its first job).

A summary model that fails for one session is cooling for all: before the model
summariser's side call, the proxy asks :class:`SummariserCooling`; the actor answers from
``view_summarisers`` (folded from every session's ``SummariserFailed`` and accepted
summaries, so a restart recovers it). Compaction itself still runs in the session's
context stage; preparing it ahead, off the call's path, is this actor's next job.
"""

from collections.abc import Callable
from datetime import datetime

import msgspec
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.store import EventLog
from sessionwarden.views.summarisers import summariser_cooldown

__all__ = ["CompressorActor", "SummariserCooling"]


class SummariserCooling(msgspec.Struct, frozen=True):
    """Ask whether summary model ``model`` (``provider/model``) is cooling after failures.

    Reply: until when (a datetime), or None: it may be asked.
    """

    model: str


class CompressorActor(GovernedActor):
    """Owns what compaction knows across sessions: today, the summariser's cooldowns."""

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None,
                 log: EventLog | None = None, clock: Clock | None = None) -> None:
        """Read the log's ``view_summarisers`` (None: no log, nothing is cooling)."""
        super().__init__(on_failure)
        self._log = log
        self._clock = clock or SystemClock()

    def handle(self, message: object, reply: Reply) -> object:
        """Answer :class:`SummariserCooling`; refuse anything else."""
        if isinstance(message, SummariserCooling):
            return self._cooling(message.model)
        raise TypeError(f"CompressorActor does not take {type(message).__name__}")

    def _cooling(self, model: str) -> datetime | None:
        if self._log is None:
            return None
        return summariser_cooldown(self._log.read_connection(), model, self._clock.now())
