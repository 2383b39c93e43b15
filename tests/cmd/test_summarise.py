"""The model summariser's performer against the fake upstream, on a real runtime.

The runtime is the daemon's own (event log on a file, supervised actors, upstream
client); the performer is called as the proxy calls it. Each test checks what it returns,
what the fake upstream received, and the side calls in the session's ledger: admitted
with ``purpose "summary"`` and the waiting call as ``parent_call``, and completed — with
their usage — whatever happened.
"""

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.daemon.summarise import summarise, summary_performers
from sessionwarden.config import parse_config
from sessionwarden.domain.context.messages import Message, Text, ToolResult
from sessionwarden.domain.context.summariser import (
    MODEL_HEADER,
    SummaryResult,
    SummaryWork,
    summary_request,
)
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CODEC, CallAdmitted, CallCompleted, Event
from sessionwarden.redact import default_redactor

from tests.cmd.daemon_fixtures import MODEL, config_text
from tests.support.fake_provider import FakeProviderServer

T = TypeVar("T")
SUMMARY = "## Goal\n- fix the failing test\n\n## Relevant files\n- src/app.py"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory, upstream: FakeProviderServer
            ) -> Iterator[Runtime]:
    keys = {"FAKE_KEY_A": "sk-test-a-" + secrets.token_hex(8),
            "FAKE_KEY_B": "sk-test-b-" + secrets.token_hex(8)}
    extra = (f'[[providers]]\nname = "nokey"\nbase_url = "{upstream.base_url}"\n'
             '[[providers]]\nname = "dead"\nbase_url = "http://127.0.0.1:9/v1"\n'
             'keys = ["env:FAKE_KEY_A"]\n')
    config = parse_config(config_text(upstream.base_url, list(keys), extra=extra))
    rt = Runtime(config, tmp_path_factory.mktemp("summarise") / "events.db", keys)
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(autouse=True)
def fresh(upstream: FakeProviderServer) -> None:
    upstream.state.clear()


def run(rt: Runtime, make: Callable[[], Awaitable[T]]) -> T:
    async def go() -> T:
        try:
            return await make()
        finally:
            await rt.upstream.aclose()

    return asyncio.run(go())


def work(session: str, model: str = "sum-model", provider: str = "fake",
         fallback: tuple[str, str] = ("fake", MODEL), prompt: str = "") -> SummaryWork:
    middle = [Message("user", (Text("Fix the failing test in src/app.py"),))]
    system, built = summary_request(middle, None, "", 8_000)
    return SummaryWork(session_id=session, call_id="parent-" + session, provider=provider,
                       model=model, fallback_provider=fallback[0], fallback_model=fallback[1],
                       system=system, prompt=prompt or built, max_chars=8_000)


def side_calls(rt: Runtime, session: str) -> list[tuple[CallAdmitted, CallCompleted | None]]:
    """The session's calls: each admission with its completion (None if none)."""
    events: list[Event] = [CODEC.decode(e.type, e.data)
                           for e in rt.log.read_stream(session_stream(session))]
    done = {e.call_id: e for e in events if isinstance(e, CallCompleted)}
    return [(e, done.get(e.call_id)) for e in events if isinstance(e, CallAdmitted)]


def summarised(rt: Runtime, job: SummaryWork, **kwargs: Any) -> SummaryResult:
    return run(rt, lambda: summarise(rt, job, **kwargs))


