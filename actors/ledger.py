"""UsageLedgerActor: records exactly one UsageRecorded per call, and says when it is durable.

The HTTP layer holds a response (or a stream's last bytes) until this actor's reply,
which arrives from the store's writer thread once the ledger row is committed with
``synchronous=FULL``: a call that returned to a client always has its row, even if the
daemon is killed the next instant. The idempotency key ``usage:<call_id>`` makes a
retried record harmless. Stream: ``usage-<session id>``.

Pricing and budgets arrive in later issues; until then ``cost_status`` is "unknown"
and no amount is recorded — never a silent $0.
"""

from collections.abc import Callable

from sessionwarden.actors.bridge import PENDING, GovernedActor, Reply
from sessionwarden.actors.messages import RecordUsage, new_event
from sessionwarden.store import ANY, EventLog, StreamAppend
from sessionwarden.store.writer import AppendRequest

__all__ = ["UsageLedgerActor", "usage_stream"]


def usage_stream(session_id: str) -> str:
    """The ledger stream of a session."""
    return f"usage-{session_id}"


class UsageLedgerActor(GovernedActor):
    """Appends usage records and replies once they are committed."""

    def __init__(
        self, log: EventLog, *, on_failure: Callable[[BaseException], None] | None = None
    ) -> None:
        """Record into ``log``."""
        super().__init__(on_failure)
        self._log = log
        self.recorded = 0

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch RecordUsage; the reply waits for the commit."""
        if not isinstance(message, RecordUsage):
            raise TypeError(f"UsageLedgerActor cannot handle {type(message).__name__}")
        event = message.event
        self.recorded += 1

        def committed(request: AppendRequest) -> None:
            reply(request.results[-1] if request.results else None, request.error)

        usage = StreamAppend(
            usage_stream(event.session_id),
            (new_event(event, idempotency_key=f"usage:{event.call_id}"),),
            ANY,
        )
        self._log.submit([*message.with_parts, usage], callback=committed)
        return PENDING
