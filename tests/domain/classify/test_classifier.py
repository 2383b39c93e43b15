import json
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify.classification import (
    ERROR_CLASSES,
    RECOVERIES,
    TRANSPORT_FAILURES,
    Classification,
)
from sessionwarden.domain.classify.classifier import (
    MAX_RETRIES,
    MAX_RETRY_WAIT,
    classify,
    retry_delay,
)
from sessionwarden.domain.classify.patterns import DEFAULT_BOOK, DEFAULT_PATTERNS
from sessionwarden.domain.keys.ratelimits import RateLimitBucket, RateLimitSnapshot

from tests.domain.classify.classifier_cases import CASES, NOW, Case

# ------------------------------------------------------------------ the table


def test_the_table_covers_every_provider_and_most_classes() -> None:
    assert len(CASES) >= 40
    assert len({case.id for case in CASES}) == len(CASES)
    providers = Counter(case.provider for case in CASES)
    for provider in ("openai", "anthropic", "openrouter", "deepseek", "gemini"):
        assert providers[provider] >= 4, provider
    assert providers["vllm"] + providers["llamacpp"] + providers["ollama"] >= 6
    classes = {case.error_class for case in CASES}
    assert classes == set(ERROR_CLASSES) - {"unknown", "unreachable"}  # no answer: no case
    assert {case.recovery for case in CASES} == set(RECOVERIES) - {"bench_pool"}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_real_provider_error(case: Case) -> None:
    result = classify(case.status, case.headers, case.body, now=NOW, provider=case.provider)
    assert (result.error_class, result.recovery) == (case.error_class, case.recovery), (
        result.reason
    )
    for field, expected in case.expect.items():
        actual = getattr(result, field)
        if isinstance(expected, float):
            assert actual == pytest.approx(expected, abs=0.01), field
        else:
            assert actual == expected, field
    assert result.reason
    # the key-specific recoveries, and only they, say so
    assert result.key_specific == (result.recovery in ("rotate", "bench_key"))


@pytest.mark.parametrize("case", CASES[:20], ids=[case.id for case in CASES[:20]])
def test_decoded_json_and_text_bodies_classify_like_bytes(case: Case) -> None:
    as_bytes = classify(case.status, case.headers, case.body, now=NOW)
    as_text = classify(case.status, case.headers, case.body.decode(), now=NOW)
    as_json = classify(case.status, case.headers, json.loads(case.body), now=NOW)
    assert as_bytes == as_text == as_json


# ------------------------------------------------------------------ pipeline order


def test_request_validation_is_checked_before_context_overflow() -> None:
    # "max_tokens" is a context phrase: without the order this would be compressed
    body = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with "
                      "this model.", "type": "invalid_request_error"}}
    for status in (400, 500):
        assert classify(status, {}, body, now=NOW).error_class == "format_error"
    assert classify(400, {}, {"error": {"message": "max_tokens is too large"}},
                    now=NOW).error_class == "context_overflow"


def test_content_policy_wins_over_the_status() -> None:
    body = {"error": {"message": "Your request was flagged by our safety system"}}
    for status in (400, 403, 429, 500, 0):
        assert classify(status, {}, body, now=NOW).error_class == "content_policy"


def test_an_explicit_rate_limit_is_not_a_usage_cap() -> None:
    body = {"error": {"message": "Rate limit exceeded"}}
    assert classify(429, {}, body, now=NOW).error_class == "rate_limit"
    assert classify(429, {}, {"error": {"message": "API key limit exceeded."}},
                    now=NOW).error_class == "billing"


def test_a_usage_cap_with_a_short_reset_is_a_transient_rate_limit() -> None:
    body = {"error": {"message": "Usage limit reached, try again in 30s"}}
    result = classify(429, {}, body, now=NOW)
    assert (result.error_class, result.limit, result.key_state) == (
        "rate_limit", "transient", "cooling")
    assert result.reset_seconds == 30.0


def test_overload_wording_on_a_429_is_capacity_not_a_limit() -> None:
    body = {"error": {"message": "The model is currently overloaded. Please try later."}}
    result = classify(429, {"retry-after": "3"}, body, now=NOW)
    assert (result.error_class, result.recovery, result.key_state) == ("overloaded", "retry", None)
    assert result.reset_seconds == 3.0


def test_unknown_errors_are_relayed_not_retried() -> None:
    for status, body in ((404, b"<html>Not Found</html>"), (0, b""), (418, b"teapot"),
                         (200, b'{"ok": true}')):
        result = classify(status, {}, body, now=NOW)
        assert result.recovery in ("relay",), (status, result)
    assert classify(418, {}, b"", now=NOW).error_class == "format_error"
    assert classify(0, {}, b"", now=NOW).error_class == "unknown"


