"""Reads an upstream error body into text to match, codes, and a reset time (pure).

The body is untrusted: it may be huge, HTML, truncated JSON, an SSE stream whose one
event is the error, or already decoded JSON. :func:`read_error_body` never raises and
looks at a bounded part of it: the first :data:`MAX_BODY_BYTES` bytes, at most
:data:`MAX_NODES` JSON nodes :data:`MAX_DEPTH` deep, and :data:`MAX_TEXT_CHARS` characters
of text. Every regular expression here has bounded repetitions and a literal prefix, so
matching stays linear on hostile input.

What it extracts, for every wire's error shape (OpenAI ``{"error": {message, type, code,
param}}``, Anthropic ``{"type": "error", "error": {type, message}}``, Gemini ``{"error":
{code, message, status, details}}``, OpenRouter's ``error.metadata.raw``, vLLM's
``{"object": "error", ...}``, Ollama's ``{"error": "..."}``):

- ``text``: the string values of the body in document order (hermes-behaviour.md §7
  matches ``str(err)``, which holds them all), without identifiers and links;
- ``codes``: the values of ``code``/``type``/``status``/``reason``/``error_code`` fields;
- a **reset** the body states, in seconds from ``now`` (hermes-behaviour.md §4.3): the
  fields ``reset_at | resets_at | retry_until`` (epoch seconds, milliseconds above 1e12,
  ISO 8601, HTTP-date; values ≤ 0 ignored), ``resets_in_seconds | retry_after |
  retryDelay | quotaResetDelay`` (seconds or a duration such as ``"22s"``), then phrases:
  ``quotaResetDelay 500ms``, ``retry after 30 seconds``, ``try again in 1m30s``,
  ``resets in 2hr 5min``, ``regain access on 2025-08-01 at 00:00 UTC``.
"""

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from itertools import islice
from typing import Any

import msgspec
from sessionwarden.domain.error_patterns import normalise
from sessionwarden.domain.ratelimits import MAX_RESET_SECONDS, parse_duration

__all__ = ["MAX_BODY_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_TEXT_CHARS", "ErrorBody",
           "read_error_body"]

#: Only this much of a body is decoded; error bodies are small, a huge one is hostile.
MAX_BODY_BYTES = 64 * 1024
#: How deep and how many JSON nodes are walked.
MAX_DEPTH = 8
MAX_NODES = 400
#: How many characters of text the patterns are matched against.
MAX_TEXT_CHARS = 8 * 1024

_CODE_KEYS = frozenset({"code", "type", "status", "reason", "error_code", "error_type"})
_SKIP_KEYS = frozenset({"param", "request_id", "@type", "url", "user_id", "id", "links",
                        "description"})
_ABSOLUTE_KEYS = frozenset({"reset_at", "resets_at", "retry_until", "resetat", "reset_time"})
_RELATIVE_KEYS = frozenset({"resets_in_seconds", "retry_after", "retry_after_seconds",
                            "retrydelay", "quotaresetdelay", "reset_seconds", "retry_in"})
_RESET_KEYS = _ABSOLUTE_KEYS | _RELATIVE_KEYS
_FIELD_KEYS = _RESET_KEYS | _CODE_KEYS
_EPOCH_MS = 1e12

_UNIT = (r"(?:milliseconds?|ms|minutes?|mins?|m|hours?|hrs?|h|seconds?|secs?|s)(?![a-z])")
_AMOUNT = r"\d{1,9}(?:\.\d{1,9})?"
_DELAY = re.compile(
    r"(?:quotaresetdelay|resets? in|try again in|retry in|retry after|please wait)"
    rf"[\s:=\"']{{0,4}}((?:{_AMOUNT}\s{{0,2}}{_UNIT}[\s,]{{0,3}}(?:and\s{{1,3}})?){{1,4}})"
)
_PART = re.compile(rf"({_AMOUNT})\s{{0,2}}({_UNIT})")
_DATE = re.compile(
    r"(?:regain access on|resets? at|reset on|until)\s{1,3}"
    r"(\d{4})-(\d{2})-(\d{2})(?:(?:t|\s{1,3}at\s{1,3}|\s)(\d{2}):(\d{2})(?::(\d{2}))?)?"
)
_UNIT_SECONDS = {"ms": 1e-3, "m": 60.0, "h": 3600.0, "s": 1.0}


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """What an error body says, bounded and normalised.

    Attributes:
        text: normalised text (see :func:`~sessionwarden.domain.error_patterns.normalise`).
        codes: normalised code-like values, in order, without duplicates.
        reset_seconds: a reset the body states, in seconds from now, or None.
        reset_source: where that reset came from (``"body field reset_at"``, ``"body
            phrase"``), ``""`` when none.
    """

    text: str = ""
    codes: tuple[str, ...] = ()
    reset_seconds: float | None = None
    reset_source: str = ""


def _believable(seconds: float) -> float | None:
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_RESET_SECONDS:
        return None
    return seconds


