"""The fake provider's Anthropic Messages and OpenAI Responses routes, driven by the real SDKs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.fake_agent import api_key
from tests.support.fake_provider import FakeProviderServer

BASH: Any = {"name": "Bash", "description": "Run a command",
        "input_schema": {"type": "object", "required": ["command"], "properties": {
            "command": {"type": "string"}, "description": {"type": "string"},
            "timeout": {"type": "number"}}}}
READ: Any = {"name": "Read", "input_schema": {"type": "object", "required": ["file_path"],
                                         "properties": {"file_path": {"type": "string"}}}}
SHELL: Any = {"type": "function", "name": "shell", "description": "Run a command", "strict": False,
         "parameters": {"type": "object", "required": ["command"], "properties": {
             "command": {"type": "array", "items": {"type": "string"}},
             "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}}}}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def claude(server: FakeProviderServer) -> Iterator[anthropic.Anthropic]:
    base = server.base_url.removesuffix("/v1")
    with anthropic.Anthropic(base_url=base, api_key="sk-ant-1", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def oai(server: FakeProviderServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="sk-oai-1", max_retries=0) as c:
        yield c


def test_messages_plain_text_usage_and_headers(server: FakeProviderServer,
                                               claude: anthropic.Anthropic) -> None:
    raw = claude.messages.with_raw_response.create(
        model="claude-x", max_tokens=64, system="Be terse.",
        messages=[{"role": "user", "content": "Hello plain messages"}])
    assert raw.headers["request-id"].startswith("req_")
    msg = raw.parse()
    assert msg.content[0].type == "text" and msg.content[0].text == "ok: Hello plain messages"
    assert msg.stop_reason == "end_turn" and msg.usage.output_tokens > 0
    assert msg.usage.cache_creation is not None and msg.usage.cache_read_input_tokens == 0
    rec = server.state.last
    assert rec.path == "/v1/messages" and api_key(rec.headers) == "sk-ant-1"
    assert json.loads(rec.raw)["system"] == "Be terse."


def test_messages_tool_rounds_then_text(claude: anthropic.Anthropic) -> None:
    prompt: list[Any] = [{"role": "user", "content": "run the tool twice"}]
    first = claude.messages.create(model="claude-agent-2", max_tokens=64, tools=[BASH, READ],
                                   messages=prompt)
    assert first.stop_reason == "tool_use"
    call = first.content[0]
    assert call.type == "tool_use" and call.name == "Bash"
    assert call.input == {"command": "echo fake-tool-ran", "description": "fake tool call"}
    history = list(prompt)
    for _ in range(2):
        reply = claude.messages.create(model="claude-agent-2", max_tokens=64,
                                       tools=[BASH, READ], messages=history)
        if reply.stop_reason != "tool_use":
            break
        block = reply.content[-1]
        assert block.type == "tool_use"
        history += [{"role": "assistant", "content": reply.to_param()["content"]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id,
                                                  "content": "fake-tool-ran"}]}]
    final = claude.messages.create(model="claude-agent-2", max_tokens=64, tools=[BASH, READ],
                                   messages=history)
    assert final.stop_reason == "end_turn"
    assert final.content[0].type == "text" and final.content[0].text == "ok: run the tool twice"
    assert final.usage.cache_read_input_tokens  # the earlier rounds' prefix
    chosen = claude.messages.create(model="claude-agent", max_tokens=64, tools=[BASH, READ],
                                    messages=prompt, extra_body={"fake": {"tool_name": "Read"}})
    assert chosen.content[0].type == "tool_use" and chosen.content[0].input == {
        "file_path": "fake"}


def test_messages_stream_thinking_tool_and_cache(claude: anthropic.Anthropic) -> None:
    system: Any = [{"type": "text", "text": "You are a careful agent. " * 20,
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    messages: Any = [{"role": "user", "content": [
        {"type": "text", "text": "stream a tool call", "cache_control": {"type": "ephemeral"}}]}]
    with claude.messages.stream(model="claude-agent-1", max_tokens=2048, system=system,
                                tools=[BASH], messages=messages,
                                thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    thinking, call = first.content
    assert thinking.type == "thinking" and thinking.signature and thinking.thinking
    assert call.type == "tool_use" and call.input["command"] == "echo fake-tool-ran"
    assert first.stop_reason == "tool_use"
    cache = first.usage.cache_creation
    assert cache is not None and cache.ephemeral_1h_input_tokens > 0
    assert cache.ephemeral_5m_input_tokens > 0
    assert first.usage.cache_creation_input_tokens == (
        cache.ephemeral_1h_input_tokens + cache.ephemeral_5m_input_tokens)
    messages += [{"role": "assistant", "content": first.to_param()["content"]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": "fake-tool-ran"}]}]
    with claude.messages.stream(model="claude-agent-1", max_tokens=2048, system=system,
                                tools=[BASH], messages=messages,
                                thinking={"type": "adaptive"}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "ok: stream a tool call" and final.stop_reason == "end_turn"
    assert final.content[0].type == "thinking"
    assert final.usage.cache_read_input_tokens and final.usage.cache_read_input_tokens >= (
        first.usage.cache_creation_input_tokens or 0)


def test_messages_compaction_block(claude: anthropic.Anthropic) -> None:
    body: Any = {"model": "claude-x", "max_tokens": 64,
                 "messages": [{"role": "user", "content": "compact me"}],
                 "extra_body": {"fake": {"compaction": True}}}
    plain = claude.beta.messages.create(**body)
    assert plain.content[0].type == "compaction" and plain.content[0].content
    with claude.beta.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in streamed.content] == ["compaction", "text"]
    assert streamed.content[0].type == "compaction"
    assert streamed.content[0].content == plain.content[0].content


def test_messages_errors(server: FakeProviderServer, claude: anthropic.Anthropic) -> None:
    msgs: Any = [{"role": "user", "content": "fail"}]
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="m", max_tokens=8, messages=msgs,
                               extra_headers={"x-fake-status": "429"})
    assert limited.value.response.headers["retry-after"] == "1"
    assert limited.value.response.headers["request-id"].startswith("req_")
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        claude.messages.create(model="m", max_tokens=8, messages=msgs,
                               extra_body={"fake": {"status": 529}})
    assert overloaded.value.status_code == 529
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"), \
            claude.messages.stream(model="m", max_tokens=8, messages=msgs,
                                   extra_body={"fake": {"stream_error_at": 0}}) as stream:
        list(stream)
    # fail_first counts by key: Anthropic's x-api-key header (the SDK sends a Bearer).
    body = {"model": "m", "max_tokens": 8, "messages": msgs,
            "fake": {"status": 401, "fail_first": 1}}
    hdrs = {"x-api-key": "sk-ant-flaky"}
    url = server.base_url + "/messages"
    refused = httpx.post(url, json=body, headers=hdrs)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    assert httpx.post(url, json=body, headers=hdrs).status_code == 200


def test_count_tokens(server: FakeProviderServer, claude: anthropic.Anthropic) -> None:
    counted = claude.messages.count_tokens(
        model="claude-x", tools=[BASH], messages=[{"role": "user", "content": "count me"}])
    assert counted.input_tokens > 10
    assert server.state.last.path == "/v1/messages/count_tokens"


def test_responses_plain_and_chain(server: FakeProviderServer, oai: openai.OpenAI) -> None:
    first = oai.responses.create(model="gpt-x", instructions="Be terse.", input="Hello resp")
    assert first.id.startswith("resp_") and first.status == "completed"
    assert first.output_text == "ok: Hello resp"
    assert first.usage is not None and first.usage.input_tokens > 0
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    second = oai.responses.create(model="gpt-x", input="And again",
                                  previous_response_id=first.id)
    assert second.output_text == "ok: And again"
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens
    assert oai.responses.retrieve(second.id).output_text == "ok: And again"
    with pytest.raises(openai.BadRequestError) as missing:
        oai.responses.create(model="gpt-x", input="x", previous_response_id="resp_nope")
    assert missing.value.code == "previous_response_not_found"
    unstored = oai.responses.create(model="gpt-x", input="forget me", store=False)
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="gpt-x", input="x", previous_response_id=unstored.id)


def test_responses_function_call_rounds(oai: openai.OpenAI) -> None:
    resp = oai.responses.create(model="gpt-agent-2", input="use the shell", tools=[SHELL])
    rounds = 0
    while resp.output[-1].type == "function_call":
        call = resp.output[-1]
        assert call.call_id.startswith("call_") and call.name == "shell"
        assert json.loads(call.arguments) == {"command": ["echo", "fake-tool-ran"]}
        rounds += 1
        resp = oai.responses.create(
            model="gpt-agent-2", previous_response_id=resp.id, tools=[SHELL],
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": "fake-tool-ran"}])
    assert rounds == 2 and resp.output_text == "ok: use the shell"
    assert resp.usage is not None and resp.usage.input_tokens_details.cached_tokens > 0


def test_responses_stream_reasoning_and_tool(server: FakeProviderServer,
                                             oai: openai.OpenAI) -> None:
    items: list[Any] = [{"type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": "stream it"}]}]
    common: Any = {"model": "gpt-agent-1", "tools": [SHELL], "store": False,
                   "reasoning": {"effort": "low", "summary": "auto"},
                   "include": ["reasoning.encrypted_content"]}
    with oai.responses.stream(input=items, **common) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert "response.reasoning_summary_text.delta" in kinds
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert reasoning.summary[0].text
    assert call.type == "function_call"
    assert json.loads(call.arguments)["command"] == ["echo", "fake-tool-ran"]
    # Codex's way: store false, the whole history sent again each round.
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "ran"})
    events = list(oai.responses.create(input=items, stream=True, **common))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == "ok: stream it"
    assert done.response.usage is not None
    assert done.response.usage.output_tokens_details.reasoning_tokens > 0
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "ok: stream it"


def test_responses_compact(server: FakeProviderServer, oai: openai.OpenAI) -> None:
    compacted = oai.responses.compact(model="gpt-x", input=[
        {"type": "message", "role": "user", "content": "first ask"},
        {"type": "message", "role": "assistant", "content": "an answer"},
        {"type": "message", "role": "user", "content": "second ask"}])
    assert compacted.object == "response.compaction"
    assert [o.type for o in compacted.output] == ["message", "message", "compaction"]
    last = compacted.output[-1]
    assert last.type == "compaction" and last.encrypted_content
    assert compacted.usage.input_tokens > 0
    assert server.state.last.path == "/v1/responses/compact"


def test_responses_errors(server: FakeProviderServer, oai: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError):
        oai.responses.create(model="m", input="x", extra_headers={"x-fake-status": "429"})
    with pytest.raises(openai.BadRequestError) as too_long:
        oai.responses.create(model="m", input="x" * 50,
                             extra_body={"fake": {"max_prompt_chars": 10}})
    assert too_long.value.code == "context_length_exceeded"
    events = list(oai.responses.create(model="m", input="x", stream=True,
                                       extra_body={"fake": {"stream_error_at": 2}}))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.failed"]
    body = {"model": "m", "input": "x", "stream": True,
            "fake": {"break_after_chunks": 2, "fail_first": 1}}
    hdrs = {"authorization": "Bearer sk-oai-broken"}
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(server.base_url + "/responses", json=body, headers=hdrs).read()
    whole = httpx.post(server.base_url + "/responses", json=body, headers=hdrs).text
    assert "response.completed" in whole
