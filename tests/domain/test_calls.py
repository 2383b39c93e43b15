"""A call's completion (domain/calls.py) and the session's fold (domain/session.py)."""

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.calls import MAX_RAW_USAGE_CHARS, CallOutcome, complete_call
from sessionwarden.domain.errors import UnknownCall
from sessionwarden.domain.session import OpenCall, SessionState, session_id_of, session_stream
from sessionwarden.events import CallAdmitted, CallCompleted, CallRefused, SessionStarted

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def state() -> SessionState:
    return SessionState("s1", started=True, calls=1,
                        open_calls={"c1": OpenCall("prov", "m", estimated_tokens=250)})


def outcome(**facts: Any) -> CallOutcome:
    facts.setdefault("outcome", "ok")
    return CallOutcome(call_id="c1", session_id="s1", provider="prov", latency_ms=12.3456,
                       credential="fp:1", **facts)


def complete(**facts: Any) -> CallCompleted:
    return complete_call(state(), outcome(**facts), NOW, lambda text: text.replace("sk-", "X"))


def test_provider_usage_is_canonical_and_nothing_else_is_kept() -> None:
    event = complete(status=200, has_output=True, output_chars=400, usage_block={
        "prompt_tokens": 120, "completion_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 100}})
    assert event == CallCompleted(
        call_id="c1", status=200, latency_ms=12.346, credential="fp:1", input_tokens=20,
        cache_read_tokens=100, output_tokens=30)
    assert event.raw_usage == ""  # the counts say it all; the raw block is not repeated


def test_a_flagged_block_keeps_its_raw_text_redacted_and_bounded() -> None:
    event = complete(status=200, has_output=True, usage_block={
        "prompt_tokens": 10, "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 50}, "note": "sk-" + "a" * 5000})
    assert event.flags == ("cache_exceeds_input",)
    assert event.raw_usage.startswith('{"prompt_tokens":10')
    assert "sk-" not in event.raw_usage
    assert len(event.raw_usage) == MAX_RAW_USAGE_CHARS and event.raw_usage.endswith("...")


@pytest.mark.parametrize(("block", "flag"), [
    (None, "usage_missing"),
    ({"prompt_tokens": -5, "completion_tokens": 1}, "rejected:prompt_tokens"),
    ("a string", "rejected:usage"),
])
def test_missing_or_rejected_usage_is_estimated_from_admission(block: object, flag: str
                                                                 ) -> None:
    event = complete(status=200, has_output=True, output_chars=41, usage_block=block)
    assert (event.source, event.input_tokens, event.output_tokens) == ("estimated", 250, 11)
    assert event.flags == (flag,)


def test_an_error_without_output_is_missing_never_estimated() -> None:
    event = complete(outcome="upstream_error", status=500, error="boom")
    assert (event.source, event.input_tokens, event.output_tokens) == ("missing", 0, 0)
    assert (event.outcome, event.error) == ("upstream_error", "boom")


def test_an_orphan_is_unknown_estimated_and_flagged() -> None:
    event = complete(outcome="unknown")
    assert (event.outcome, event.source, event.input_tokens, event.flags) == (
        "unknown", "estimated", 250, ("outcome_unknown",))


def test_retry_after_is_the_keys_outcome() -> None:
    event = complete(outcome="upstream_error", status=429,
                     rate_limit_headers=(("retry-after", "17"),))
    assert event.retry_after_seconds == 17.0


def test_only_an_open_call_completes() -> None:
    with pytest.raises(UnknownCall):
        complete_call(SessionState("s1"), outcome(), NOW, str)


@given(st.dictionaries(st.text(max_size=20), st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=20), st.booleans(),
    st.dictionaries(st.text(max_size=10), st.integers())), max_size=6))
def test_any_usage_block_completes_without_raising(block: dict[str, Any]) -> None:
    event = complete(status=200, has_output=True, usage_block=block)
    assert min(event.input_tokens, event.output_tokens, event.cache_read_tokens) >= 0


def test_the_fold_follows_the_events() -> None:
    s = SessionState("s1")
    s.fold(SessionStarted(model="p/m"))
    s.fold(CallAdmitted(call_id="a", provider="p", model="m", estimated_tokens=7))
    s.fold(CallAdmitted(call_id="b", provider="p", model="m"))
    s.fold(CallRefused(call_id="c", stage="validation", status=400, reason="x"))
    s.fold(CallCompleted(call_id="a"))
    assert (s.started, s.calls, s.refused, dict(s.open)) == (
        True, 2, 1, {"b": OpenCall("p", "m", 0)})


def test_session_streams() -> None:
    assert session_stream("a:b") == "session-a:b"
    assert session_id_of("session-a:b") == "a:b"
    assert session_id_of("credentials-x") is None
