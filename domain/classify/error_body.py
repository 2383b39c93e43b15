"""Reads an upstream error body into text to match, codes, and a reset time (pure).

The body is untrusted: it may be huge, HTML, truncated JSON, an SSE stream whose one
event is the error, or already decoded JSON. :func:`read_error_body` never raises.

Rules:

It looks at a bounded part of it: the first :data:`MAX_BODY_BYTES` bytes, at most
:data:`MAX_NODES` JSON nodes :data:`MAX_DEPTH` deep, and :data:`MAX_TEXT_CHARS` characters
of text, with no regular expression (the resets' readers, in
:mod:`sessionwarden.domain.classify.resets`, keep theirs bounded), so it stays linear on
hostile input. It runs on every failed call: the walk keeps plain locals and one stack of
the containers being read, and a reset stated in words is read on first use only.

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
  ``resets in 2hr 5min``, ``regain access on 2025-08-01 at 00:00 UTC`` (the first field
  the walk meets wins; the phrases are read only when no field says).

**What quotes the request is not the body's word** (issue 21 §1). An upstream's error
often quotes what the client sent: OpenAI's and Anthropic's 404 name the model ("The
model `X` does not exist"), OpenAI's 429 too ("Rate limit reached for X …"). A client
chooses that name, so a model called ``gpt-insufficient_quota`` or ``… regain access on
2027-06-01`` would read as billing, with a reset. :func:`read_error_body` takes the
strings the request supplied (``quoted``: the model's names) and cuts each out of the
text, the phrase-reset text and the codes before anything is matched. Each cut leaves a
NUL, which no phrase contains, so the text on either side can never join into a phrase;
a name shorter than :data:`MIN_QUOTED_CHARS` holds no phrase and is left alone.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import lru_cache
from itertools import islice
from typing import Any

import msgspec
from sessionwarden.domain.classify.patterns import normalise
from sessionwarden.domain.classify.resets import absolute_reset, phrase_reset, relative_reset

__all__ = ["MAX_BODY_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_QUOTED_CHARS", "MAX_TEXT_CHARS",
           "MIN_QUOTED_CHARS", "ErrorBody", "read_error_body"]

#: Only this much of a body is decoded; error bodies are small, a huge one is hostile.
MAX_BODY_BYTES = 64 * 1024
#: How deep and how many JSON nodes are walked.
MAX_DEPTH = 8
MAX_NODES = 400
#: How many characters of text the patterns are matched against.
MAX_TEXT_CHARS = 8 * 1024

#: A quoted string shorter than this holds no phrase (the shortest is 4 characters)…
MIN_QUOTED_CHARS = 4
#: …and one longer than this is not a model's name: only its first so many are cut.
MAX_QUOTED_CHARS = 512
#: What a cut leaves: no phrase contains it, so no phrase spans a cut.
_CUT = "\x00"

_CODE_KEYS = frozenset({"code", "type", "status", "reason", "error_code", "error_type"})
_SKIP_KEYS = frozenset({"param", "request_id", "@type", "url", "user_id", "id", "links",
                        "description"})
_ABSOLUTE_KEYS = frozenset({"reset_at", "resets_at", "retry_until", "resetat", "reset_time"})
_RELATIVE_KEYS = frozenset({"resets_in_seconds", "retry_after", "retry_after_seconds",
                            "retrydelay", "quotaresetdelay", "reset_seconds", "retry_in"})
#: Each key's role in the walk, by its lowercase name; the usual plain keys are listed
#: (role ``""``) so that they are found without lowercasing them first.
_ROLES: dict[str, str] = {
    **dict.fromkeys(("message", "error", "details", "metadata", "raw", "object", "errors",
                     "provider_name", "detail", "msg"), ""),
    **dict.fromkeys(_SKIP_KEYS, "skip"), **dict.fromkeys(_CODE_KEYS, "code"),
    **dict.fromkeys(_ABSOLUTE_KEYS, "absolute"), **dict.fromkeys(_RELATIVE_KEYS, "relative"),
}


class ErrorBody:
    """What an error body says, bounded and normalised.

    Attributes:
        text: normalised text (see :func:`~sessionwarden.domain.classify.patterns.normalise`).
        codes: normalised code-like values, in order, without duplicates.
        reset_seconds: a reset the body states, in seconds from now, or None.
        reset_source: where that reset came from (``"body field reset_at"``, ``"body
            phrase"``), ``""`` when none.

    A reset stated in words is read on first use (:meth:`reset`): it takes regular
    expressions over the text, and most classifications find their reset in the headers
    first. The value is the same whenever it is read; immutable in every other way.
    """

    __slots__ = ("_phrases", "_reset", "codes", "text")

    def __init__(self, text: str = "", codes: tuple[str, ...] = (),
                 reset_seconds: float | None = None, reset_source: str = "", *,
                 phrases_of: tuple[str, datetime] | None = None) -> None:
        """Hold what was read.

        ``phrases_of``: the raw text and ``now`` a phrase reset is read from, on first
        use, when ``reset_seconds`` is None.
        """
        self.text = text
        self.codes = codes
        self._reset = (reset_seconds, reset_source)
        self._phrases = phrases_of if reset_seconds is None else None

    def reset(self) -> tuple[float | None, str]:
        """``(reset_seconds, reset_source)``, reading the text's phrases the first time."""
        pending = self._phrases
        if pending is not None:
            seconds = phrase_reset(pending[0].lower(), pending[1])
            if seconds is not None:
                self._reset = (seconds, "body phrase")
            self._phrases = None
        return self._reset

    @property
    def reset_seconds(self) -> float | None:
        """A reset the body states, in seconds from now, or None."""
        return self.reset()[0]

    @property
    def reset_source(self) -> str:
        """Where :attr:`reset_seconds` came from, ``""`` when none."""
        return self.reset()[1]

    def _key(self) -> tuple[str, tuple[str, ...], tuple[float | None, str]]:
        return self.text, self.codes, self.reset()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorBody) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        reset, source = self.reset()
        return (f"ErrorBody(text={self.text!r}, codes={self.codes!r}, "
                f"reset_seconds={reset!r}, reset_source={source!r})")


