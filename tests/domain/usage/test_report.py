"""fold_usage and rate_limit_line: a session's usage view, folded from its events."""

from datetime import UTC, datetime, timedelta

from sessionwarden.domain.keys.ratelimits import RateLimitBucket
from sessionwarden.domain.usage.report import (
    RateLimitReading,
    SessionUsage,
    UsageTally,
    fold_usage,
    rate_limit_line,
)
from sessionwarden.events import CallAdmitted, CallCompleted, CallRefused, SessionStarted

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def admitted(call: str, purpose: str = "", provider: str = "openai") -> CallAdmitted:
    return CallAdmitted(call_id=call, provider=provider, model="gpt-4o", purpose=purpose,
                        parent_call="c1" if purpose else "")


def completed(call: str, cost: str | None, status: str = "actual", *, source: str = "provider",
              credential: str = "fp-a", tokens: int = 100) -> CallCompleted:
    return CallCompleted(call_id=call, input_tokens=tokens, output_tokens=10,
                         cache_read_tokens=20, cache_write_tokens=3, reasoning_tokens=4,
                         source=source, credential=credential, cost=cost, cost_status=status)


def test_nothing_completed_is_unknown_with_no_amount() -> None:
    usage = fold_usage([SessionStarted(model="openai/gpt-4o"), admitted("c1")])
    assert usage == SessionUsage(total=UsageTally(), client=UsageTally(), side_calls={},
                                 in_flight=1)
    assert (usage.total.cost, usage.total.cost_status) == (None, "unknown")


def test_side_calls_are_apart_and_in_the_total() -> None:
    usage = fold_usage([
        admitted("c1"), completed("c1", "0.001"),
        admitted("s1", purpose="summary", provider="cheap"),
        completed("s1", "0.0002", credential="fp-cheap", tokens=1000),
        admitted("c2"), completed("c2", "0.003"),
        CallRefused(call_id="c3", stage="validation", status=400, reason="bad"),
    ])
    assert usage.client.requests == 2 and usage.client.cost == "0.004"
    [(purpose, side)] = usage.side_calls.items()
    assert (purpose, side.requests, side.input_tokens, side.cost) == ("summary", 1, 1000,
                                                                       "0.0002")
    total = usage.total
    assert (total.requests, total.cost, total.cost_status) == (3, "0.0042", "actual")
    assert (total.input_tokens, total.output_tokens, total.cache_read_tokens,
            total.cache_write_tokens, total.reasoning_tokens) == (1200, 30, 60, 9, 12)
    # The rate-limit line follows the client's key, not the summary model's.
    assert (usage.last_provider, usage.last_credential, usage.in_flight) == ("openai", "fp-a",
                                                                             0)


def test_one_unknown_call_makes_the_cost_unknown_and_says_what_is_priced() -> None:
    usage = fold_usage([admitted("c1"), completed("c1", "0.5"),
                        admitted("c2"), completed("c2", None, "unknown")])
    total = usage.total
    assert (total.cost, total.cost_status) == (None, "unknown")
    assert (total.priced_cost, total.unknown_requests) == ("0.5", 1)
    only_unknown = fold_usage([admitted("c1"), completed("c1", None, "unknown")]).total
    assert (only_unknown.cost, only_unknown.priced_cost) == (None, None)  # never "0"


def test_estimated_costs_are_counted_and_mixed_statuses_are_partial() -> None:
    usage = fold_usage([
        admitted("c1"), completed("c1", "0.25"),
        admitted("c2"), completed("c2", "0.125", "estimated", source="estimated"),
        admitted("c3"), completed("c3", "0", "included"),
    ])
    total = usage.total
    assert (total.cost, total.cost_status) == ("0.375", "partial")
    assert (total.estimated_requests, total.estimated_cost) == (1, "0.125")
    assert total.sources == {"estimated": 1}


def test_a_foreign_cost_string_is_unknown_not_a_crash() -> None:
    usage = fold_usage([admitted("c1"), completed("c1", "NaN"), admitted("c2"),
                        completed("c2", "lots")])
    assert (usage.total.cost, usage.total.unknown_requests) == (None, 2)


def test_rate_limit_line_sorts_buckets_and_dates_their_reset() -> None:
    assert rate_limit_line("openai", "fp-a", []) is None
    line = rate_limit_line("openai", "fp-a", [
        RateLimitReading(RateLimitBucket(name="tokens", limit=1000, remaining=10,
                                         reset_seconds=1.5), T0),
        RateLimitReading(RateLimitBucket(name="requests", limit=100, remaining=0), T0),
    ])
    assert line is not None and line.observed_at == T0
    assert [b.name for b in line.buckets] == ["requests", "tokens"]
    assert line.reset_at == (None, T0 + timedelta(seconds=1.5))
