"""The Anthropic Messages adapter (upstream/anthropic_messages.py): requests, answers, streams."""

import json
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.usage.canonical import normalise_usage
from sessionwarden.upstream.anthropic_items import AnthropicItems
from sessionwarden.upstream.anthropic_messages import AnthropicMessages, AnthropicStream
from sessionwarden.upstream.chat_completions import ResponseFacts
from sessionwarden.upstream.errors import EventTooLarge, MalformedRequest

WIRE = AnthropicMessages()


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1024, **fields}).encode()


CLAUDE_CODE_REQUEST = {
    "model": "claude-sonnet-4-5",
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "look first", "signature": "EqQB"},
            {"type": "tool_use", "id": "toolu_1", "name": "Read",
             "input": {"file_path": "/a.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)",
             "cache_control": {"type": "ephemeral"}}]},
    ],
    "system": [{"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "user_ab12_account_0000_session_4f1c2a9e-1b7d-4c1e-9d55-0e6f"},
    "max_tokens": 32000,
    "thinking": {"type": "enabled", "budget_tokens": 31999},
    "stream": True,
}


# ------------------------------------------------------------------ requests


def test_a_request_becomes_fields_raw_messages_and_a_wire_neutral_shape() -> None:
    raw = json.dumps(CLAUDE_CODE_REQUEST).encode()
    conversation, shape = WIRE.read_request(raw)
    assert conversation.fields == {k: v for k, v in CLAUDE_CODE_REQUEST.items()
                                   if k != "messages"}
    assert [json.loads(item) for item in conversation.items] == \
        CLAUDE_CODE_REQUEST["messages"]
    assert all(item in raw for item in conversation.items)  # the client's exact bytes
    assert isinstance(conversation.codec, AnthropicItems)
    assert (shape.model, shape.stream, shape.message_count, shape.problems,
            shape.native_compaction) == ("claude-sonnet-4-5", True, 3, (), False)
    roles = []
    for item in conversation.items:
        message = conversation.codec.read_item(item)
        assert not isinstance(message, str)
        roles.append(message.role)
    assert roles == ["user", "assistant", "tool"]


@pytest.mark.parametrize(("management", "asks"), [
    ({"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens",
                                                        "value": 100000}}]}, True),
    ({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "compact_20990101"}]}, True),
    ({"edits": [{"type": "clear_thinking_20251015"}]}, False),
    ({"edits": "compact"}, False),
    ({"edits": [{"type": 5}, "compact"]}, False),
    ("compact", False),
])
def test_a_request_asking_the_provider_to_compact_says_so(management: Any, asks: bool) -> None:
    _, shape = WIRE.read_request(body(messages=[], context_management=management))
    assert shape.native_compaction is asks


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "malformed JSON body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": []}', "'model' must be a non-empty string"),
    (b'{"model": ""}', "'model' must be a non-empty string"),
    (b'{"model": 5}', "'model' must be a non-empty string"),
    (b'{"model": "' + b"m" * 257 + b'"}', "at most 256 printable"),
    (b'{"model": "a\\nb"}', "at most 256 printable"),
    (b'{"model":"m","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
])
def test_an_unreadable_body_is_refused_with_a_short_message(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedRequest, match=message) as info:
        WIRE.read_request(raw)
    assert len(str(info.value)) < 300
    if "model" in message or "printable" in message:
        assert info.value.code == "invalid_model"


@pytest.mark.parametrize("messages", ["hi", None, {"role": "user"}])
def test_messages_that_are_not_a_list_are_reported(messages: object) -> None:
    fields = {} if messages is None else {"messages": messages}
    _, shape = WIRE.read_request(body(**fields))
    assert shape.problems == ("'messages' must be a list",)


@pytest.mark.parametrize(("value", "refused"), [
    (1024, False), (None, False), ("1024", True), (1024.0, True), (True, True), ([1], True),
])
def test_max_tokens_must_be_an_integer(value: object, refused: bool) -> None:
    _, shape = WIRE.read_request(body(messages=[], max_tokens=value))
    assert bool(shape.problems) is refused
    assert all("'max_tokens' must be an integer" in p for p in shape.problems)


# ------------------------------------------------------------------ what goes upstream


def test_the_upstream_body_names_the_upstream_model_and_injects_nothing() -> None:
    client = {"model": "anthropic/claude-sonnet-4-5", "max_tokens": 5, "stream": True}
    for stream in (False, True):
        fields, injected = WIRE.upstream_fields(client, "claude-sonnet-4-5", stream)
        assert json.loads(fields) == {**client, "model": "claude-sonnet-4-5"}
        assert injected is False
    assert client["model"] == "anthropic/claude-sonnet-4-5"  # never mutated
    sent = WIRE.upstream_body(b'{"model":"m","max_tokens":5}', [b'{"role":"user","content":"a"}'])
    assert json.loads(sent) == {"messages": [{"role": "user", "content": "a"}],
                                "model": "m", "max_tokens": 5}
    assert WIRE.auth_headers("sk-ant-1") == {"x-api-key": "sk-ant-1"}
    assert (WIRE.api_mode, WIRE.path, WIRE.items.items_key) == (
        "anthropic_messages", "/messages", "messages")