def test_message_only_errors_of_a_stream() -> None:
    def event(payload: object) -> bytes:
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    cases = {
        "overloaded": {"type": "error", "error": {"type": "overloaded_error",
                                                  "message": "Overloaded"}},
        "rate_limit": {"type": "response.failed", "response": {"error": {
            "code": "rate_limit_exceeded", "message": "Rate limit reached"}}},
        "context_overflow": {"error": {"code": "context_length_exceeded", "message": "x"}},
        "billing": {"error": {"message": "Insufficient credits"}},
        "timeout": {"error": {"message": "upstream request timed out"}},
        "auth": {"error": {"message": "Invalid API key"}},
    }
    for expected, payload in cases.items():
        assert classify(200, {}, event(payload), now=NOW).error_class == expected, expected


def test_message_only_quota_wording_follows_the_usage_limit_rule() -> None:
    gemini = {"error": {"message": "You exceeded your current quota, please check your plan "
                        "and billing details. Please retry in 10.5s."}}
    openai = {"error": {"message": "You exceeded your current quota, please check your plan "
                        "and billing details."}}
    explicit = {"error": {"message": "Rate limit exceeded"}}
    assert classify(0, {}, gemini, now=NOW).limit == "transient"
    assert classify(0, {}, gemini, now=NOW).reset_seconds == 10.5
    assert classify(0, {}, openai, now=NOW).error_class == "billing"
    assert classify(0, {}, explicit, now=NOW).error_class == "rate_limit"


# ------------------------------------------------------------------ transient vs genuine


def _snapshot(**buckets: tuple[int, int, float]) -> RateLimitSnapshot:
    return RateLimitSnapshot(buckets=tuple(
        RateLimitBucket(name=name, limit=limit, remaining=remaining, reset_seconds=reset)
        for name, (limit, remaining, reset) in sorted(buckets.items())))


def test_a_bare_429_only_cools_the_key() -> None:
    result = classify(429, {}, b"", now=NOW)
    assert (result.limit, result.key_state, result.reset_seconds) == ("transient", "cooling", None)


def test_a_short_exhausted_bucket_is_transient() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "59s"}
    result = classify(429, headers, b"", now=NOW)
    assert (result.limit, result.reset_seconds) == ("transient", 59.0)


def test_the_last_known_state_makes_a_bare_429_genuine() -> None:
    known = _snapshot(requests_1h=(100, 0, 3600.0))
    result = classify(429, {}, b"", now=NOW, last_known=known, last_known_age=500.0)
    assert (result.limit, result.key_state) == ("genuine", "exhausted")
    assert result.reset_seconds == pytest.approx(3100.0)
    assert result.until(NOW) == NOW + timedelta(seconds=3100)
    # …but not once its reset has passed, nor a healthy state, nor a bucket without limit
    for state, age in ((known, 3590.0), (_snapshot(requests=(100, 40, 3600.0)), 0.0),
                       (_snapshot(requests=(0, 0, 3600.0)), 0.0)):
        assert classify(429, {}, b"", now=NOW, last_known=state,
                        last_known_age=age).limit == "transient"


def test_shared_limits_bench_the_pool_for_genuine_limits_and_billing() -> None:
    headers = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "10m"}
    genuine = classify(429, headers, b"", now=NOW, shared_limits=True)
    assert (genuine.recovery, genuine.key_specific, genuine.reset_seconds) == (
        "bench_pool", False, 600.0)
    billing = classify(402, {}, b"Payment Required", now=NOW, shared_limits=True)
    assert (billing.error_class, billing.recovery) == ("billing", "bench_pool")
    transient = classify(429, {"retry-after": "2"}, b"", now=NOW, shared_limits=True)
    assert (transient.recovery, transient.key_state, transient.reset_seconds) == (
        "retry", None, 2.0)


# ------------------------------------------------------------------ transport failures


#: A refused connection is never called a timeout (issue 20 §6): no connection made is
#: ``unreachable``, a dropped one a server error, and only a timeout a timeout.
TRANSPORT_CLASS = {"timeout": "timeout", "connect": "unreachable", "tls": "unreachable",
                   "reset": "server_error", "protocol": "server_error"}


@pytest.mark.parametrize("kind", TRANSPORT_FAILURES)
def test_transport_failures_are_retried_as_what_they_are(kind: str) -> None:
    assert set(TRANSPORT_CLASS) == set(TRANSPORT_FAILURES)
    for status in (0, 200):
        result = classify(status, {}, b"", now=NOW, transport=kind)  # type: ignore[arg-type]
        assert (result.error_class, result.recovery, result.key_specific) == (
            TRANSPORT_CLASS[kind], "retry", False)
        assert kind in result.reason


def test_a_transport_failure_after_an_error_status_keeps_the_status_rules() -> None:
    result = classify(429, {}, b'{"error": {"message": "Rate li', now=NOW, transport="reset")
    assert result.error_class == "rate_limit"


# ------------------------------------------------------------------ per-provider patterns


