"""The fast readings of rate-limit headers give what the plain regular expressions give.

``parse_rate_limits`` runs on every call, so it reads names once per name (a bounded
cache), numbers with ``str.isdecimal`` and common durations with one match; these tests
hold each shortcut to the reading it replaced, written out here as the reference.
"""

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.keys import ratelimit_values, ratelimits
from sessionwarden.domain.keys.ratelimits import parse_duration

_NUMBER = re.compile(r"\d{1,12}(?:\.\d{1,9})?")
_GO_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(h|ms|m|s|us|µs|ns)")
_GO_DURATION = re.compile(r"(?:\d{1,12}(?:\.\d{1,9})?(?:h|ms|m|s|us|µs|ns)){1,8}")
_OPENAI = re.compile(r"x-ratelimit-(limit|remaining|reset)-([a-z0-9][a-z0-9-]{0,40})")
_ANTHROPIC = re.compile(r"anthropic-ratelimit-([a-z0-9][a-z0-9-]{0,40})-(limit|remaining|reset)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def reference_duration(text: str) -> float | None:
    """parse_duration as it read before its shortcuts."""
    text = text.strip()
    if len(text) > 64:
        return None
    if _NUMBER.fullmatch(text):
        seconds = float(text)
    elif _GO_DURATION.fullmatch(text):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _GO_PART.findall(text))
    else:
        return None
    return seconds if 0 <= seconds <= ratelimit_values.MAX_RESET_SECONDS else None


_DIGITS = st.text(alphabet="0123456789٣１²", min_size=0, max_size=14)
_PIECES = st.lists(st.one_of(_DIGITS, st.sampled_from(
    ["h", "m", "s", "ms", "us", "µs", "ns", ".", " ", "x", "5", "0", "12"])), max_size=10)


@settings(max_examples=400, deadline=None)
@given(_PIECES)
def test_durations_read_as_the_general_reading(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert parse_duration(text) == reference_duration(text), text


def test_the_common_shapes_and_their_edges() -> None:
    for text in ["6ms", "1s", "0.5s", "2h0m0s", "6m0s", "1m30s", "1h2m3.5s", "5m3ms", "1h5s",
                 "1.5h", "5m", "1h1h1h1h1h1h1h1h", "1h1h1h1h1h1h1h1h1h", "123456789012s",
                 "1234567890123s", "1.1234567890s", "٣s", "١h٢m", "", "1..5s", "1ms5"]:
        assert parse_duration(text) == reference_duration(text), text


@given(st.text(alphabet="0123456789.٣１² a", max_size=16))
def test_is_number_is_the_number_pattern(text: str) -> None:
    assert ratelimit_values.is_number(text) == bool(_NUMBER.fullmatch(text))


_NAMES = st.one_of(
    st.builds("".join, st.lists(st.sampled_from(
        ["x-ratelimit-", "anthropic-ratelimit-", "limit", "remaining", "reset", "-", "requests",
         "tokens", "1h", "A", "é", "retry-after", "-ms", "a" * 40, "_"]), max_size=6)),
    st.text(max_size=30),
)


@settings(max_examples=400, deadline=None)
@given(_NAMES)
def test_header_names_read_as_the_patterns(raw: str) -> None:
    name = raw.lower()
    reading, slot, key = ratelimits._header(raw)
    if match := _OPENAI.fullmatch(name):
        kind, bucket = match.group(1), match.group(2)
        expected = ("duration" if kind == "reset" else "count", kind, bucket.replace("-", "_"))
    elif match := _ANTHROPIC.fullmatch(name):
        bucket, kind = match.group(1), match.group(2)
        expected = ("moment" if kind == "reset" else "count", kind, bucket.replace("-", "_"))
    elif name in ("retry-after", "retry-after-ms"):
        expected = (name, "limit", "")
    else:
        expected = ("", "limit", "")
    assert (reading, ("limit", "remaining", "reset")[slot], key) == expected


def test_the_name_cache_is_bounded() -> None:
    for i in range(1000):
        ratelimits._header(f"x-odd-header-{i}")
    info = ratelimits._header.cache_info()
    assert info.maxsize == 256
    assert info.currsize <= 256
