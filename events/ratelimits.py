"""Events of the rate guard: the rate-limit buckets a provider reported for a key.

Stream ``ratelimits-<provider>``. Recorded only when the picture changes in a way that
matters (a bucket appears or goes, its limit changes, it runs out or refills, or its
remaining share drops into a lower band: ``sessionwarden.domain.keys.ratelimits``), inside the
completion's atomic append of the call that saw it; a bucket that merely counts down is
not written on every call.
"""

from typing import ClassVar

import msgspec
from sessionwarden.events.base import Event

__all__ = ["RateLimitBucketSeen", "RateLimitsObserved"]


class RateLimitBucketSeen(msgspec.Struct, frozen=True, omit_defaults=True):
    """One bucket as reported in a response's headers (a field, not an event).

    ``reset_seconds`` counts from the event's ``recorded_at``.
    """

    name: str
    limit: int | None = None
    remaining: int | None = None
    reset_seconds: float | None = None


class RateLimitsObserved(Event, frozen=True):
    """The buckets a provider reported for the key ``credential`` changed."""

    TAG: ClassVar[str] = "ratelimit.observed.v1"

    credential: str
    buckets: tuple[RateLimitBucketSeen, ...] = ()