# ------------------------------------------------------------------ answers

USAGE = {"input_tokens": 12, "cache_creation_input_tokens": 100,
         "cache_read_input_tokens": 2000, "output_tokens": 40,
         "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 0}}


def test_a_plain_answer_gives_its_usage_and_output() -> None:
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Hello"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
        {"type": "redacted_thinking", "data": "xxxx"}], "usage": USAGE}
    facts = WIRE.read_response(json.dumps(answer).encode())
    assert facts == ResponseFacts(USAGE, True, 3 + 5 + len('{"a":1}'))
    assert normalise_usage(WIRE.api_mode, facts.usage_block).cache_read_tokens == 2000
    assert WIRE.read_response(b"not json") == ResponseFacts(has_output=True)


# ------------------------------------------------------------------ streams


def event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


START_USAGE = {"input_tokens": 25, "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 3000, "output_tokens": 1,
               "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                  "ephemeral_1h_input_tokens": 0}}
DELTA_USAGE = {"output_tokens": 15, "input_tokens": 25, "cache_read_input_tokens": 3000,
               "server_tool_use": {"web_search_requests": 1},
               "iterations": [{"type": "message", "input_tokens": 25, "output_tokens": 15}]}
BODY = [
    event("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant",
                                        "content": [], "model": "claude-sonnet-4-5",
                                        "usage": START_USAGE}}),
    event("content_block_start", {"index": 0, "content_block": {"type": "thinking",
                                                                "thinking": ""}}),
    b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
    event("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta",
                                                        "thinking": "Let me"}}),
    event("content_block_delta", {"index": 0, "delta": {"type": "signature_delta",
                                                        "signature": "EqQBCgIYAh"}}),
    event("content_block_stop", {"index": 0}),
    event("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
    event("content_block_delta", {"index": 1, "delta": {"type": "text_delta",
                                                        "text": "Hello!"}}),
    event("content_block_stop", {"index": 1}),
    event("content_block_start", {"index": 2, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
    event("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                        "partial_json": '{"a": '}}),
    event("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                        "partial_json": "1}"}}),
    event("content_block_stop", {"index": 2}),
    event("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                            "usage": DELTA_USAGE}),
]
STOP = event("message_stop", {})
STREAM = b"".join(BODY) + STOP


def test_a_stream_is_relayed_whole_but_its_stop_held_back() -> None:
    reader = WIRE.stream(False)
    relayed = reader.feed(STREAM)
    assert relayed == b"".join(BODY)
    assert reader.done and reader.held == STOP and reader.rest() == STOP
    assert reader.output_chars == len("Let me") + len("Hello!") + len('{"a": 1}')
    assert reader.usage_block == {**START_USAGE, **DELTA_USAGE}
    usage = normalise_usage(WIRE.api_mode, reader.usage_block)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (25, 3000, 15)


def test_the_start_s_usage_alone_is_not_the_stream_s() -> None:
    """Its output count is provisional: a block seen would end a drain (module doc)."""
    reader = AnthropicStream()
    reader.feed(b"".join(BODY[:-1]))
    assert reader.usage_block is None and not reader.done
    reader.feed(BODY[-1])
    assert reader.usage_block is not None
    later = event("message_delta", {"delta": {}, "usage": {"output_tokens": 20,
                                                           "input_tokens": None}})
    reader.feed(later)
    assert reader.usage_block == {**START_USAGE, **DELTA_USAGE, "output_tokens": 20}


def test_an_error_event_is_relayed_and_the_stream_is_not_done() -> None:
    error = event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
    reader = WIRE.stream(False)
    assert reader.feed(BODY[0] + error) == BODY[0] + error
    assert not reader.done and reader.held == b""
    assert WIRE.stream_error(error + BODY[0]) == json.dumps(
        {"type": "error", "error": {"type": "overloaded_error",
                                    "message": "Overloaded"}}).encode()
    assert WIRE.stream_error(b": comment\n\n" + error) is not None
    assert WIRE.stream_error(STREAM) is None
    assert WIRE.stream_error(b"") is None


def test_what_follows_the_stop_is_held_in_order_and_crlf_frames_too() -> None:
    reader = AnthropicStream()
    tail = b"event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n"
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert reader.feed(crlf + tail + b"data: {\"partial") == b"".join(BODY).replace(
        b"\n", b"\r\n")
    assert reader.rest() == STOP.replace(b"\n", b"\r\n") + tail + b"data: {\"partial"


def test_an_event_past_the_bound_is_refused() -> None:
    reader = WIRE.stream(False, max_event_bytes=64)
    with pytest.raises(EventTooLarge):
        reader.feed(b"data: " + b"x" * 100)


@settings(max_examples=80)
@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_chunking_relays_the_same_bytes_and_reads_the_same_facts(cuts: list[int]) -> None:
    reader = AnthropicStream()
    points = [0, *sorted(cuts), len(STREAM)]
    relayed = b"".join(reader.feed(STREAM[a:b]) for a, b in pairwise(points))
    assert relayed + reader.rest() == STREAM
    assert reader.done and reader.usage_block == {**START_USAGE, **DELTA_USAGE}
    assert reader.output_chars == 20


# ------------------------------------------------------------------ the door's side


@pytest.mark.parametrize(("metadata", "headers", "expected"), [
    ({"user_id": "user_3f2a_account_9c1e-77_session_0b6d1e2f-aaaa-bbbb"}, {},
     "0b6d1e2f-aaaa-bbbb"),
    ({"user_id": json.dumps({"device_id": "d1", "account_uuid": "a-1",
                             "session_id": "5e1a-77c2"})}, {}, "5e1a-77c2"),
    ({"user_id": "user_3f2a_session_x"}, {"x-claude-code-session-id": "from-header"},
     "from-header"),
    (None, {"x-claude-code-session-id": "h1"}, "h1"),
    ({"user_id": "user_3f2a_account_9c1e"}, {}, None),
    ({"user_id": "user_3f2a_session_"}, {}, None),
    ({"user_id": '{"session_id": 5}'}, {}, None),
    ({"user_id": "{not json"}, {}, None),
    ({"user_id": 7}, {}, None),
    ("user_x_session_y", {}, None),
    (None, {}, None),
])
def test_claude_code_names_its_session(metadata: Any, headers: dict[str, str],
                                       expected: str | None) -> None:
    fields = {"model": "m"} if metadata is None else {"model": "m", "metadata": metadata}
    assert WIRE.session_hint(fields, headers) == expected


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (402, "billing_error"),
    (403, "permission_error"), (404, "not_found_error"), (413, "request_too_large"),
    (429, "rate_limit_error"), (500, "api_error"), (502, "api_error"),
    (503, "overloaded_error"), (504, "timeout_error"), (529, "overloaded_error"),
    (415, "invalid_request_error"), (501, "api_error"),
])
def test_errors_take_anthropic_s_shape(status: int, kind: str) -> None:
    answer = json.loads(WIRE.error_body(status, "no", "server_error", "some_code"))
    assert answer == {"type": "error", "error": {"type": kind, "message": "no",
                                                 "code": "some_code"}}
    assert json.loads(WIRE.error_body(status, "no", "server_error", None)) == {
        "type": "error", "error": {"type": kind, "message": "no"}}


@pytest.mark.parametrize(("kind", "expected"), [
    ("rate_limit_error", "rate_limit_error"), ("server_error", "api_error"),
    ("upstream_error", "api_error"), ("invalid_request_error", "invalid_request_error"),
    ("auth_error", "authentication_error"), ("mystery", "api_error"),
])
def test_a_stream_ends_with_an_error_event(kind: str, expected: str) -> None:
    sent = WIRE.sse_error("cut", kind, "stream_truncated")
    assert sent.startswith(b"event: error\ndata: ") and sent.endswith(b"\n\n")
    assert json.loads(sent.split(b"data: ", 1)[1]) == {
        "type": "error", "error": {"type": expected, "message": "cut",
                                   "code": "stream_truncated"}}
    assert WIRE.stream_error(sent) is not None  # what a client reading it sees: an error


def test_anthropic_s_own_sdk_reads_our_errors_as_its_own() -> None:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    start = event("message_start", {"message": {
        "id": "m", "type": "message", "role": "assistant", "content": [], "model": "x",
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}})

    def answer(request: Any) -> Any:
        if json.loads(request.content).get("stream"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=start + WIRE.sse_error("cut", "upstream_error",
                                                                  "stream_truncated"))
        return httpx2.Response(429, headers={"content-type": "application/json"},
                               content=WIRE.error_body(429, "slow down", "rate_limit_error",
                                                       "keys_benched"))

    client = anthropic.Anthropic(api_key="k", max_retries=0, http_client=httpx2.Client(
        transport=httpx2.MockTransport(answer)))
    ask: dict[str, Any] = {"model": "x", "max_tokens": 5,
                           "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.RateLimitError, match="slow down"):
        client.messages.create(**ask)
    with pytest.raises(anthropic.APIStatusError, match="cut") as info, \
            client.messages.stream(**ask) as stream:
        for _ in stream:
            pass
    assert info.value.body["error"]["code"] == "stream_truncated"