def test_provider_patterns_extend_the_defaults_for_that_provider_only() -> None:
    book = DEFAULT_BOOK.with_provider("myproxy", {"rate_limit": ["Slow down, cowboy"]})
    body = {"error": {"message": "slow down, COWBOY!"}}
    assert classify(0, {}, body, now=NOW, provider="myproxy", book=book).error_class == (
        "rate_limit")
    assert classify(0, {}, body, now=NOW, provider="other", book=book).error_class == "unknown"
    assert book.for_provider("other") is DEFAULT_PATTERNS


# ------------------------------------------------------------------ retry_delay


def test_retry_delay_is_bounded_and_jittered() -> None:
    rng = random.Random(7)
    firsts = [retry_delay(1, rng) for _ in range(200)]
    seconds = [retry_delay(2, rng) for _ in range(200)]
    assert all(d is not None and 0.5 <= d <= 1.0 for d in firsts)
    assert all(d is not None and 1.0 <= d <= 2.0 for d in seconds)
    assert len(set(firsts)) > 100  # jittered, not a fixed step
    assert retry_delay(MAX_RETRIES + 1, rng) is None
    assert retry_delay(0, rng) is None


def test_retry_delay_scales_with_the_configured_base() -> None:
    rng = random.Random(3)
    firsts = [retry_delay(1, rng, base=0.2) for _ in range(50)]
    seconds = [retry_delay(2, rng, base=0.2) for _ in range(50)]
    assert all(d is not None and 0.1 <= d <= 0.2 for d in firsts)
    assert all(d is not None and 0.2 <= d <= 0.4 for d in seconds)
    # A known Retry-After still wins over a short base.
    assert retry_delay(1, rng, retry_after=1.5, base=0.2) == 1.5


def test_retry_delay_honours_a_short_retry_after_and_refuses_a_long_one() -> None:
    rng = random.Random(1)
    assert retry_delay(1, rng, retry_after=3.0) == 3.0
    assert retry_delay(1, rng, retry_after=MAX_RETRY_WAIT + 1) is None
    assert retry_delay(1, rng, retry_after=float("nan")) is None


# ------------------------------------------------------------------ hostile input

_header_names = st.sampled_from([
    "retry-after", "retry-after-ms", "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens-1h", "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-requests-remaining", "content-type"]) | st.text(max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["error", "message", "code", "type", "status", "reset_at",
                         "retryDelay", "resets_in_seconds", "metadata", "raw", "details"])
        | st.text(max_size=10), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(
    status=st.integers(min_value=-1000, max_value=100_000),
    headers=st.dictionaries(_header_names, st.text(max_size=40), max_size=8),
    body=st.binary(max_size=600) | st.text(max_size=600) | _json,
    transport=st.none() | st.sampled_from(TRANSPORT_FAILURES),
    shared=st.booleans(),
    age=st.floats(allow_nan=True),
)
def test_never_raises_on_arbitrary_input(
    status: int, headers: dict[str, str], body: object, transport: str | None, shared: bool,
    age: float,
) -> None:
    known = _snapshot(requests=(10, 0, 120.0))
    result = classify(status, headers, body, now=NOW, transport=transport,  # type: ignore[arg-type]
                      shared_limits=shared, last_known=known, last_known_age=age)
    assert isinstance(result, Classification)
    assert result.error_class in ERROR_CLASSES
    assert result.recovery in RECOVERIES
    assert result.reset_seconds is None or result.reset_seconds >= 0


@pytest.mark.parametrize("body", [
    b"x" * 20_000_000,
    b"retry in 1" * 1_000_000,
    b"[" * 5_000_000,
    b'{"error": {"message": "' + b"rate " * 2_000_000 + b'"}}',
    b"<html>" + b"<div>overloaded" * 500_000,
    "超过最大长度".encode() * 1_000_000,
    b"data: " + b"{" * 1_000_000,
], ids=["flat", "phrases", "brackets", "long-json", "html", "cjk", "sse"])
def test_huge_bodies_are_classified_in_bounded_time(body: bytes) -> None:
    start = time.perf_counter()
    result = classify(429, {}, body, now=NOW)
    assert time.perf_counter() - start < 0.25
    assert result.error_class in ERROR_CLASSES


def test_deeply_nested_decoded_json_is_bounded() -> None:
    nested: object = "Rate limit exceeded"
    for _ in range(20_000):
        nested = [nested]
    start = time.perf_counter()
    result = classify(429, {}, nested, now=NOW)
    assert time.perf_counter() - start < 0.25
    assert result.error_class == "rate_limit"  # the status still decides


def test_naive_now_means_utc() -> None:
    naive = datetime(2026, 1, 15, 12, 0)
    body = {"error": {"message": "quota exhausted", "reset_at": int(NOW.timestamp()) + 600}}
    assert classify(429, {}, body, now=naive).reset_seconds == pytest.approx(600.0)
    assert NOW.tzinfo is UTC
