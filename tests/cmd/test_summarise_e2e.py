"""The model summariser through the daemon: the real context stage, a metered side call.

A long tool-heavy session on a small-window model, ``summariser = "model"``: the stage
needs a summary, the proxy's performer asks the summary model (a side call recorded in
the session's ledger, linked to the client's call), and the summary replaces the middle.
When the summary model fails (5xx, timeout) or is missing, no history is lost: the
builtin summary stands in, or with ``on_summary_failure = "abort"`` the history is
forwarded whole.
"""

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from sessionwarden.cmd.daemon.summarise import summarise
from sessionwarden.domain.context.summariser import MODEL_HEADER, SummaryWork
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    ContextCompressed,
    SummariserFailed,
)

from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import SMALL, agent_session, check_forwarded, upstream
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

SUMMARY = "## Goal\n- fix the failing test suite"


def make(tmp_path: Path, fake: FakeProviderServer, on_failure: str = "fallback"
         ) -> InProcessDaemon:
    # The summary made at the trigger, inline (the prepared one: test_prepared_ahead.py).
    config = (f'[compression]\nsummariser = "model"\nsummary_model = "fake/sum-model"\n'
              f'on_summary_failure = "{on_failure}"\nprepare_ahead = false\n{SMALL}')
    return InProcessDaemon(tmp_path / "events.db", fake, extra_config=config,
                           clock=FakeClock())


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = make(tmp_path, fake)
    try:
        yield d.start()
    finally:
        d.stop()


def run_until_compressed(daemon: InProcessDaemon, session: str) -> list[list[dict[str, Any]]]:
    """Play the agent session until its first compression; the histories sent."""
    assert daemon.clock is not None and isinstance(daemon.clock, FakeClock)
    sent = []
    with daemon.openai(session=session) as client:
        for messages in agent_session(40):
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            daemon.clock.advance(90)
            sent.append(messages)
            if [e for e in events(daemon, session)
                    if isinstance(e, ContextCompressed | SummariserFailed)]:
                break
    return sent


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(r.type, r.data)
            for r in daemon.runtime.log.read_stream(session_stream(session))]


def calls(daemon: InProcessDaemon, session: str) -> list[tuple[str, str, str, str]]:
    """(call id, purpose, parent call, outcome) of the session's calls, in order."""
    outcomes = {e.call_id: e.outcome for e in events(daemon, session)
                if isinstance(e, CallCompleted)}
    return [(e.call_id, e.purpose, e.parent_call, outcomes.get(e.call_id, ""))
            for e in events(daemon, session) if isinstance(e, CallAdmitted)]


def test_a_model_summary_replaces_the_middle_and_is_metered(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    fake.state.by_model["sum-model"] = {"reply": SUMMARY}
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}",
                      level="INFO")
    try:
        histories = run_until_compressed(daemon, "model")
        time.sleep(0.2)  # the access line is written once the response has ended
    finally:
        logger.remove(sink)
    [compressed] = [e for e in events(daemon, "model") if isinstance(e, ContextCompressed)]
    assert (compressed.summariser, compressed.model) == ("model", "fake/sum-model")
    received = upstream(fake)
    summary_call, client_call = received[-2], received[-1]
    assert summary_call.body["model"] == "sum-model"
    assert "fix the failing" not in summary_call.body["messages"][-1]["content"]
    sent = client_call.body["messages"]
    check_forwarded(sent)
    assert any(str(m.get("content", "")).startswith(MODEL_HEADER) for m in sent)
    assert sent[-1] == histories[-1][-1]
    # The side call is in the session's ledger, linked to the call it served.
    table = calls(daemon, "model")
    [(side, purpose, parent, outcome)] = [c for c in table if c[1]]
    assert (purpose, parent, outcome) == ("summary", compressed.call_id, "ok")
    assert table[-1][0] == compressed.call_id
    [line] = [ln for ln in lines if "POST /v1/chat/completions" in ln
              and compressed.call_id in ln]
    assert side not in line


