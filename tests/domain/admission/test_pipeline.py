"""The admission pipeline (domain/admission/pipeline.py) and the validation stage, pure."""

from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.config import Config
from sessionwarden.domain.admission.pipeline import (
    Admitted,
    Need,
    Pending,
    Pipeline,
    Proceed,
    Refuse,
    Refused,
    StageResult,
    stage,
    verdict_events,
)
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.admission.validation import MAX_MESSAGES, validate_request
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState
from sessionwarden.events import CallAdmitted, CallRefused, Event, SessionStarted

from tests.actors.actor_support import call_request

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class Noted(Event, frozen=True):
    """A stand-in for a stage's decision event (a spill, a compression)."""

    TAG = "test.noted.v1"
    what: str


def rewrite(request: CallRequest, **body: object) -> CallRequest:
    return msgspec.structs.replace(request, body={**request.body, **body})


@stage("tag")
def tag_stage(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    return Proceed(rewrite(request, tagged=True), (Noted(what="tagged"),))


@stage("gate")
def gate_stage(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    if request.body.get("tagged"):
        return Refuse(429, "gate closed", code="gated", kind="rate_limit_error",
                      events=(Noted(what="gated"),))
    return Proceed(request)


def test_stages_run_in_order_and_each_sees_the_rewrite_before_it() -> None:
    state = SessionState("s1")
    verdict = Pipeline([tag_stage, gate_stage]).run(state, call_request("c1", "s1"), NOW)
    assert isinstance(verdict, Refused)
    assert (verdict.stage, verdict.status, verdict.code, verdict.kind) == (
        "gate", 429, "gated", "rate_limit_error")
    assert verdict.events == (Noted(what="tagged"), Noted(what="gated"))
    assert verdict.request.body["tagged"] is True

    admitted = Pipeline([gate_stage, tag_stage]).run(state, call_request("c2", "s1"), NOW)
    assert isinstance(admitted, Admitted)
    assert admitted.request.body["tagged"] is True
    assert admitted.events == (Noted(what="tagged"),)


def test_an_empty_pipeline_admits_unchanged() -> None:
    request = call_request("c1", "s1")
    assert Pipeline([]).run(SessionState("s1"), request, NOW) == Admitted(request, ())


def test_verdict_events_start_a_new_session_then_record_the_verdict() -> None:
    request = call_request("c1", "s1", client="codex/1")
    state = SessionState("s1")
    events = verdict_events(state, Admitted(request, (Noted(what="x"),)))
    assert events == [
        SessionStarted(model="prov/model-x", client="codex/1"),
        Noted(what="x"),
        CallAdmitted(call_id="c1", provider="prov", model="model-x", message_count=4,
                     estimated_tokens=321, stream=True),
    ]
    for event in events:
        state.fold(event)
    assert (state.started, state.calls, list(state.open)) == (True, 1, ["c1"])
    refused = verdict_events(state, Refused("gate", 429, "no", "gated", "x", request, ()))
    assert refused == [CallRefused(call_id="c1", stage="gate", status=429, reason="no",
                                   code="gated")]


# ------------------------------------------------------------------ work


@stage("summarise")
def needs_summary(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    def resume(result: object) -> StageResult:
        if result is None:
            return Refuse(503, "no summary")
        return Proceed(rewrite(request, summary=result), (Noted(what=f"summary {result}"),))

    return Need({"summarise": request.call_id}, resume)


def test_a_stage_needing_work_pauses_and_resumes_where_it_stopped() -> None:
    pipeline = Pipeline([tag_stage, needs_summary, stage("after")(
        lambda state, request, now: Proceed(rewrite(request, after=True)))])
    state = SessionState("s1")
    pending = pipeline.run(state, call_request("c1", "s1"), NOW)
    assert isinstance(pending, Pending)
    assert pending.work == {"summarise": "c1"}
    assert pending.events == (Noted(what="tagged"),)  # decided so far, not yet recorded
    verdict = pipeline.resume(pending, "short", state, NOW)
    assert isinstance(verdict, Admitted)
    assert verdict.request.body == {**call_request("c1", "s1").body, "tagged": True,
                                    "summary": "short", "after": True}
    assert verdict.events == (Noted(what="tagged"), Noted(what="summary short"))
    failed = pipeline.resume(pending, None, state, NOW)
    assert isinstance(failed, Refused) and failed.stage == "summarise"


# ------------------------------------------------------------------ validation


def test_the_default_pipeline_is_validation_runaway_budgets_then_context() -> None:
    assert [s.name for s in default_pipeline(Config()).stages] == [
        "validation", "runaway", "budgets", "context"]


@pytest.mark.parametrize(("kwargs", "status", "code"), [
    ({"messages": 0}, 400, "empty_messages"),
    ({"problems": ("'messages' must be a list",)}, 400, "invalid_request"),
    ({"messages": MAX_MESSAGES + 1}, 400, "too_many_messages"),
])
def test_validation_refuses(kwargs: dict[str, object], status: int, code: str) -> None:
    verdict = Pipeline([validate_request]).run(
        SessionState("s1"), call_request("c1", "s1", **kwargs), NOW)  # type: ignore[arg-type]
    assert isinstance(verdict, Refused)
    assert (verdict.stage, verdict.status, verdict.code) == ("validation", status, code)


@given(st.integers(min_value=1, max_value=MAX_MESSAGES))
def test_validation_passes_any_well_formed_request(messages: int) -> None:
    request = call_request("c1", "s1", messages=1)
    request = msgspec.structs.replace(
        request, shape=msgspec.structs.replace(request.shape, message_count=messages))
    assert Pipeline([validate_request]).run(SessionState("s1"), request, NOW) == Admitted(
        request, ())
