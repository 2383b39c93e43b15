from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.keys.ratelimits import (
    RateLimitBucket,
    RateLimitSnapshot,
    parse_duration,
    parse_rate_limits,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6m0s", 360.0),
        ("1s", 1.0),
        ("20ms", 0.02),
        ("0.5s", 0.5),
        ("1h2m3.5s", 3723.5),
        ("100us", 0.0001),
        ("7", 7.0),
        (" 2.5 ", 2.5),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "s", "6x", "-1s", "1s2", "abc", "1e5s", "nan", "inf", "9" * 70, "99999999h"]
)
def test_parse_duration_rejects(text: str) -> None:
    assert parse_duration(text) is None


def test_openai_headers() -> None:
    snapshot = parse_rate_limits(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "6m0s",
            "content-type": "application/json",
        },
        NOW,
    )
    assert snapshot.buckets == (
        RateLimitBucket(name="requests", limit=500, remaining=499, reset_seconds=0.12),
        RateLimitBucket(name="tokens", limit=30000, remaining=0, reset_seconds=360.0),
    )
    assert snapshot.retry_after_seconds is None
    tokens = snapshot.bucket("tokens")
    assert tokens is not None and tokens.exhausted
    assert snapshot.bucket("missing") is None
    assert not snapshot.empty


def test_extra_openai_style_buckets() -> None:
    snapshot = parse_rate_limits(
        {"x-ratelimit-remaining-requests-1h": "3", "x-ratelimit-reset-requests-1h": "1800"}, NOW
    )
    assert snapshot.buckets == (
        RateLimitBucket(name="requests_1h", remaining=3, reset_seconds=1800.0),
    )


def test_anthropic_headers() -> None:
    reset = (NOW + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    snapshot = parse_rate_limits(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
            "anthropic-ratelimit-requests-reset": reset,
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": "0",
            "anthropic-ratelimit-input-tokens-reset": "2025-01-01T12:01:00+00:00",
            "anthropic-ratelimit-output-tokens-reset": "2024-12-31T00:00:00Z",
            "anthropic-ratelimit-tokens-remaining": "100",
        },
        NOW,
    )
    names = [b.name for b in snapshot.buckets]
    assert names == ["input_tokens", "output_tokens", "requests", "tokens"]
    assert snapshot.bucket("requests") == RateLimitBucket(
        name="requests", limit=50, remaining=49, reset_seconds=30.0
    )
    input_tokens = snapshot.bucket("input_tokens")
    assert input_tokens is not None and input_tokens.reset_seconds == 60.0
    output_tokens = snapshot.bucket("output_tokens")
    assert output_tokens is not None and output_tokens.reset_seconds == 0.0  # in the past


def test_anthropic_epoch_reset() -> None:
    epoch = str(int(NOW.timestamp()) + 90)
    snapshot = parse_rate_limits({"anthropic-ratelimit-unified-5h-reset": epoch}, NOW)
    assert snapshot.buckets == (RateLimitBucket(name="unified_5h", reset_seconds=90.0),)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "30"}, 30.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "Wed, 01 Jan 2025 12:02:00 GMT"}, 120.0),
        ({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "bad", "retry-after": "9"}, 9.0),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float) -> None:
    snapshot = parse_rate_limits(headers, NOW)
    assert snapshot.retry_after_seconds == pytest.approx(seconds)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "soon"},
        {"retry-after": "-5"},
        {"retry-after": "Wed, 01 Jan 2025 12:02:00 -0000"},  # naive per email.utils
        {"retry-after": "NaN"},
        {"x-ratelimit-remaining-requests": "-1"},
        {"x-ratelimit-limit-requests": "1e3"},
        {"x-ratelimit-limit-requests": "9" * 40},
        {"x-ratelimit-reset-requests": "forever"},
        {"anthropic-ratelimit-requests-reset": "yesterday"},
        {"anthropic-ratelimit-requests-reset": "2025-01-01T12:00:30"},  # no offset
        {"anthropic-ratelimit-requests-reset": "12"},  # too small to be an epoch
        {"x-ratelimit-limit-": "5"},
        {},
    ],
)
def test_malformed_values_are_skipped(headers: dict[str, str]) -> None:
    snapshot = parse_rate_limits(headers, NOW)
    assert snapshot == RateLimitSnapshot()
    assert snapshot.empty


