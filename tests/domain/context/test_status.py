"""fold_context: a session's context status from its events."""

from datetime import UTC, datetime, timedelta

from sessionwarden.domain.context.status import (
    ContextFigure,
    ContextStatus,
    LastCompression,
    LastFailure,
    PendingCompaction,
    fold_context,
    with_threshold,
)
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CompactionRequested,
    ContextCompressed,
    Event,
    HistoryReset,
    SessionStarted,
    SummariserFailed,
    ToolResultSpilled,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def timed(*events: Event) -> list[tuple[Event, datetime]]:
    """``events`` one second apart from T0."""
    return [(e, T0 + timedelta(seconds=i)) for i, e in enumerate(events)]


def admitted(call: str, estimate: int, purpose: str = "") -> CallAdmitted:
    return CallAdmitted(call_id=call, provider="openai", model="gpt-4o", message_count=3,
                        estimated_tokens=estimate, purpose=purpose,
                        parent_call="c1" if purpose else "")


def completed(call: str, source: str = "provider") -> CallCompleted:
    return CallCompleted(call_id=call, input_tokens=1000, cache_read_tokens=200,
                         cache_write_tokens=30, output_tokens=99, source=source)


def test_an_empty_stream_is_an_empty_status() -> None:
    assert fold_context("s", []) == ContextStatus(session_id="s")


def test_the_figure_is_real_once_the_latest_client_call_completed_with_usage() -> None:
    status = fold_context("s", timed(SessionStarted(model="openai/gpt-4o"),
                                     admitted("c1", 900), completed("c1")))
    assert status.context == ContextFigure(1230, "real", "c1")  # input + cache read + write
    assert (status.provider, status.model, status.calls) == ("openai", "gpt-4o", 1)
    assert (status.started_at, status.last_at) == (T0, T0 + timedelta(seconds=2))


def test_a_call_in_flight_or_without_usage_gives_its_estimate() -> None:
    in_flight = fold_context("s", timed(admitted("c1", 900), completed("c1"),
                                        admitted("c2", 1500)))
    assert in_flight.context == ContextFigure(1500, "estimated", "c2")
    for source in ("estimated", "missing"):
        status = fold_context("s", timed(admitted("c1", 900), completed("c1", source)))
        assert status.context == ContextFigure(900, "estimated", "c1")


def test_side_calls_are_counted_apart_and_never_make_the_figure() -> None:
    status = fold_context("s", timed(
        admitted("c1", 900), admitted("side", 5000, purpose="summary"),
        completed("side"), completed("c1", "missing")))
    assert (status.calls, status.summariser_calls) == (1, 1)
    assert status.context == ContextFigure(900, "estimated", "c1")
    # A late completion of an older client call does not replace the newer call's figure.
    status = fold_context("s", timed(admitted("c1", 900), admitted("c2", 950),
                                     completed("c1")))
    assert status.context == ContextFigure(950, "estimated", "c2")


def test_a_refused_call_is_counted_and_the_model_comes_from_session_started() -> None:
    status = fold_context("s", timed(
        SessionStarted(model="openrouter/anthropic/claude-x"),
        CallRefused(call_id="c1", stage="validation", status=400, reason="empty")))
    assert (status.provider, status.model) == ("openrouter", "anthropic/claude-x")
    assert (status.calls, status.refused, status.context) == (0, 1, None)


def test_compressions_counted_and_the_last_one_with_its_savings() -> None:
    first = ContextCompressed(call_id="c1", tokens_before=100_000, tokens_after=40_000)
    last = ContextCompressed(call_id="c3", trigger="requested", summariser="builtin-fallback",
                             model="openai/gpt-4o-mini", focus="the migration",
                             source="real", tokens_before=90_000, tokens_after=30_000,
                             threshold=64_000, messages_before=120, messages_after=14,
                             summarised=100)
    status = fold_context("s", timed(first, last))
    assert status.compressions == 2
    assert status.last_compression == LastCompression(
        call_id="c3", at=T0 + timedelta(seconds=1), trigger="requested",
        summariser="builtin-fallback", model="openai/gpt-4o-mini", focus="the migration",
        source="real", tokens_before=90_000, tokens_after=30_000, saved_tokens=60_000,
        saved_percent=66.7, messages_before=120, messages_after=14, summarised=100)
    empty = fold_context("s", timed(ContextCompressed(call_id="c1"))).last_compression
    assert empty is not None and empty.saved_percent == 0.0  # no division by zero


def test_spills_count_their_bytes_and_truncations() -> None:
    status = fold_context("s", timed(
        ToolResultSpilled(call_id="c1", message=3, tool="shell", file="ab" * 16,
                          chars=150_000, bytes=150_002),
        ToolResultSpilled(call_id="c1", message=5, reason="turn", chars=90_000, bytes=90_000,
                          truncated=True, error="disk full"),
        HistoryReset(call_id="c2", reason="edited")))
    assert (status.spills, status.spilled_bytes, status.spills_truncated) == (2, 240_002, 1)
    assert status.history_resets == 1


def test_summariser_failures_and_the_last_cooldown() -> None:
    status = fold_context("s", timed(
        SummariserFailed(call_id="c1", model="openai/gpt-4o-mini", reason="HTTP 503",
                         cooldown_s=60.0),
        SummariserFailed(call_id="c2", model="openai/gpt-4o-mini", reason="timeout",
                         action="abort", cooldown_s=600.0)))
    at = T0 + timedelta(seconds=1)
    assert status.summariser_failures == 2
    assert status.last_failure == LastFailure(
        call_id="c2", at=at, model="openai/gpt-4o-mini", reason="timeout", action="abort",
        cooldown_until=at + timedelta(minutes=10))


def test_a_requested_compaction_is_pending_until_a_compression() -> None:
    requested = [CompactionRequested(focus="old"), CompactionRequested(focus="the tests")]
    status = fold_context("s", timed(ContextCompressed(call_id="c1"), *requested))
    assert status.pending_compaction == PendingCompaction("the tests",
                                                          T0 + timedelta(seconds=2))
    served = fold_context("s", timed(*requested, ContextCompressed(call_id="c2",
                                                                   trigger="requested")))
    assert served.pending_compaction is None


def test_the_threshold_comes_from_the_caller() -> None:
    status = fold_context("s", timed(admitted("c1", 900)))
    assert status.threshold_tokens is None
    set_ = with_threshold(status, 64_000, enabled=False)
    assert (set_.threshold_tokens, set_.compression_enabled) == (64_000, False)
    assert set_.context == status.context


def test_the_share_of_prompt_tokens_read_from_the_cache_counts_client_calls_only() -> None:
    assert fold_context("s", timed(admitted("c1", 900))).cache_read_percent is None
    warm = CallCompleted(call_id="c2", input_tokens=100, cache_read_tokens=800,
                         cache_write_tokens=100)
    summary = CallCompleted(call_id="s1", input_tokens=5000)  # a side call: not counted
    status = fold_context("s", timed(
        admitted("c1", 900), completed("c1"), admitted("s1", 5000, purpose="summary"),
        summary, admitted("c2", 1000), warm))
    # c1: 1,000 + 200 read + 30 written (completed()); c2: 100 + 800 read + 100 written
    assert status.cache_read_percent == round(100.0 * (200 + 800) / (1230 + 1000), 1)
