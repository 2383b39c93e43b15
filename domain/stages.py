"""The daemon's admission stages, in the order they run: the one place to add a stage.

Today: request validation. Planned, each in its own module of this package, in this
order: ``budgets`` (spend caps reserved before sending), ``guardrails`` (iteration budget,
tool-loop guardrails), ``spill`` (tool-result spill and the per-turn budget), and
``compression`` (governed compression; its model summariser is the first stage to
:class:`~sessionwarden.domain.admission.Need` work).
"""

from sessionwarden.config import Config
from sessionwarden.domain.admission import Pipeline
from sessionwarden.domain.validation import validate_request

__all__ = ["default_pipeline"]


def default_pipeline(config: Config) -> Pipeline:
    """The pipeline every session's calls go through under ``config``."""
    del config  # the stages to come read their sections of it
    return Pipeline([validate_request])
