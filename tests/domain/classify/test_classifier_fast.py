"""The classifier's shortcuts keep its verdicts: which exhausted bucket wins, and the
genuine-limit scan skipped when a bucket already says the limit is genuine."""

from datetime import UTC, datetime

from sessionwarden.domain.classify.classifier import classify
from sessionwarden.domain.keys.ratelimits import RateLimitBucket, RateLimitSnapshot

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
OUT = {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "0",
       "x-ratelimit-reset-requests": "1h0m0s"}


def known(reset: float, limit: int | None = 10) -> RateLimitSnapshot:
    return RateLimitSnapshot(buckets=(
        RateLimitBucket(name="tokens", limit=limit, remaining=0, reset_seconds=reset),))


def test_the_headers_bucket_wins_a_tie_and_a_longer_known_one_wins() -> None:
    tie = classify(429, OUT, b"", now=NOW, last_known=known(3700.0), last_known_age=100.0)
    assert (tie.reset_seconds, tie.reset_source) == (3600.0, "header requests reset")
    longer = classify(429, OUT, b"", now=NOW, last_known=known(4000.0), last_known_age=100.0)
    assert (longer.reset_seconds, longer.reset_source) == (3900.0, "last known tokens reset")
    # a known bucket without a limit does not count (§5)
    no_limit = classify(429, {}, b"", now=NOW, last_known=known(4000.0, None))
    assert no_limit.limit == "transient"


def test_a_daily_quota_names_itself_only_when_no_bucket_is_out() -> None:
    body = {"error": {"message": "Quota exceeded: requests per day", "code": "rate_limited"}}
    by_words = classify(429, {}, body, now=NOW)
    assert by_words.limit == "genuine"
    assert "long quota 'per day'" in by_words.reason
    by_bucket = classify(429, OUT, body, now=NOW)
    assert by_bucket.limit == "genuine"
    assert "bucket requests exhausted for 3600s (header)" in by_bucket.reason
