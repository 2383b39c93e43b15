from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.key_states import KeyFailure
from sessionwarden.domain.limits import (
    DEFAULT_RESET_SECONDS,
    MIN_GENUINE_RESET_SECONDS,
    LimitVerdict,
    is_genuine,
    limit_failure,
    limit_verdict,
)
from sessionwarden.domain.ratelimits import RateLimitBucket, RateLimitSnapshot, parse_rate_limits

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def snap(*buckets: RateLimitBucket, retry_after: float | None = None) -> RateLimitSnapshot:
    return RateLimitSnapshot(buckets=buckets, retry_after_seconds=retry_after)


def bucket(name: str, remaining: int, reset: float, limit: int = 100) -> RateLimitBucket:
    return RateLimitBucket(name=name, limit=limit, remaining=remaining, reset_seconds=reset)


def test_an_exhausted_hourly_bucket_is_genuine_until_its_reset() -> None:
    verdict = limit_verdict(snap(bucket("requests_1h", 0, 3100)), NOW)
    assert verdict == LimitVerdict(genuine=True, reset_at=later(3100), source="requests_1h")
    failure = limit_failure(verdict)
    assert (failure.kind, failure.reset_at, failure.status) == ("genuine_limit", later(3100), 429)


def test_a_bare_429_is_transient_and_leaves_the_cooling_to_its_backoff() -> None:
    verdict = limit_verdict(snap(), NOW)
    assert verdict == LimitVerdict(genuine=False, reset_at=later(300), source="default")
    assert limit_failure(verdict) == KeyFailure(kind="transient_limit", status=429)


def test_a_short_reset_or_a_healthy_bucket_is_not_genuine() -> None:
    assert not is_genuine(snap(bucket("requests", 0, 30)), NOW)
    assert not is_genuine(snap(bucket("requests_1h", 5, 3100)), NOW)
    verdict = limit_verdict(snap(bucket("requests", 0, 30)), NOW)
    assert (verdict.genuine, verdict.reset_at, verdict.source) == (False, later(30), "requests")


def test_the_last_known_state_can_make_a_bare_429_genuine() -> None:
    known = snap(bucket("requests_1h", 0, 3100))
    seen = later(-100)
    assert is_genuine(snap(), NOW, last_known=known, last_known_at=seen)
    verdict = limit_verdict(snap(), NOW, last_known=known, last_known_at=seen)
    assert (verdict.genuine, verdict.reset_at, verdict.source) == (
        True, later(3000), "last_known:requests_1h")
    # nearly refilled since, or healthy, or a bucket with no limit: not genuine
    assert not is_genuine(snap(), NOW, last_known=known, last_known_at=later(-3050))
    assert not is_genuine(snap(), NOW, last_known=snap(bucket("requests_1h", 3, 3100)),
                          last_known_at=seen)
    no_limit = snap(RateLimitBucket(name="tokens", remaining=0, reset_seconds=600))
    assert not is_genuine(snap(), NOW, last_known=no_limit, last_known_at=seen)


def test_reset_priority_hourly_then_requests_then_retry_after_then_body() -> None:
    body = later(500)
    cases = [
        (snap(bucket("requests_1h", 0, 3000), bucket("requests", 0, 100), retry_after=50),
         3000, "requests_1h"),
        (snap(bucket("requests", 0, 120), retry_after=50), 120, "requests"),
        (snap(retry_after=90), 90, "retry_after"),
        (snap(), 500, "body"),
    ]
    for snapshot, seconds, source in cases:
        verdict = limit_verdict(snapshot, NOW, body_reset_at=body)
        assert (verdict.reset_at, verdict.source) == (later(seconds), source)


def test_a_healthy_buckets_short_reset_does_not_cut_a_token_limit() -> None:
    # OpenAI's TPM 429: requests left with reset 120ms, tokens out for 1m10s
    headers = {
        "x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "30000",
        "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m10s",
    }
    verdict = limit_verdict(parse_rate_limits(headers, NOW), NOW)
    assert (verdict.genuine, verdict.reset_at, verdict.source) == (
        True, later(70), "bucket:tokens")


def test_a_genuine_limit_is_never_benched_shorter_than_its_bucket() -> None:
    verdict = limit_verdict(snap(bucket("requests", 0, 30), bucket("tokens", 0, 90)), NOW)
    assert (verdict.genuine, verdict.reset_at, verdict.source) == (True, later(90), "requests")
    verdict = limit_verdict(snap(bucket("tokens", 0, 90), retry_after=20), NOW)
    assert verdict.reset_at == later(90)


def test_anthropic_and_http_date_resets_are_read() -> None:
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-02T12:02:00Z",
    }
    verdict = limit_verdict(parse_rate_limits(headers, NOW), NOW)
    assert (verdict.genuine, verdict.reset_at) == (True, later(120))
    dated = parse_rate_limits({"retry-after": "Wed, 02 Dec 2026 12:00:45 GMT"}, NOW)
    assert limit_verdict(dated, NOW).reset_at == later(45)


def test_shared_limits_travel_with_the_failure() -> None:
    verdict = limit_verdict(snap(bucket("requests", 0, 600)), NOW)
    assert limit_failure(verdict, 429, shared_limits=True).shared_limits


BUCKETS = st.builds(
    RateLimitBucket,
    name=st.sampled_from(["requests", "requests_1h", "tokens", "input_tokens"]),
    limit=st.none() | st.integers(0, 1000),
    remaining=st.none() | st.integers(-1, 5),
    reset_seconds=st.none() | st.floats(0, 7200),
)
SNAPSHOTS = st.builds(
    RateLimitSnapshot,
    buckets=st.lists(BUCKETS, max_size=4, unique_by=lambda b: b.name).map(tuple),
    retry_after_seconds=st.none() | st.floats(0, 7200),
)


@settings(max_examples=200, deadline=None)
@given(SNAPSHOTS, st.none() | SNAPSHOTS, st.floats(0, 7200),
       st.none() | st.floats(-60, 7200))
def test_a_verdict_is_genuine_exactly_by_the_rule_and_never_ends_before_its_bucket(
    own: RateLimitSnapshot, known: RateLimitSnapshot | None, age: float, body: float | None
) -> None:
    seen = later(-age)
    verdict = limit_verdict(own, NOW, last_known=known, last_known_at=seen,
                            body_reset_at=None if body is None else later(body))
    resets = [b.reset_seconds for b in own.buckets
              if b.exhausted and b.reset_seconds is not None]
    elapsed = (NOW - seen).total_seconds()  # the age as a datetime holds it (microseconds)
    resets += [b.reset_seconds - elapsed for b in (known.buckets if known else ())
               if b.exhausted and b.limit and b.reset_seconds is not None]
    genuine = [r for r in resets if r >= MIN_GENUINE_RESET_SECONDS]
    assert verdict.genuine == bool(genuine)
    assert verdict.genuine == is_genuine(own, NOW, last_known=known, last_known_at=seen)
    assert verdict.reset_at >= NOW
    if genuine:
        assert verdict.reset_at >= later(max(genuine))
    if verdict.source == "default":
        assert verdict.reset_at >= later(DEFAULT_RESET_SECONDS)
    failure = limit_failure(verdict)
    assert failure.kind == ("genuine_limit" if genuine else "transient_limit")
    assert isinstance(failure, KeyFailure)
