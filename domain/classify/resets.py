"""Reads the reset an error body states, in a field or in words (pure).

:mod:`sessionwarden.domain.classify.error_body` finds the fields and the text; this module reads
them as seconds from ``now`` (hermes-behaviour.md §4.3): a moment (epoch seconds,
milliseconds above 1e12, ISO 8601, HTTP-date), a delay (seconds or a duration such as
``"22s"``), or a phrase: ``quotaResetDelay 500ms``, ``retry after 30 seconds``, ``try
again in 1m30s``, ``resets in 2hr 5min``, ``regain access on 2025-08-01 at 00:00 UTC``.
A value that is not positive, or lies beyond a year, reads as None.

Every regular expression here has bounded repetitions, so matching stays linear on
hostile input; a phrase's search starts at the first of the few words every phrase
begins with (found by plain search), and does not run without one.
"""

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from sessionwarden.domain.keys.ratelimit_values import MAX_RESET_SECONDS, parse_duration

__all__ = ["DATE_CUES", "DELAY_CUES", "absolute_reset", "first_cue", "phrase_reset",
           "relative_reset"]

_EPOCH_MS = 1e12

_UNIT = (r"(?:milliseconds?|ms|minutes?|mins?|m|hours?|hrs?|h|seconds?|secs?|s)(?![a-z])")
_AMOUNT = r"\d{1,9}(?:\.\d{1,9})?"
_DELAY = re.compile(
    r"(?:quotaresetdelay|resets? in|try again in|retry in|retry after|please wait)"
    rf"[\s:=\"']{{0,4}}((?:{_AMOUNT}\s{{0,2}}{_UNIT}[\s,]{{0,3}}(?:and\s{{1,3}})?){{1,4}})"
)
#: Every match of ``_DELAY`` (of ``_DATE``) begins with one of these words: the first of
#: them found in a text is where a search for the phrase may start.
DELAY_CUES = ("reset", "retry ", "try again", "please wait", "quota")
DATE_CUES = ("reset", "until", "regain")
_PART = re.compile(rf"({_AMOUNT})\s{{0,2}}({_UNIT})")
_DATE = re.compile(
    r"(?:regain access on|resets? at|reset on|until)\s{1,3}"
    r"(\d{4})-(\d{2})-(\d{2})(?:(?:t|\s{1,3}at\s{1,3}|\s)(\d{2}):(\d{2})(?::(\d{2}))?)?"
)
_UNIT_SECONDS = {"ms": 1e-3, "m": 60.0, "h": 3600.0, "s": 1.0}


def _believable(seconds: float) -> float | None:
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_RESET_SECONDS:
        return None
    return seconds


def absolute_reset(value: object, now: datetime) -> float | None:
    """An epoch (s or ms), ISO 8601 or HTTP-date moment as seconds from ``now``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        epoch = float(value) / 1000.0 if value > _EPOCH_MS else float(value)
        return _believable(epoch - now.timestamp()) if epoch > 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    try:
        return absolute_reset(float(text), now)
    except ValueError:
        pass
    moment: datetime | None = None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _believable((moment - now).total_seconds())


def relative_reset(value: object) -> float | None:
    """Seconds as a number or a duration string (``"22s"``, ``"1m30s"``, ``"500ms"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _believable(float(value))
    if isinstance(value, str) and len(value) <= 64:
        seconds = parse_duration(value.strip().lower())
        return _believable(seconds) if seconds is not None else None
    return None


def first_cue(raw: str, cues: tuple[str, ...]) -> int:
    """Where the first of ``cues`` starts in ``raw``, or -1 when none is there."""
    first = -1
    for cue in cues:
        if cue in raw:  # cheaper than find when absent, as most cues are
            at = raw.find(cue)
            if first < 0 or at < first:
                first = at
    return first


def phrase_reset(raw: str, now: datetime, *, from_cues: bool = True) -> float | None:
    """A reset stated in words: a delay phrase, or a date to regain access.

    The phrases begin with one of a few words (:data:`DELAY_CUES`, :data:`DATE_CUES`),
    found by plain search; the regular expression starts from the first of them instead
    of trying every position of the text, and does not run without one.
    ``from_cues=False`` searches the whole text (what the cues must not change: tests).
    """
    if not raw:
        return None
    delay_at = first_cue(raw, DELAY_CUES) if from_cues else 0
    date_at = first_cue(raw, DATE_CUES) if from_cues else 0
    if delay_at >= 0 and (match := _DELAY.search(raw, delay_at)):
        total = 0.0
        for amount, unit in _PART.findall(match.group(1)):
            key = "ms" if unit.startswith("millis") or unit == "ms" else unit[0]
            total += float(amount) * _UNIT_SECONDS[key]
        if (seconds := _believable(total)) is not None:
            return seconds
    if date_at >= 0 and (match := _DATE.search(raw, date_at)):
        year, month, day, hour, minute, second = match.groups()
        try:
            moment = datetime(int(year), int(month), int(day), int(hour or 0),
                              int(minute or 0), int(second or 0), tzinfo=UTC)
        except ValueError:
            return None
        return _believable((moment - now).total_seconds())
    return None
