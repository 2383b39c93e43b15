"""A stage that needs work is served by the proxy, on its event loop, through the daemon.

The in-process daemon runs a pipeline of the real validation stage and a test stage that
needs a summary (the shape of the context issue's model summariser): the proxy runs the
performer registered for that work on its loop, admission resumes with the result, and
the request the upstream receives is the one the stage rewrote. A refusal after the work
reaches the client as the stage's error and nothing is sent upstream.
"""

import asyncio
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import openai
import pytest
from sessionwarden.domain.admission.pipeline import (
    Need,
    Pipeline,
    Proceed,
    Refuse,
    StageResult,
    stage,
)
from sessionwarden.domain.admission.validation import validate_request
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState
from sessionwarden.events import CallAdmitted, CallCompleted, CallRefused, SessionStarted

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer


class Summary(msgspec.Struct, frozen=True):
    """The work the test stage needs: a summary of ``messages`` messages."""

    messages: int


@stage("needs-summary")
def needs_summary(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    def resume(result: object) -> StageResult:
        if result == "no":
            return Refuse(409, "the summariser said no", code="summary_refused")
        note = msgspec.json.encode({"role": "user", "content": str(result)})
        body = request.body.with_items([*request.body.items, note])
        return Proceed(msgspec.structs.replace(request, body=body))

    return Need(Summary(request.shape.message_count), resume)


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake,
                        pipeline=Pipeline([validate_request, needs_summary]))
    try:
        yield d.start()
    finally:
        d.stop()


def test_the_proxy_performs_the_work_and_forwards_the_rewritten_request(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    performed: list[tuple[Summary, str, bool]] = []

    async def summarise(work: Any) -> str:
        loop_thread = threading.current_thread().name
        performed.append((work, loop_thread, asyncio.get_running_loop().is_running()))
        await asyncio.sleep(0.01)  # real async work: the loop keeps serving meanwhile
        return "no" if work.messages > 2 else f"summary of {work.messages}"

    daemon.runtime.performers[Summary] = summarise
    with daemon.openai(session="needy") as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "a"},
                                   {"role": "user", "content": "b"}])
        assert reply.choices[0].message.content
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model=MODEL, messages=[
                {"role": "user", "content": c} for c in "xyz"])
    assert refused.value.status_code == 409
    assert "the summariser said no" in refused.value.message

    assert [w for w, _, _ in performed] == [Summary(2), Summary(3)]
    assert all(name == "sw-test-server" and running for _, name, running in performed)
    upstream = [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]
    assert len(upstream) == 1 and upstream[0].body["messages"][-1] == {
        "role": "user", "content": "summary of 2"}
    assert daemon.types("session-needy") == [
        SessionStarted.type_tag(), CallAdmitted.type_tag(), CallCompleted.type_tag(),
        CallRefused.type_tag()]


def test_work_without_a_performer_is_a_503_and_nothing_is_sent(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with daemon.openai(session="unserved") as client, \
            pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model=MODEL,
                                       messages=[{"role": "user", "content": "a"}])
    assert failed.value.status_code == 503
    assert not [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]
    # The pending admission was abandoned: the session recorded nothing of the call.
    assert CallAdmitted.type_tag() not in daemon.types("session-unserved")
