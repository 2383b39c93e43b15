"""The model summariser's performer serving a client's call through the daemon.

The in-process daemon runs the real validation stage and a test stage standing for the
compression stage: on a call whose last message says ``compress:`` it needs a
:class:`SummaryWork` and, resumed with the result, forwards the summary in place of the
history. The performer is registered as the lead wires it (``summary_performers``). The
client (the ``openai`` SDK) gets its answer; the summary call is in the session's ledger
before the client's call, linked to it; the access line names the client's call.
"""

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import msgspec
import pytest
from loguru import logger
from sessionwarden.cmd.summarise import summary_performers
from sessionwarden.domain.admission import Need, Pipeline, Proceed, StageResult, stage
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.session import SessionState, session_stream
from sessionwarden.domain.summariser import (
    MODEL_HEADER,
    SummaryResult,
    SummaryWork,
    summary_request,
)
from sessionwarden.domain.validation import validate_request
from sessionwarden.events import CODEC, CallAdmitted, CallCompleted
from sessionwarden.upstream.chat_messages import to_neutral

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

SUMMARY = "## Goal\n- ship the release"


@stage("compress")
def compress(state: SessionState, request: CallRequest, now: datetime) -> StageResult:
    messages = request.body["messages"]
    if not str(messages[-1].get("content", "")).startswith("compress:"):
        return Proceed(request)
    system, prompt = summary_request(to_neutral(messages[:-1]), None, "", 8_000)
    work = SummaryWork(session_id=request.session_id, call_id=request.call_id,
                       provider="fake", model="sum-model", fallback_provider="fake",
                       fallback_model=MODEL, system=system, prompt=prompt, max_chars=8_000)

    def resume(result: object) -> StageResult:
        assert isinstance(result, SummaryResult)
        if result.failure:  # the real stage falls back to the builtin summary here
            return Proceed(request)
        body = {**request.body, "messages": [{"role": "system", "content": result.text},
                                             messages[-1]]}
        return Proceed(msgspec.structs.replace(request, body=body))

    return Need(work, resume)


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake,
                        pipeline=Pipeline([validate_request, compress]))
    try:
        d.start()
        d.runtime.performers.update(summary_performers(d.runtime))
        yield d
    finally:
        d.stop()


def _calls(daemon: InProcessDaemon, session: str) -> list[tuple[str, str, str, str]]:
    """(call id, purpose, parent call, outcome) of the session's calls, in order."""
    outcomes: dict[str, str] = {}
    admitted: list[CallAdmitted] = []
    for record in daemon.runtime.log.read_stream(session_stream(session)):
        event = CODEC.decode(record.type, record.data)
        if isinstance(event, CallAdmitted):
            admitted.append(event)
        elif isinstance(event, CallCompleted):
            outcomes[event.call_id] = event.outcome
    return [(a.call_id, a.purpose, a.parent_call, outcomes.get(a.call_id, ""))
            for a in admitted]


@pytest.mark.parametrize("fails", [False, True], ids=["answered", "upstream-503"])
def test_a_summary_side_call_serves_the_clients_call(
    daemon: InProcessDaemon, fake: FakeProviderServer, fails: bool
) -> None:
    fake.state.by_model["sum-model"] = {"status": 503} if fails else {"reply": SUMMARY}
    history = [{"role": "user", "content": "Ship the release today."},
               {"role": "assistant", "content": "On it."}]
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}",
                      level="INFO")
    try:
        with daemon.openai(session="s") as client:
            client.chat.completions.create(model=MODEL, messages=history[:1])  # plain
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[*history, {"role": "user", "content": "compress: go"}])
        call_id = raw.headers["x-sessionwarden-call-id"]
        deadline = time.monotonic() + 5  # the line is written once the response has ended
        while not [ln for ln in lines if "POST" in ln and call_id in ln] \
                and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        logger.remove(sink)
    assert raw.http_response.status_code == 200 and raw.parse().choices[0].message.content

    sent = [r.body for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]
    assert [b["model"] for b in sent] == [MODEL, "sum-model", MODEL]
    assert "Ship the release today." in sent[1]["messages"][1]["content"]
    if fails:
        assert sent[2]["messages"][-1]["content"] == "compress: go"
        assert len(sent[2]["messages"]) == 3  # forwarded as it came
    else:
        assert sent[2]["messages"][0] == {"role": "system",
                                          "content": MODEL_HEADER + "\n" + SUMMARY}

    calls = _calls(daemon, "s")
    assert [(purpose, parent) for _, purpose, parent, _ in calls] == [
        ("", ""), ("summary", call_id), ("", "")]
    assert calls[2][0] == call_id
    assert [outcome for *_, outcome in calls] == [
        "ok", "upstream_error" if fails else "ok", "ok"]
    # The access line of the client's request names its call, not the summary's.
    [line] = [ln for ln in lines if "POST /v1/chat/completions" in ln and call_id in ln]
    assert calls[1][0] not in "\n".join(lines)
    assert "tokens=" in line
