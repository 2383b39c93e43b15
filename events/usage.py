"""Events of the usage ledger: one ``UsageRecorded`` per proxied call, never more.

Counts follow the canonical convention of ``sessionwarden.actors.usage``: the prompt
buckets (input, cache read, cache write) are disjoint and reasoning is part of output.
``source`` says where the counts came from; "missing" is recorded loudly, never as a
silent zero, and a cost that is not known is ``cost_status="unknown"`` with no amount.
"""

from sessionwarden.events.base import Event

__all__ = ["UsageRecorded"]


class UsageRecorded(Event, frozen=True, tag="usage.recorded.v1"):
    """The canonical usage (and, once priced, the cost) of one proxied call."""

    call_id: str
    session_id: str
    provider: str
    model: str
    credential: str
    status: int
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    source: str = "missing"
    raw_usage: str = ""
    flags: tuple[str, ...] = ()
    cost: str | None = None
    cost_status: str = "unknown"
    stream: bool = False
    client_disconnected: bool = False
