"""Parses provider rate-limit headers into a snapshot of buckets (pure, injectable clock).

Understood headers (names lowercase; reliability-and-security.md §6.2):

- OpenAI style: ``x-ratelimit-{limit,remaining,reset}-<bucket>``, e.g. ``-requests``,
  ``-tokens`` (also ``-requests-1h`` and the like). Resets are Go-style relative
  durations: ``"6m0s"``, ``"1s"``, ``"20ms"``, ``"0.5s"``, ``"1h2m3.5s"``; a bare number
  is seconds.
- Anthropic style: ``anthropic-ratelimit-<bucket>-{limit,remaining,reset}``, where bucket
  is ``requests``, ``tokens``, ``input-tokens``, ``output-tokens`` (or ``unified…``).
  Resets are absolute RFC 3339 timestamps (or Unix epoch seconds), turned into seconds
  from ``now``.
- ``retry-after-ms`` (milliseconds) and ``retry-after`` (delay-seconds or an HTTP-date).

Bucket names are the header's bucket part with ``-`` replaced by ``_``
(``"input_tokens"``). A malformed value is skipped — never raised, never guessed: an
odd header must not stop failover. Resets in the past read as 0 seconds. The values are
read by :mod:`sessionwarden.domain.keys.ratelimit_values`.

Every call pays :func:`parse_rate_limits` (the rate guard reads each response's
headers), so a header name is read once: the few names providers send are kept, at most
256 of them (a stream of odd names evicts, it does not grow the cache).

**What is worth recording** (:func:`worth_recording`). A bucket that merely counts down
is not news: writing it on every call would double a call's record for nothing. A
snapshot is recorded when, against the last one recorded for the same key, a bucket
appears or disappears, its limit changes, it runs out or refills, or its remaining share
of the limit falls into another band (:data:`BANDS`: above half, a quarter, a tenth, or
below). The first snapshot of a key is always recorded.
"""

import re
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import msgspec
from sessionwarden.domain.keys.ratelimit_values import (
    MAX_RESET_SECONDS,
    aware,
    parse_duration,
    parse_retry_after,
    parse_retry_after_ms,
    parse_timestamp,
)
from sessionwarden.events import RateLimitBucketSeen

__all__ = [
    "BANDS",
    "MAX_RESET_SECONDS",
    "RateLimitBucket",
    "RateLimitSnapshot",
    "buckets_seen",
    "parse_duration",
    "parse_rate_limits",
    "rate_limit_headers",
    "worth_recording",
]

_OPENAI = re.compile(r"x-ratelimit-(limit|remaining|reset)-([a-z0-9][a-z0-9-]{0,40})")
_ANTHROPIC = re.compile(r"anthropic-ratelimit-([a-z0-9][a-z0-9-]{0,40})-(limit|remaining|reset)")
_MAX_BUCKETS = 16


class RateLimitBucket(msgspec.Struct, frozen=True, kw_only=True):
    """One rate-limit bucket as last reported; any field may be unknown (None).

    Attributes:
        name: ``"requests"``, ``"tokens"``, ``"input_tokens"``, ``"requests_1h"``, …
        limit: the bucket's capacity.
        remaining: what is left of it.
        reset_seconds: seconds from the observation until the bucket refills.
    """

    name: str
    limit: int | None = None
    remaining: int | None = None
    reset_seconds: float | None = None

    @property
    def exhausted(self) -> bool:
        """Whether the provider reported nothing left in this bucket."""
        return self.remaining is not None and self.remaining <= 0


class RateLimitSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The rate-limit state one response reported, buckets sorted by name.

    Attributes:
        buckets: every bucket with at least one well-formed field.
        retry_after_seconds: from ``retry-after-ms`` or ``retry-after``, else None.
    """

    buckets: tuple[RateLimitBucket, ...] = ()
    retry_after_seconds: float | None = None

    @property
    def empty(self) -> bool:
        """Whether the response carried no usable rate-limit information at all."""
        return not self.buckets and self.retry_after_seconds is None

    def bucket(self, name: str) -> RateLimitBucket | None:
        """The bucket called ``name``, or None."""
        for bucket in self.buckets:
            if bucket.name == name:
                return bucket
        return None


#: What a header's value is read as, and where it goes: a bucket's count, its reset as
#: a Go duration (OpenAI) or a moment (Anthropic), or one of the two retry-after headers.
_SLOTS = {"limit": 0, "remaining": 1, "reset": 2}


@lru_cache(maxsize=256)
def _header(raw_name: str) -> tuple[str, int, str]:
    """A header name as (how its value reads, bucket slot, bucket key); ``""`` if no limit.

    Providers send the same few names on every response, so the answers are kept (at
    most 256 of them: a stream of odd names evicts, it does not grow the cache).
    """
    name = raw_name.lower()
    if match := _OPENAI.fullmatch(name):
        kind, bucket = match.group(1), match.group(2)
        reading = "duration" if kind == "reset" else "count"
    elif match := _ANTHROPIC.fullmatch(name):
        bucket, kind = match.group(1), match.group(2)
        reading = "moment" if kind == "reset" else "count"
    elif name in ("retry-after", "retry-after-ms"):
        return name, 0, ""
    else:
        return "", 0, ""
    return reading, _SLOTS[kind], bucket.replace("-", "_")


def parse_rate_limits(headers: Mapping[str, str], now: datetime) -> RateLimitSnapshot:
    """Read every rate-limit header in ``headers`` into a :class:`RateLimitSnapshot`.

    Args:
        headers: response headers with lowercase names (other names are lowercased).
        now: the observation time, used for absolute resets; a naive value means UTC.

    Returns:
        The snapshot; malformed values are simply absent from it. Never raises.
    """
    now = aware(now)
    fields: dict[str, list[Any]] = {}  # a bucket's [limit, remaining, reset]
    retry_after: float | None = None
    retry_after_ms: float | None = None
    parsed: int | float | None
    for raw_name, value in headers.items():
        if not isinstance(raw_name, str) or not isinstance(value, str):
            continue
        reading, slot, key = _header(raw_name)
        if reading == "count":
            text = value.strip()
            if len(text) > 15 or not text.isdecimal():  # \d{1,15}
                continue
            parsed = int(text)
        elif reading == "duration":
            parsed = parse_duration(value)
        elif reading == "moment":
            parsed = parse_timestamp(value, now)
        elif reading == "retry-after":
            retry_after = parse_retry_after(value, now)
            continue
        elif reading == "retry-after-ms":
            retry_after_ms = parse_retry_after_ms(value)
            continue
        else:
            continue
        if parsed is None:
            continue
        values = fields.get(key)
        if values is None:
            if len(fields) >= _MAX_BUCKETS:
                continue
            values = fields[key] = [None, None, None]
        values[slot] = parsed
    buckets = tuple([
        RateLimitBucket(name=key, limit=values[0], remaining=values[1], reset_seconds=values[2])
        for key, values in sorted(fields.items())
    ])
    return RateLimitSnapshot(
        buckets=buckets,
        retry_after_seconds=retry_after_ms if retry_after_ms is not None else retry_after,
    )


#: Lower bounds of the remaining-share bands; moving between bands is worth recording.
BANDS = (0.5, 0.25, 0.1)

_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")
#: The credit headers (``domain/credit_readings``) travel with them to the rate guard.
_CREDITS = "x-nous-"
_KEPT = (*_PREFIXES, _CREDITS)


def rate_limit_headers(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The rate-limit and credit headers among ``headers`` (names lowercased).

    What the proxy hands to the rate guard: a small, immutable part of a response's
    headers instead of all of them; at most 64 rate-limit and 32 credit headers, counted
    apart so that many of one kind cannot crowd out the other.
    """
    found: list[tuple[str, str]] = []
    limits = credits = 0
    for name, value in headers.items():
        low = name.lower()
        if not low.startswith(_KEPT):  # most headers: one test each
            continue
        if low.startswith(_CREDITS):
            if credits < 32:
                credits += 1
                found.append((low, value))
        elif limits < 64:
            limits += 1
            found.append((low, value))
    return tuple(found)


def _band(bucket: RateLimitBucketSeen) -> int:
    """0 when out, 1..len(BANDS)+1 from the lowest band up; -1 when unknown."""
    if bucket.remaining is None:
        return -1
    if bucket.remaining <= 0:
        return 0
    if not bucket.limit:
        return len(BANDS) + 1
    share = bucket.remaining / bucket.limit
    return len(BANDS) + 1 - sum(1 for bound in BANDS if share < bound)


def buckets_seen(snapshot: RateLimitSnapshot) -> tuple[RateLimitBucketSeen, ...]:
    """The snapshot's buckets as the event field records them."""
    return tuple(
        RateLimitBucketSeen(b.name, b.limit, b.remaining, b.reset_seconds)
        for b in snapshot.buckets
    )


def worth_recording(
    last: tuple[RateLimitBucketSeen, ...] | None, new: tuple[RateLimitBucketSeen, ...]
) -> bool:
    """Whether ``new`` differs from the ``last`` recorded buckets in a way that matters.

    See the module docstring. ``last`` None means nothing was recorded for the key yet; an
    empty ``new`` (a response without rate-limit headers) is never worth recording.
    """
    if not new:
        return False
    if last is None:
        return True
    before = {b.name: b for b in last}
    if set(before) != {b.name for b in new}:
        return True
    for bucket in new:
        old = before[bucket.name]
        if old.limit != bucket.limit or _band(old) != _band(bucket):
            return True
    return False