def test_a_summary_is_a_metered_side_call_of_the_session(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["sum-model"] = {"reply": SUMMARY}
    result = summarised(runtime, work("ok"))
    assert result == SummaryResult(MODEL_HEADER + "\n" + SUMMARY, "fake/sum-model", "", False)

    [sent] = upstream.state.snapshot()
    assert sent.body["model"] == "sum-model" and sent.body["stream"] is False
    assert [m["role"] for m in sent.body["messages"]] == ["system", "user"]
    assert "Fix the failing test in src/app.py" in sent.body["messages"][1]["content"]
    assert sent.headers["authorization"].startswith("Bearer sk-test-")

    [(admitted, completed)] = side_calls(runtime, "ok")
    assert (admitted.purpose, admitted.parent_call) == ("summary", "parent-ok")
    assert (admitted.provider, admitted.model, admitted.message_count) == (
        "fake", "sum-model", 2)
    assert completed is not None and completed.outcome == "ok" and completed.status == 200
    assert completed.source == "provider"
    assert completed.output_tokens == len(SUMMARY) // 4 + 1  # the fake's usage, metered
    sent_chars = sum(len(m["content"]) for m in sent.body["messages"])
    assert completed.input_tokens + completed.cache_read_tokens == sent_chars // 4
    assert completed.credential  # the key's fingerprint


def test_a_pooled_key_in_the_prompt_never_reaches_the_upstream(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["sum-model"] = {"reply": SUMMARY}
    live = "sk-test-live-" + secrets.token_hex(12)
    default_redactor.add(live)  # as the key pool does for every key it loads
    middle = [Message("tool", (ToolResult("c1", (Text(f"export KEY={live}"),)),))]
    _, prompt = summary_request(middle, None, "", 8_000)
    result = summarised(runtime, work("redacted", prompt=prompt))
    assert not result.failure
    assert live not in str(upstream.state.last.body)
    assert "[REDACTED" in upstream.state.last.body["messages"][1]["content"]


def test_an_upstream_error_is_a_failure_and_a_completed_side_call(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["sum-model"] = {"status": 503}
    result = summarised(runtime, work("5xx"))
    assert result == SummaryResult("", "fake/sum-model", "upstream 503", False)
    assert len(upstream.state.snapshot()) == 1  # a 5xx is not retried on the fallback
    [(admitted, completed)] = side_calls(runtime, "5xx")
    assert admitted.purpose == "summary"
    assert completed is not None
    assert (completed.outcome, completed.status) == ("upstream_error", 503)
    assert "503" in completed.error


def test_a_timeout_is_a_failure_and_a_completed_side_call(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["sum-model"] = {"delay_ms": 3_000}
    started = time.monotonic()
    result = summarised(runtime, work("slow"), timeout_s=0.3)
    assert time.monotonic() - started < 2.0
    assert result == SummaryResult("", "fake/sum-model", "timeout", False)
    [(_, completed)] = side_calls(runtime, "slow")
    assert completed is not None and completed.outcome == "timeout"


def test_a_missing_summary_model_falls_back_to_the_sessions_model(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["gone-model"] = {"status": 404}
    upstream.state.by_model[MODEL] = {"reply": SUMMARY}
    result = summarised(runtime, work("gone", model="gone-model"))
    assert result == SummaryResult(MODEL_HEADER + "\n" + SUMMARY, f"fake/{MODEL}", "", True)
    assert [r.body["model"] for r in upstream.state.snapshot()] == ["gone-model", MODEL]
    calls = side_calls(runtime, "gone")
    assert [(a.model, a.purpose, a.parent_call) for a, _ in calls] == [
        ("gone-model", "summary", "parent-gone"), (MODEL, "summary", "parent-gone")]
    assert [(c.outcome, c.status) for _, c in calls if c] == [("upstream_error", 404),
                                                             ("ok", 200)]


def test_a_missing_model_without_another_to_try_is_a_failure(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["gone-model"] = {"status": 404}
    result = summarised(runtime, work("gone-alone", model="gone-model",
                                      fallback=("fake", "gone-model")))
    assert result == SummaryResult("", "fake/gone-model", "model not found", False)
    assert len(side_calls(runtime, "gone-alone")) == 1


def test_no_key_is_a_failure_recorded_as_no_credential(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    result = summarised(runtime, work("nokey", provider="nokey", fallback=("nokey", "m")))
    assert result == SummaryResult("", "nokey/sum-model", "no key", False)
    assert upstream.state.snapshot() == []  # nothing was sent
    [(admitted, completed)] = side_calls(runtime, "nokey")
    assert admitted.provider == "nokey"
    assert completed is not None and completed.outcome == "no_credential"


def test_no_key_for_the_summary_provider_falls_back_to_the_sessions_model(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model[MODEL] = {"reply": SUMMARY}
    result = summarised(runtime, work("nokey-fallback", provider="nokey"))
    assert (result.model, result.failure, result.used_fallback) == (f"fake/{MODEL}", "", True)
    outcomes = [c.outcome for _, c in side_calls(runtime, "nokey-fallback") if c]
    assert outcomes == ["no_credential", "ok"]


def test_an_unreachable_upstream_is_a_failure(runtime: Runtime) -> None:
    result = summarised(runtime, work("dead", provider="dead", fallback=("dead", "m")))
    assert result.failure == "unreachable" and not result.text
    [(_, completed)] = side_calls(runtime, "dead")
    assert completed is not None and completed.outcome == "unreachable"


@pytest.mark.parametrize(("options", "failure"), [
    ({"raw_body": "not json"}, "malformed answer"),
    ({"reply": "  <think>hmm</think>\n "}, "empty summary"),
])
def test_an_unusable_answer_is_a_failure_but_metered(
        runtime: Runtime, upstream: FakeProviderServer, options: dict[str, Any],
        failure: str) -> None:
    upstream.state.by_model["sum-model"] = options
    session = "unusable-" + failure.split()[0]
    result = summarised(runtime, work(session))
    assert result == SummaryResult("", "fake/sum-model", failure, False)
    [(_, completed)] = side_calls(runtime, session)
    assert completed is not None and completed.outcome == "ok"
    assert completed.output_tokens > 0 or completed.input_tokens > 0  # billed: metered


def test_a_cancelled_summary_is_completed_before_it_propagates(
        runtime: Runtime, upstream: FakeProviderServer) -> None:
    upstream.state.by_model["sum-model"] = {"delay_ms": 3_000}

    async def cancel_it() -> None:
        task = asyncio.ensure_future(summarise(runtime, work("cancelled")))
        while not upstream.state.snapshot():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(runtime, cancel_it)
    [(_, completed)] = side_calls(runtime, "cancelled")
    assert completed is not None and completed.outcome == "cancelled"


def test_the_performer_is_registered_by_its_work_type(runtime: Runtime) -> None:
    performers = summary_performers(runtime)
    assert list(performers) == [SummaryWork]
