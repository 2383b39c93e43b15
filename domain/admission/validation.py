"""The request-validation stage: a request the upstream cannot serve is refused here.

It runs first in the admission pipeline, so later stages (budgets, guardrails, spill,
compression) only ever see a request with at least one well-formed message. The wire
adapter reports faults of the wire shape (``RequestShape.problems``: a message that is
not an object, a missing role); this stage decides what to do with them and with the
shape's neutral facts.
"""

from datetime import datetime

from sessionwarden.domain.admission.pipeline import Proceed, Refuse, StageResult, stage
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState

__all__ = ["MAX_MESSAGES", "validate_request"]

#: More conversation items than any real agent sends; beyond it a request is refused.
MAX_MESSAGES = 100_000


@stage("validation")
def validate_request(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    """Refuse a request with wire faults, no messages, or absurdly many; else pass it on."""
    shape = request.shape
    if shape.problems:
        return Refuse(400, shape.problems[0], code="invalid_request")
    if shape.message_count == 0:
        return Refuse(400, "'messages' must contain at least one message",
                      code="empty_messages")
    if shape.message_count > MAX_MESSAGES:
        return Refuse(400, f"'messages' has more than {MAX_MESSAGES:,} items",
                      code="too_many_messages")
    return Proceed(request)

