"""The daemon's admission stages, in the order they run: the one place to add a stage.

Request validation, the runaway guards (``domain.admission.runaway_stage``: the turn's
iteration budget and grace call, the tool-loop guardrails), spend caps
(``domain.admission.caps_stage``: the ledger's reservation or refusal, recorded), then
context governance (``domain.admission.context_stage``: recognition of the resent
history, tool-result spill, compression).
"""

from collections.abc import Callable, Collection
from datetime import datetime
from functools import partial

from sessionwarden.config import Config
from sessionwarden.domain.admission.ahead import PriceOf
from sessionwarden.domain.admission.caps_stage import spend_caps
from sessionwarden.domain.admission.context_stage import ContextSettings, govern
from sessionwarden.domain.admission.pipeline import Pipeline, StageResult, stage
from sessionwarden.domain.admission.runaway_stage import RunawaySettings, govern_runaway
from sessionwarden.domain.admission.validation import validate_request
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState

__all__ = ["default_pipeline"]


def default_pipeline(config: Config, spill_dir: str = "spill",
                     record_messages: bool = True,
                     holds_secret: Callable[[bytes], bool] | None = None,
                     scrub: Callable[[str], str] | None = None,
                     evicted: Collection[str] = frozenset(),
                     price: PriceOf | None = None) -> Pipeline:
    """The pipeline every session's calls go through under ``config``.

    ``spill_dir`` is where spill files are written, as the agent should read it (an
    absolute path in the daemon); ``record_messages`` False keeps message contents out of
    the log (only their keys and sizes are recorded); ``holds_secret`` finds contents
    that must not be stored because they hold one of the daemon's keys; ``scrub``
    replaces the secrets of a tool result before it is spilled; ``evicted`` names the
    spill files evicted since (a live view), whose stand-ins are re-rendered; ``price``
    prices a model (what a compaction costs in cache is recorded with it).
    """
    settings = ContextSettings(config, spill_dir, record_messages)
    if holds_secret is not None:
        settings = settings._replace(holds_secret=holds_secret)
    if scrub is not None:
        settings = settings._replace(scrub=scrub)
    settings = settings._replace(evicted=evicted, price=price)
    bound = partial(govern, settings)
    guarded = partial(govern_runaway, RunawaySettings.from_config(config))

    @stage("runaway")
    def runaway(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
        return guarded(state, request, now)

    @stage("context")
    def context(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
        return bound(state, request, now)

    return Pipeline([validate_request, runaway, spend_caps, context])
