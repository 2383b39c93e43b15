"""Reads the values of rate-limit headers: counts, durations and moments (pure).

:mod:`sessionwarden.domain.keys.ratelimits` reads which headers a response carries; this
module reads what each one says, as seconds from ``now``: a Go-style duration
(``"6m0s"``, ``"20ms"``, ``"0.5s"``, ``"1h2m3.5s"``; a bare number is seconds), an
RFC 3339 timestamp or Unix epoch (Anthropic), a ``retry-after`` (delay-seconds or an
HTTP-date). A malformed, negative or absurdly long value reads as None; a moment in the
past as 0 seconds.

They run on every call (the rate guard reads each response's headers), so what a string
method can say replaces a regular expression (``str.isdecimal`` is the regexes' ``\\d``),
and the shape providers send (``"20ms"``, ``"2h0m0s"``) is read by one match; every
regular expression here has bounded repetitions.
"""

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["MAX_RESET_SECONDS", "aware", "is_number", "parse_duration", "parse_retry_after",
           "parse_retry_after_ms", "parse_timestamp"]

_GO_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(h|ms|m|s|us|µs|ns)")
# the shape providers send ("20ms", "1.4s", "6m0s", "2h0m0s"), read by one match
_GO_SHORT = re.compile(r"(?:(\d{1,12})h)?(?:(\d{1,12})m)?(\d{1,12}(?:\.\d{1,9})?)(ms|s)")
_GO_DURATION = re.compile(r"(?:\d{1,12}(?:\.\d{1,9})?(?:h|ms|m|s|us|µs|ns)){1,8}")
_NUMBER = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

#: Longer waits than this are treated as malformed rather than believed.
MAX_RESET_SECONDS = 366 * 24 * 3600.0
_MAX_VALUE_LENGTH = 64
_EPOCH_MIN = 1_000_000_000  # a bare number this large in an Anthropic reset is an epoch


def _seconds(value: float) -> float | None:
    """Accept a finite, non-negative, believable number of seconds."""
    if not math.isfinite(value) or value < 0 or value > MAX_RESET_SECONDS:
        return None
    return value


def is_number(text: str) -> bool:
    """Whether ``text`` is digits with an optional fraction (``_NUMBER``), cheaply.

    ``str.isdecimal`` is exactly the regex's ``\\d`` (Unicode category Nd), so digits
    alone need no regex; only a text with a dot that ends with a digit runs it.
    """
    if text.isdecimal():
        return len(text) <= 12
    return "." in text and text[-1].isdecimal() and _NUMBER.fullmatch(text) is not None


def parse_duration(text: str) -> float | None:
    """Parse a Go-style duration (``"6m0s"``, ``"20ms"``, ``"0.5s"``) or bare seconds.

    Returns None for anything else, including negative or absurdly long durations.
    """
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    # A duration splits into its parts one way only (digits, then a unit), so the
    # common shape's match gives the parts, in order, that the general reading does;
    # it ends with a unit, so it is never also a bare number (tried first or not).
    if match := _GO_SHORT.fullmatch(text):
        hours, minutes, amount, unit = match.groups()
        parts = [float(amount) * _UNIT_SECONDS[unit]]
        if minutes is not None:
            parts.insert(0, float(minutes) * _UNIT_SECONDS["m"])
        if hours is not None:
            parts.insert(0, float(hours) * _UNIT_SECONDS["h"])
        return _seconds(sum(parts))
    if is_number(text):
        return _seconds(float(text))
    if not _GO_DURATION.fullmatch(text):
        return None
    total = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _GO_PART.findall(text))
    return _seconds(total)


def aware(now: datetime) -> datetime:
    """``now`` with a time zone: a naive value means UTC."""
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def _until(moment: datetime, now: datetime) -> float | None:
    """Seconds from ``now`` until ``moment`` (0 if already past); None if naive/absurd."""
    if moment.tzinfo is None:
        return None
    return _seconds(max(0.0, (moment - now).total_seconds()))


def parse_timestamp(text: str, now: datetime) -> float | None:
    """An RFC 3339 timestamp (or Unix epoch seconds) as seconds from ``now``."""
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    if is_number(text):
        epoch = float(text)
        if epoch < _EPOCH_MIN:
            return None
        return _seconds(max(0.0, epoch - now.timestamp()))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return _until(moment, now)


def parse_retry_after(text: str, now: datetime) -> float | None:
    """``retry-after``: delay-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    text = text.strip()
    if len(text) > _MAX_VALUE_LENGTH:
        return None
    if is_number(text):
        return _seconds(float(text))
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _until(moment, now)


def parse_retry_after_ms(text: str) -> float | None:
    """``retry-after-ms``: milliseconds, as seconds."""
    millis = text.strip()
    if len(millis) <= _MAX_VALUE_LENGTH and is_number(millis):
        return _seconds(float(millis) / 1000.0)
    return None