#: Codes are short (at most 100 characters) and few distinct ones recur ("rate_limit_exceeded",
#: "insufficient_quota"): their normal forms are kept, at most 256 (odd ones evict).
_code = lru_cache(maxsize=256)(normalise)


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


def _walk(
    root: Any, now: datetime, strings: list[str], codes: list[str]
) -> tuple[float | None, str]:
    """Collect ``root``'s strings and raw codes; its first reset field, within the bounds.

    Depth first in document order (a string holding JSON is opened where it stands);
    every visited node counts, the walk stops at :data:`MAX_NODES` nodes or
    :data:`MAX_TEXT_CHARS` characters, and containers at :data:`MAX_DEPTH` are not
    opened. It runs on every failed call, hence plain locals and one stack of the
    containers being read (an iterator each), not of every node.
    """
    reset: float | None = None
    source = ""
    size = nodes = 0
    stack: list[tuple[Iterator[Any], int]] = [(iter((root,)), 0)]
    while stack:
        items, depth = stack[-1]
        for node in items:
            if nodes >= MAX_NODES or size >= MAX_TEXT_CHARS:
                return reset, source
            nodes += 1
            if isinstance(node, str):
                piece = node[: MAX_TEXT_CHARS - size]
                strings.append(piece)
                size += len(piece) + 1
                # OpenRouter and some SDK wrappers carry the upstream error as JSON text
                if depth < MAX_DEPTH and "{" in piece and piece.lstrip().startswith("{"):
                    inner = _decode(piece)
                    if inner is not None:
                        stack.append((iter((inner,)), depth + 1))
                        break
            elif depth >= MAX_DEPTH:
                continue
            elif isinstance(node, dict):
                children = []
                pairs = node.items()
                for key, value in pairs if len(node) <= MAX_NODES else islice(pairs, MAX_NODES):
                    if not isinstance(key, str):
                        continue
                    role = _ROLES.get(key)
                    if role is None:
                        low = key.lower()
                        role = _ROLES.get(low, "")
                    else:
                        low = key
                    if role:
                        if role == "skip":
                            continue
                        if role == "code":
                            if isinstance(value, str) and len(value) <= 100:
                                codes.append(value)
                        elif reset is None:
                            reset = (absolute_reset(value, now) if role == "absolute"
                                     else relative_reset(value))
                            source = "" if reset is None else f"body field {low}"
                    children.append(value)
                stack.append((iter(children), depth + 1))
                break
            elif isinstance(node, (list, tuple)):
                stack.append((iter(node[:MAX_NODES]), depth + 1))
                break
        else:
            stack.pop()
    return reset, source


def _cut(text: str, needles: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each of ``needles`` replaced by :data:`_CUT`."""
    for needle in needles:
        if needle in text:
            text = text.replace(needle, _CUT)
    return text


def _needles(quoted: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The quoted strings as the raw text is cut (lowercase) and as the normal text is."""
    raw: dict[str, None] = {}
    norm: dict[str, None] = {}
    for item in quoted:
        if not isinstance(item, str):
            continue
        item = item[:MAX_QUOTED_CHARS]
        low, normal = item.lower().strip(), normalise(item)
        if len(low) >= MIN_QUOTED_CHARS:
            raw[low] = None
        if len(normal) >= MIN_QUOTED_CHARS:
            norm[normal] = None
    # The longest first: a name that holds another is cut whole, not around the other.
    return (tuple(sorted(raw, key=len, reverse=True)),
            tuple(sorted(norm, key=len, reverse=True)))


def read_error_body(body: object, now: datetime, quoted: tuple[str, ...] = ()) -> ErrorBody:
    """Read ``body`` (bytes, text or decoded JSON) as of ``now`` (naive means UTC).

    ``quoted``: strings the request supplied (the model's names) that the body may quote;
    they are cut out of what is read (see the module's doc), never read as its words.
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
    strings: list[str] = []
    codes: list[str] = []
    reset: float | None = None
    source = ""
    if not raw and decoded is not None:
        try:
            reset, source = _walk(decoded, now, strings, codes)
        except RecursionError:  # a hostile, deeply nested pre-decoded value
            pass
        raw = "\n".join(strings)[:MAX_TEXT_CHARS]
    found = tuple(dict.fromkeys(filter(None, map(_code, codes)))) if codes else ()
    if not quoted:
        return ErrorBody(normalise(raw), found, reset, source, phrases_of=(raw, now))
    cut_raw, cut_normal = _needles(quoted)
    if cut_raw:  # the phrase resets read the lowercase raw text: cut it there too
        raw = _cut(raw.lower(), cut_raw)
    if found and cut_normal:
        found = tuple(c for c in found if _cut(c, cut_normal) == c)
    return ErrorBody(_cut(normalise(raw), cut_normal), found, reset, source,
                     phrases_of=(raw, now))
