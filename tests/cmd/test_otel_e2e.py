"""OpenTelemetry spans of real calls, received by a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.support.fake_provider import FakeProviderServer


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf bodies, spans kept."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Span]] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.paths.append(self.path)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope in resource_spans.scope_spans:
                        received.spans.extend((resource, s) for s in scope.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def config(endpoint: str, extra: str = "") -> str:
    return f'[otel]\nendpoint = "{endpoint}"\nservice_name = "sw-test"\n{extra}'


def test_each_call_is_a_genai_span_with_our_attributes_and_its_failovers(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, config(f"http://127.0.0.1:{receiver.port}"))
    client = daemon.openai(session="traced-session-1")
    secret_words = "the quick brown fox keeps this private"
    plain = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": secret_words}])
    # The key round robin picks next answers 429: the call fails over to the first one.
    used = fake.state.last.headers["authorization"]
    [other] = [k for k in daemon.keys.values() if f"Bearer {k}" != used]
    fake.state.by_key[other] = {"status": 429}
    try:
        failed_over = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": secret_words}])
    finally:
        fake.state.by_key.pop(other)
    assert plain.status_code == failed_over.status_code == 200
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    assert set(receiver.paths) == {"/v1/traces"}
    by_call = {attributes(s.attributes)["sessionwarden.call.id"]: (r, s)
               for r, s in receiver.spans}
    first_id = plain.headers["x-sessionwarden-call-id"]
    second_id = failed_over.headers["x-sessionwarden-call-id"]
    assert set(by_call) == {first_id, second_id}

    resource, span = by_call[first_id]
    assert resource["service.name"] == "sw-test"
    assert span.name == f"chat {MODEL}" and span.kind == Span.SPAN_KIND_CLIENT
    assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
    found = attributes(span.attributes)
    usage = plain.parse().usage
    assert usage is not None
    assert found["gen_ai.operation.name"] == "chat"
    assert found["gen_ai.provider.name"] == "fake"
    assert found["gen_ai.request.model"] == MODEL
    assert found["gen_ai.response.model"]
    assert found["gen_ai.conversation.id"] == "traced-session-1"
    assert found["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert found["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert found["gen_ai.usage.cache_read.input_tokens"] == 0
    assert found["gen_ai.usage.cache_creation.input_tokens"] == 0
    assert found["sessionwarden.outcome"] == "ok"
    assert found["sessionwarden.cost.status"] in ("exact", "estimated", "unknown", "included")
    assert len(found["sessionwarden.credential"]) > 0
    assert "error.type" not in found
    assert not span.events
    # No message content, no key, anywhere in what was exported.
    exported = repr([(r, s) for r, s in receiver.spans])
    assert secret_words not in exported and "gen_ai.input.messages" not in exported
    assert not any(key in exported for key in daemon.keys.values())

    _, span = by_call[second_id]
    found = attributes(span.attributes)
    assert found["sessionwarden.outcome"] == "ok"
    [event] = span.events
    assert event.name == "sessionwarden.failover"
    failed = attributes(event.attributes)
    assert failed["http.response.status_code"] == 429
    assert failed["sessionwarden.credential"] != found["sessionwarden.credential"]

    # The drop counter is exposed (nothing dropped here).
    assert daemon.rt.registry.get_sample_value(
        "sessionwarden_otel_spans_dropped_total", {"reason": "export_failed"}) is None


def test_content_is_captured_only_when_asked_and_truncated(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, config(
        f"http://127.0.0.1:{receiver.port}", "capture_content = true\n"))
    client = daemon.openai(session="traced-session-2")
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "visible words " + "x" * 9000}])
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    [(_, span)] = receiver.spans
    captured = attributes(span.attributes)["gen_ai.input.messages"]
    assert "visible words" in captured and len(captured.encode()) <= 4096


def test_a_receiver_that_is_down_fails_no_call(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    daemon = start_made(made, tmp_path, fake, config(f"http://127.0.0.1:{closed}"))
    client = daemon.openai(session="traced-session-3")
    for _ in range(3):
        answer = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert answer.status_code == 200
    # The export fails in the background; shutting it down waits no longer than told.
    assert daemon.rt is not None and daemon.rt.tracing is not None
    started = time.monotonic()
    daemon.rt.tracing.shutdown(timeout_s=0.2)
    assert time.monotonic() - started < 1.0


def test_without_the_extra_the_daemon_warns_once_and_exports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loguru import logger
    from prometheus_client import CollectorRegistry
    from sessionwarden.cmd.daemon import runtime
    from sessionwarden.config import parse_config

    monkeypatch.setitem(sys.modules, "sessionwarden.cmd.daemon.tracing", None)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        made = runtime._tracing(parse_config(config("http://127.0.0.1:4318")),
                                CollectorRegistry())
    finally:
        logger.remove(sink)
    assert made is None
    [warning] = warnings
    assert "pip install 'sessionwarden[otel]'" in warning and "Traceback" not in warning


def test_a_summary_is_a_child_span_of_the_call_it_served_and_cache_counts_as_input(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    from tests.cmd.test_context_e2e import agent_session
    from tests.cmd.test_session_usage_e2e import (
        CLIENT_USAGE,
        CONFIG,
        SUMMARY,
        SUMMARY_USAGE,
        control,
    )

    daemon = start_made(made, tmp_path, fake,
                        config(f"http://127.0.0.1:{receiver.port}") + CONFIG)
    fake.state.by_model["small"] = {"usage": "custom", "usage_block": CLIENT_USAGE}
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "usage": "custom",
                                        "usage_block": SUMMARY_USAGE}
    histories = agent_session(7)
    with daemon.openai(session="agent") as client, control(daemon) as http:
        client.chat.completions.create(model="small", messages=histories[-2])  # type: ignore[arg-type]
        assert http.post("/v1/sessions/agent/compact", json={}).status_code == 202
        served = client.chat.completions.with_raw_response.create(
            model="small", messages=histories[-1])  # type: ignore[arg-type]
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    spans = {attributes(s.attributes)["sessionwarden.call.id"]: s for _, s in receiver.spans}
    parent = spans[served.headers["x-sessionwarden-call-id"]]
    [summary] = [s for s in spans.values()
                 if attributes(s.attributes).get("sessionwarden.purpose") == "summary"]
    found = attributes(summary.attributes)
    assert found["sessionwarden.parent_call"] == served.headers["x-sessionwarden-call-id"]
    assert found["gen_ai.request.model"] == "sum-model"
    assert summary.trace_id == parent.trace_id and summary.parent_span_id == parent.span_id
    assert not parent.parent_span_id
    # Input includes the cache (1,000 = 500 + 400 read + 100 written); the exact cost.
    found = attributes(parent.attributes)
    assert found["gen_ai.usage.input_tokens"] == 1000
    assert found["gen_ai.usage.cache_read.input_tokens"] == 400
    assert found["gen_ai.usage.cache_creation.input_tokens"] == 100
    assert found["gen_ai.usage.output_tokens"] == 50
    assert Decimal(found["sessionwarden.cost.usd"]) == Decimal("0.00185")
    assert found["sessionwarden.cost.status"] == "actual"
    # The compaction asked for is made at the call it served: an event of its span.
    [compaction] = [attributes(e.attributes) for e in parent.events
                    if e.name == "sessionwarden.compaction"]
    assert compaction["sessionwarden.compaction.trigger"] == "requested"
    assert compaction["sessionwarden.compaction.summariser"] == "model"
    assert compaction["sessionwarden.compaction.model"] == "fake/sum-model"
    assert compaction["sessionwarden.compaction.prepared"] is False
    assert compaction["sessionwarden.compaction.summarised"] > 0


def test_a_refusal_is_a_span_event(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    import openai

    daemon = start_made(made, tmp_path, fake, config(f"http://127.0.0.1:{receiver.port}")
                        + '[budgets]\nsession_usd = "1.00"\n')
    client = daemon.openai(session="traced-session-4")
    tool = {"type": "function", "function": {"name": "shell", "parameters": {}}}
    with pytest.raises(openai.APIStatusError) as refused:  # gpt-test has no price: refused
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}],
                                       tools=[tool])  # type: ignore[list-item]
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    [(_, span)] = receiver.spans
    found = attributes(span.attributes)
    assert found["sessionwarden.outcome"] == "refused"
    assert found["error.type"] == "refused"
    assert found["sessionwarden.call.id"] == refused.value.response.headers[
        "x-sessionwarden-call-id"]
    [event] = span.events
    assert event.name == "sessionwarden.refused"
    assert span.status.code == span.status.STATUS_CODE_ERROR


def test_the_grace_call_and_the_daemons_answer_are_span_events(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, config(f"http://127.0.0.1:{receiver.port}")
                        + "[budgets]\nmax_iterations = 1\n")
    fake.state.by_model[MODEL] = {"tool_arguments": [{"command": "true"}] * 3}
    client = daemon.openai(session="traced-session-5")
    tool: Any = {"type": "function", "function": {"name": "shell", "parameters": {}}}
    messages: list[Any] = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[tool])
    calls = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "done"}]
    grace = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=[tool])
    messages.append({"role": "assistant", "content": "ok"})
    answered = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=[tool])
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    spans = {attributes(s.attributes)["sessionwarden.call.id"]: s for _, s in receiver.spans}
    assert len(spans) == 3
    names = [e.name for e in spans[grace.headers["x-sessionwarden-call-id"]].events]
    assert names == ["sessionwarden.grace_call"]
    span = spans[answered.headers["x-sessionwarden-call-id"]]
    [event] = span.events
    assert event.name == "sessionwarden.answered"
    assert attributes(event.attributes)["sessionwarden.reason"] == "iteration_budget"
    assert attributes(span.attributes)["sessionwarden.outcome"] == "answered"


def test_a_spilled_tool_result_is_a_span_event_written_or_cut_inline(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    from tests.cmd.test_context_e2e import history, lines, turn

    big = lines(1500)  # 150,000 characters: over gpt-test's result limit
    messages = history(turn([("call_1", "terminal", "ok"), ("call_2", "terminal", big)]))
    endpoint = config(f"http://127.0.0.1:{receiver.port}")
    spilled: dict[str, Any] = {}
    for where in ("written", "blocked"):
        (tmp_path / where).mkdir()
        if where == "blocked":  # a file where the spill directory should be
            (tmp_path / where / "spill").write_text("not a directory")
        daemon = start_made(made, tmp_path / where, fake, endpoint)
        with daemon.openai(session=f"traced-spill-{where}") as client:
            answer = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=messages)  # type: ignore[arg-type]
        spilled[answer.headers["x-sessionwarden-call-id"]] = where
        assert daemon.rt is not None and daemon.rt.tracing is not None
        assert daemon.rt.tracing.flush()
    spans = {attributes(s.attributes)["sessionwarden.call.id"]: s for _, s in receiver.spans}
    assert set(spans) == set(spilled)
    for call_id, where in spilled.items():
        [event] = spans[call_id].events
        assert event.name == "sessionwarden.spill"
        found = attributes(event.attributes)
        assert found["gen_ai.tool.name"] == "terminal"
        assert found["sessionwarden.spill.message"] == len(messages) - 1
        assert found["sessionwarden.spill.reason"] == "result"
        assert found["sessionwarden.spill.chars"] == found["sessionwarden.spill.bytes"] == 150_000
        assert 0 < found["sessionwarden.spill.preview_chars"] < 2_500
        if where == "written":
            assert found["sessionwarden.spill.truncated"] is False
            assert (tmp_path / where / "spill" / found["sessionwarden.spill.file"]).read_text() \
                == big
            assert "sessionwarden.spill.error" not in found
        else:
            assert found["sessionwarden.spill.truncated"] is True
            assert found["sessionwarden.spill.error"]
            assert "sessionwarden.spill.file" not in found
    # The tool call's id and the result's text are not exported.
    exported = repr([s for _, s in receiver.spans])
    assert "call_2" not in exported and big[:200] not in exported


def test_a_compaction_prepared_ahead_is_a_span_event_of_the_call_it_was_applied_to(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    from sessionwarden.events import CompressionPreparing, ContextCompressed

    from tests.cmd.test_prepared_ahead import MODEL as AHEAD
    from tests.cmd.test_prepared_ahead import SUMMARY, events, play_until

    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": 200}
    daemon = start_made(made, tmp_path, fake,
                        config(f"http://127.0.0.1:{receiver.port}") + AHEAD)
    play_until(daemon, "traced-ahead", ContextCompressed, settle=CompressionPreparing)
    [compressed] = [e for e in events(daemon, "traced-ahead")
                    if isinstance(e, ContextCompressed)]
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    spans = {attributes(s.attributes)["sessionwarden.call.id"]: s for _, s in receiver.spans}
    with_compaction = [call_id for call_id, s in spans.items()
                       if any(e.name == "sessionwarden.compaction" for e in s.events)]
    assert with_compaction == [compressed.call_id]
    [event] = [e for e in spans[compressed.call_id].events
               if e.name == "sessionwarden.compaction"]
    found = attributes(event.attributes)
    assert found["sessionwarden.compaction.trigger"] == "threshold"
    assert found["sessionwarden.compaction.prepared"] is True
    assert found["sessionwarden.compaction.waited_ms"] == 0
    assert found["sessionwarden.compaction.summariser"] == "model"
    assert found["sessionwarden.compaction.tokens_before"] == compressed.tokens_before
    assert found["sessionwarden.compaction.tokens_after"] == compressed.tokens_after
    assert found["sessionwarden.compaction.tokens_saved"] \
        == compressed.tokens_before - compressed.tokens_after > 0
    assert found["sessionwarden.compaction.threshold"] == compressed.threshold
    assert found["sessionwarden.compaction.saved_usd_per_call"] \
        == compressed.saved_usd_per_call != ""
    assert found["sessionwarden.compaction.cache_write_usd"] == compressed.cache_write_usd
    # No summary text leaves the daemon.
    assert SUMMARY not in repr([s for _, s in receiver.spans])


def test_a_call_too_long_for_the_upstream_shows_its_failed_attempt_and_the_compaction(
    receiver: Receiver, made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    # Compression off: the history goes whole, the upstream finds it too long, and the
    # call is governed again (compressed) and resent once.
    daemon = start_made(made, tmp_path, fake, config(f"http://127.0.0.1:{receiver.port}")
                        + '[compression]\nenabled = false\n[[models]]\nname = "small"\n'
                          'provider = "fake"\ncontext_length = 16000\n')
    history: list[dict[str, str]] = []
    for turn in range(30):
        history.append({"role": "user", "content": f"question {turn}: " + "why? " * 240})
        history.append({"role": "assistant", "content": f"answer {turn}: " + "because. " * 130})
    history.append({"role": "user", "content": "and now, the last question?"})
    fake.state.by_model["small"] = {
        "max_prompt_chars": sum(len(m["content"]) for m in history) // 2}
    with daemon.openai(session="traced-too-long") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="small", messages=history)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert daemon.rt is not None and daemon.rt.tracing is not None
    assert daemon.rt.tracing.flush()
    [(_, span)] = receiver.spans
    assert [e.name for e in span.events] == ["sessionwarden.failover",
                                             "sessionwarden.compaction"]
    failed, compaction = (attributes(e.attributes) for e in span.events)
    assert (failed["http.response.status_code"], failed["error.type"]) == (
        400, "context_overflow")
    assert compaction["sessionwarden.compaction.trigger"] == "requested"
    assert compaction["sessionwarden.compaction.prepared"] is False
    assert compaction["sessionwarden.compaction.tokens_saved"] > 0