@pytest.mark.parametrize("failure", ["503", "timeout"])
def test_a_failing_summariser_falls_back_to_the_builtin_summary(
    daemon: InProcessDaemon, fake: FakeProviderServer, failure: str
) -> None:
    if failure == "503":
        fake.state.by_model["sum-model"] = {"status": 503}
    else:
        fake.state.by_model["sum-model"] = {"delay_ms": 2000}
        daemon.runtime.performers[SummaryWork] = partial(summarise, daemon.runtime,
                                                         timeout_s=0.3)
    histories = run_until_compressed(daemon, "fallback")
    [failed] = [e for e in events(daemon, "fallback") if isinstance(e, SummariserFailed)]
    assert failed.action == "fallback" and failed.cooldown_s == 60.0
    assert failed.reason == ("upstream 503" if failure == "503" else "timeout")
    [compressed] = [e for e in events(daemon, "fallback") if isinstance(e, ContextCompressed)]
    assert compressed.summariser == "builtin-fallback" and compressed.summarised > 0
    sent = upstream(fake)[-1].body["messages"]
    check_forwarded(sent)
    assert any("Context summary" in str(m.get("content")) for m in sent)
    assert sent[-1] == histories[-1][-1]
    [(_, _, _, outcome)] = [c for c in calls(daemon, "fallback") if c[1]]
    assert outcome == ("upstream_error" if failure == "503" else "timeout")


def test_a_missing_summary_model_falls_back_to_the_sessions_model(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    fake.state.by_model["sum-model"] = {"status": 404}
    fake.state.by_model["small"] = {"reply": SUMMARY}
    run_until_compressed(daemon, "missing")
    [compressed] = [e for e in events(daemon, "missing") if isinstance(e, ContextCompressed)]
    assert (compressed.summariser, compressed.model) == ("model", "fake/small")
    assert not [e for e in events(daemon, "missing") if isinstance(e, SummariserFailed)]
    assert [c[1:] for c in calls(daemon, "missing") if c[1]] == [
        ("summary", compressed.call_id, "upstream_error"),
        ("summary", compressed.call_id, "ok")]


def test_abort_forwards_the_whole_history_when_the_summary_fails(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = make(tmp_path, fake, on_failure="abort").start()
    try:
        fake.state.by_model["sum-model"] = {"status": 500}
        histories = run_until_compressed(daemon, "abort")
        [failed] = [e for e in events(daemon, "abort") if isinstance(e, SummariserFailed)]
        assert failed.action == "abort"
        assert not [e for e in events(daemon, "abort") if isinstance(e, ContextCompressed)]
        # Not a message lost: the last call went upstream as the client sent it.
        assert upstream(fake)[-1].body["messages"] == histories[-1]
    finally:
        daemon.stop()


def compress_now(daemon: InProcessDaemon, session: str) -> None:
    """Play the agent session, with no time passing, until its first compression."""
    with daemon.openai(session=session) as client:
        for messages in agent_session(40):
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            if [e for e in events(daemon, session)
                    if isinstance(e, ContextCompressed | SummariserFailed)]:
                return
    raise AssertionError(f"{session} was never compressed")


def summary_requests(fake: FakeProviderServer) -> int:
    return sum(1 for r in fake.state.snapshot()
               if r.path.endswith("/chat/completions") and r.body.get("model") == "sum-model")


def test_a_summary_model_failing_for_one_session_is_cooling_for_the_others(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    fake.state.by_model["sum-model"] = {"status": 503}
    first = make(tmp_path, fake).start()
    try:
        compress_now(first, "a")
        [failed] = [e for e in events(first, "a") if isinstance(e, SummariserFailed)]
        assert failed.cooldown_s == 60.0
        asked = summary_requests(fake)
        assert asked >= 1
        # Another session, inside the cooldown: the model is not asked again.
        compress_now(first, "b")
        [cooling] = [e for e in events(first, "b") if isinstance(e, SummariserFailed)]
        assert cooling.reason.startswith("cooling down until") and cooling.cooldown_s == 0
        assert summary_requests(fake) == asked
        [compressed] = [e for e in events(first, "b") if isinstance(e, ContextCompressed)]
        assert compressed.summariser == "builtin-fallback"
        clock = first.clock
    finally:
        first.stop()
    # A restart keeps the cooldown (it is folded from the log), and its end ends it.
    second = make(tmp_path, fake)
    second.clock = clock
    second.start()
    try:
        compress_now(second, "c")
        assert summary_requests(fake) == asked
        assert isinstance(clock, FakeClock)
        clock.advance(61)
        fake.state.by_model["sum-model"] = {"reply": SUMMARY}
        compress_now(second, "d")
        assert summary_requests(fake) == asked + 1
        [done] = [e for e in events(second, "d") if isinstance(e, ContextCompressed)]
        assert (done.summariser, done.model) == ("model", "fake/sum-model")
    finally:
        second.stop()
