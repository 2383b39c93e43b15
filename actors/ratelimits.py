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
odd header must not stop failover. Resets in the past read as 0 seconds.
"""

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import msgspec

__all__ = [
    "MAX_RESET_SECONDS",
    "RateLimitBucket",
    "RateLimitSnapshot",
    "parse_duration",
    "parse_rate_limits",
]

_OPENAI = re.compile(r"x-ratelimit-(limit|remaining|reset)-([a-z0-9][a-z0-9-]{0,40})")
_ANTHROPIC = re.compile(r"anthropic-ratelimit-([a-z0-9][a-z0-9-]{0,40})-(limit|remaining|reset)")
_GO_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(h|ms|m|s|us|µs|ns)")
_GO_DURATION = re.compile(r"(?:\d{1,12}(?:\.\d{1,9})?(?:h|ms|m|s|us|µs|ns)){1,8}")
_NUMBER = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
_INTEGER = re.compile(r"\d{1,15}")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

#: Longer waits than this are treated as malformed rather than believed.
MAX_RESET_SECONDS = 366 * 24 * 3600.0
_MAX_BUCKETS = 16
_MAX_VALUE_LENGTH = 64
_EPOCH_MIN = 1_000_000_000  # a bare number this large in an Anthropic reset is an epoch


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


def _seconds(value: float) -> float | None:
    """Accept a finite, non-negative, believable number of seconds."""
    if not math.isfinite(value) or value < 0 or value > MAX_RESET_SECONDS:
        return None
    return value


def parse_duration(text: str) -> float | None:
    """Parse a Go-style duration (``"6m0s"``, ``"20ms"``, ``"0.5s"``) or bare seconds.

    Returns None for anything else, including negative or absurdly long durations.
    """
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    if _NUMBER.fullmatch(text):
        return _seconds(float(text))
    if not _GO_DURATION.fullmatch(text):
        return None
    total = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _GO_PART.findall(text))
    return _seconds(total)


def _aware(now: datetime) -> datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def _until(moment: datetime, now: datetime) -> float | None:
    """Seconds from ``now`` until ``moment`` (0 if already past); None if naive/absurd."""
    if moment.tzinfo is None:
        return None
    return _seconds(max(0.0, (moment - now).total_seconds()))


def _parse_timestamp(text: str, now: datetime) -> float | None:
    """An RFC 3339 timestamp (or Unix epoch seconds) as seconds from ``now``."""
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    if _NUMBER.fullmatch(text):
        epoch = float(text)
        if epoch < _EPOCH_MIN:
            return None
        return _seconds(max(0.0, epoch - now.timestamp()))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return _until(moment, now)


def _parse_retry_after(text: str, now: datetime) -> float | None:
    """``retry-after``: delay-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    if _NUMBER.fullmatch(text):
        return _seconds(float(text))
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _until(moment, now)


def _parse_int(text: str) -> int | None:
    text = text.strip()
    return int(text) if _INTEGER.fullmatch(text) else None


def parse_rate_limits(headers: Mapping[str, str], now: datetime) -> RateLimitSnapshot:
    """Read every rate-limit header in ``headers`` into a :class:`RateLimitSnapshot`.

    Args:
        headers: response headers with lowercase names (other names are lowercased).
        now: the observation time, used for absolute resets; a naive value means UTC.

    Returns:
        The snapshot; malformed values are simply absent from it. Never raises.
    """
    now = _aware(now)
    fields: dict[str, dict[str, int | float]] = {}
    retry_after: float | None = None
    retry_after_ms: float | None = None
    for raw_name, value in headers.items():
        if not isinstance(raw_name, str) or not isinstance(value, str):
            continue
        name = raw_name.lower()
        parsed: int | float | None
        if match := _OPENAI.fullmatch(name):
            kind, bucket = match.group(1), match.group(2)
            parsed = parse_duration(value) if kind == "reset" else _parse_int(value)
        elif match := _ANTHROPIC.fullmatch(name):
            bucket, kind = match.group(1), match.group(2)
            parsed = _parse_timestamp(value, now) if kind == "reset" else _parse_int(value)
        elif name == "retry-after":
            retry_after = _parse_retry_after(value, now)
            continue
        elif name == "retry-after-ms":
            millis = value.strip()
            if len(millis) <= _MAX_VALUE_LENGTH and _NUMBER.fullmatch(millis):
                retry_after_ms = _seconds(float(millis) / 1000.0)
            continue
        else:
            continue
        if parsed is None:
            continue
        key = bucket.replace("-", "_")
        if key not in fields and len(fields) >= _MAX_BUCKETS:
            continue
        fields.setdefault(key, {})[kind] = parsed
    buckets = tuple(
        RateLimitBucket(
            name=key,
            limit=int(values["limit"]) if "limit" in values else None,
            remaining=int(values["remaining"]) if "remaining" in values else None,
            reset_seconds=float(values["reset"]) if "reset" in values else None,
        )
        for key, values in sorted(fields.items())
    )
    return RateLimitSnapshot(
        buckets=buckets,
        retry_after_seconds=retry_after_ms if retry_after_ms is not None else retry_after,
    )