def test_header_names_are_case_insensitive_and_naive_now_is_utc() -> None:
    snapshot = parse_rate_limits(
        {"X-RateLimit-Remaining-Tokens": "7", "Retry-After": "Wed, 01 Jan 2025 12:00:10 GMT"},
        NOW.replace(tzinfo=None),
    )
    assert snapshot.bucket("tokens") == RateLimitBucket(name="tokens", remaining=7)
    assert snapshot.retry_after_seconds == 10.0


def test_bucket_count_is_bounded() -> None:
    headers = {f"x-ratelimit-remaining-b{i}": "1" for i in range(100)}
    assert len(parse_rate_limits(headers, NOW).buckets) == 16


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "retry-after",
                "retry-after-ms",
                "x-ratelimit-reset-requests",
                "x-ratelimit-limit-tokens",
                "anthropic-ratelimit-tokens-reset",
                "anthropic-ratelimit-requests-remaining",
            ]
        )
        | st.text(max_size=30),
        st.text(max_size=40),
    ),
    st.datetimes(timezones=st.just(UTC)),
)
def test_property_never_raises(headers: dict[str, str], now: datetime) -> None:
    snapshot = parse_rate_limits(headers, now)
    for bucket in snapshot.buckets:
        assert bucket.reset_seconds is None or bucket.reset_seconds >= 0
        assert bucket.limit is None or bucket.limit >= 0
    assert snapshot.retry_after_seconds is None or snapshot.retry_after_seconds >= 0


# ------------------------------------------------------------------ what is worth recording

from sessionwarden.domain.keys.ratelimits import (  # noqa: E402
    buckets_seen,
    rate_limit_headers,
    worth_recording,
)
from sessionwarden.events import RateLimitBucketSeen as Seen  # noqa: E402


def seen(**remaining: int) -> tuple[Seen, ...]:
    return tuple(Seen(name, 1000, left, 1.0) for name, left in sorted(remaining.items()))


def test_the_first_picture_of_a_key_is_recorded_an_empty_one_never() -> None:
    assert worth_recording(None, seen(requests=999))
    assert not worth_recording(None, ())
    assert not worth_recording(seen(requests=999), ())


def test_counting_down_within_a_band_is_not_news() -> None:
    last = seen(requests=999, tokens=900)
    for left in (998, 800, 600, 501):
        assert not worth_recording(last, seen(requests=left, tokens=900))
    # resets move every call: they alone are never news
    assert not worth_recording(last, (Seen("requests", 1000, 999, 57.0),
                                      Seen("tokens", 1000, 900, 0.0)))


@pytest.mark.parametrize("left", [499, 249, 99, 0])
def test_crossing_a_band_or_running_out_is_news(left: int) -> None:
    assert worth_recording(seen(requests=999), seen(requests=left))


def test_refilling_a_new_limit_and_a_new_bucket_are_news() -> None:
    assert worth_recording(seen(requests=0), seen(requests=1000))
    assert worth_recording(seen(requests=999), (Seen("requests", 2000, 1999),))
    assert worth_recording(seen(requests=999), seen(requests=999, tokens=999))
    assert worth_recording(seen(requests=999, tokens=9), seen(requests=999))


def test_unknown_remaining_or_limit_compare_by_what_is_known() -> None:
    assert not worth_recording((Seen("r"),), (Seen("r"),))
    assert worth_recording((Seen("r"),), (Seen("r", remaining=0),))
    assert not worth_recording((Seen("r", remaining=5),), (Seen("r", remaining=4),))


def test_only_rate_limit_headers_are_kept() -> None:
    headers = {"Content-Type": "json", "X-RateLimit-Remaining-Requests": "5",
               "anthropic-ratelimit-tokens-limit": "9", "Retry-After": "2", "date": "x"}
    assert rate_limit_headers(headers) == (
        ("x-ratelimit-remaining-requests", "5"), ("anthropic-ratelimit-tokens-limit", "9"),
        ("retry-after", "2"))
    many = {f"x-ratelimit-limit-b{i}": "1" for i in range(200)}
    assert len(rate_limit_headers(many)) == 64
    snapshot = parse_rate_limits({"x-ratelimit-limit-requests": "10",
                                  "x-ratelimit-remaining-requests": "3"}, NOW)
    assert buckets_seen(snapshot) == (Seen("requests", 10, 3, None),)