def _absolute(value: object, now: datetime) -> float | None:
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
        return _absolute(float(text), now)
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


def _relative(value: object) -> float | None:
    """Seconds as a number or a duration string (``"22s"``, ``"1m30s"``, ``"500ms"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _believable(float(value))
    if isinstance(value, str) and len(value) <= 64:
        seconds = parse_duration(value.strip().lower())
        return _believable(seconds) if seconds is not None else None
    return None


def _phrase_reset(raw: str, now: datetime) -> float | None:
    """A reset stated in words: a delay phrase, or a date to regain access."""
    if match := _DELAY.search(raw):
        total = 0.0
        for amount, unit in _PART.findall(match.group(1)):
            key = "ms" if unit.startswith("millis") or unit == "ms" else unit[0]
            total += float(amount) * _UNIT_SECONDS[key]
        if (seconds := _believable(total)) is not None:
            return seconds
    if match := _DATE.search(raw):
        year, month, day, hour, minute, second = match.groups()
        try:
            moment = datetime(int(year), int(month), int(day), int(hour or 0),
                              int(minute or 0), int(second or 0), tzinfo=UTC)
        except ValueError:
            return None
        return _believable((moment - now).total_seconds())
    return None


def _decode(body: bytes | str) -> Any:
    """JSON from a body (or from the first JSON ``data:`` line of an SSE body), else None."""
    if isinstance(body, str):
        data = body[:MAX_BODY_BYTES].encode("utf-8", "replace")
    else:
        data = body[:MAX_BODY_BYTES]
    data = data.strip()
    if data.startswith((b"data:", b"event:", b":")):
        for line in data.splitlines()[:50]:
            if line.startswith(b"data:") and line[5:].strip().startswith(b"{"):
                data = line[5:].strip()
                break
    if not data.startswith((b"{", b"[")):
        return None
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None


class _Walk:
    """Collects strings, codes and reset fields from decoded JSON, within the bounds."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.strings: list[str] = []
        self.codes: list[str] = []
        self.size = 0
        self.reset: float | None = None
        self.reset_source = ""

    def field(self, low: str, value: object) -> None:
        if self.reset is None and low in _RESET_KEYS:
            seconds = _absolute(value, self.now) if low in _ABSOLUTE_KEYS else _relative(value)
            if seconds is not None:
                self.reset, self.reset_source = seconds, f"body field {low}"
        if low in _CODE_KEYS and isinstance(value, str) and len(value) <= 100:
            self.codes.append(normalise(value))

    def run(self, root: Any) -> None:
        stack: list[tuple[Any, int]] = [(root, 0)]
        nodes = 0
        while stack and nodes < MAX_NODES and self.size < MAX_TEXT_CHARS:
            node, depth = stack.pop()
            nodes += 1
            if isinstance(node, str):
                piece = node[: MAX_TEXT_CHARS - self.size]
                self.strings.append(piece)
                self.size += len(piece) + 1
                # OpenRouter and some SDK wrappers carry the upstream error as JSON text
                if depth < MAX_DEPTH and piece.lstrip().startswith("{"):
                    inner = _decode(piece)
                    if inner is not None:
                        stack.append((inner, depth + 1))
            elif depth >= MAX_DEPTH:
                continue
            elif isinstance(node, dict):
                children = []
                for key, value in islice(node.items(), MAX_NODES):
                    if not isinstance(key, str):
                        continue
                    low = key.lower()
                    if low in _SKIP_KEYS:
                        continue
                    if low in _FIELD_KEYS:
                        self.field(low, value)
                    children.append((value, depth + 1))
                stack.extend(reversed(children))
            elif isinstance(node, (list, tuple)):
                stack.extend((item, depth + 1) for item in reversed(node[:MAX_NODES]))


def read_error_body(body: object, now: datetime) -> ErrorBody:
    """Read ``body`` (bytes, text or decoded JSON) as of ``now`` (naive means UTC).

    Never raises; anything unreadable yields what could be read, possibly nothing.
    """
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    decoded: Any = body
    raw = ""
    if isinstance(body, (bytes, bytearray, memoryview)):
        body = bytes(body[:MAX_BODY_BYTES])
    if isinstance(body, (bytes, str)):
        decoded = _decode(body)
        if decoded is None:
            text = body if isinstance(body, str) else body.decode("utf-8", "replace")
            raw = text[:MAX_TEXT_CHARS]
    walk = _Walk(now)
    if not raw and decoded is not None:
        try:
            walk.run(decoded)
        except RecursionError:  # a hostile, deeply nested pre-decoded value
            pass
        raw = "\n".join(walk.strings)[:MAX_TEXT_CHARS]
    reset, source = walk.reset, walk.reset_source
    if reset is None and (reset := _phrase_reset(raw.lower(), now)) is not None:
        source = "body phrase"
    return ErrorBody(
        text=normalise(raw),
        codes=tuple(dict.fromkeys(c for c in walk.codes if c)),
        reset_seconds=reset,
        reset_source=source,
    )
