"""Events of the session context: a governed agent session and the calls made in it."""

from typing import Any

import msgspec
from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster

__all__ = [
    "SESSION_UPCASTERS",
    "CallAdmitted",
    "RateLimitBucketSeen",
    "SessionStarted",
    "UpstreamResponded",
]


class SessionStarted(Event, frozen=True, tag="session.started.v2"):
    """A session was seen for the first time.

    Version 2 added ``client`` (the User-Agent or integration name) and
    ``parent_session_id`` (for sub-agent sessions); version 1 events read as ``client=""``
    and no parent.
    """

    session_id: str
    model: str
    client: str = ""
    parent_session_id: str | None = None


def _session_started_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "client": "", "parent_session_id": None}


SESSION_UPCASTERS = (
    Upcaster("session.started.v1", "session.started.v2", _session_started_v1_to_v2),
)


class CallAdmitted(Event, frozen=True, tag="session.call_admitted.v1"):
    """A proxied call was admitted and is about to go upstream."""

    call_id: str
    session_id: str
    provider: str
    model: str
    message_count: int
    estimated_tokens: int
    stream: bool = False


class RateLimitBucketSeen(msgspec.Struct, frozen=True):
    """One rate-limit bucket as reported in a response's headers (a field, not an event)."""

    name: str
    limit: int | None = None
    remaining: int | None = None
    reset_seconds: float | None = None


class UpstreamResponded(Event, frozen=True, tag="session.upstream_responded.v1"):
    """The provider answered a call (or failed to); ``error`` is short and redacted."""

    call_id: str
    session_id: str
    status: int
    latency_ms: float
    credential: str
    rate_limits: tuple[RateLimitBucketSeen, ...] = ()
    retry_after_seconds: float | None = None
    error: str = ""
