"""The Responses adapter (upstream/responses.py): requests, responses, streams, the door."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder
from openai.types.responses import ResponseErrorEvent
from sessionwarden.upstream.adapter import Adapter, StreamReader
from sessionwarden.upstream.chat_completions import ResponseFacts
from sessionwarden.upstream.errors import MalformedRequest
from sessionwarden.upstream.responses import Responses, ResponsesStream, response_id

WIRE = Responses()
ADAPTER: Adapter = WIRE  # the protocol, checked by mypy
READER: StreamReader = WIRE.stream(False)


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "gpt-5-codex", **fields}).encode()


# ------------------------------------------------------------------ requests


def test_a_request_becomes_fields_raw_items_and_a_wire_neutral_shape() -> None:
    items = [{"role": "developer", "content": "be brief"},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "hello"}]},
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}]
    raw = body(instructions="You are Codex.", input=items, stream=True, store=False,
               include=["reasoning.encrypted_content"], prompt_cache_key="conv-1",
               previous_response_id=None, tools=[{"type": "function", "name": "shell"}])
    conversation, shape = WIRE.read_request(raw)
    assert conversation.fields == {
        "model": "gpt-5-codex", "instructions": "You are Codex.", "stream": True,
        "store": False, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "conv-1", "previous_response_id": None,
        "tools": [{"type": "function", "name": "shell"}]}
    assert [json.loads(item) for item in conversation.items] == items
    assert all(item in raw for item in conversation.items)  # the client's exact bytes
    assert conversation.codec is WIRE.items
    assert (shape.model, shape.stream, shape.message_count, shape.problems,
            shape.native_compaction) == ("gpt-5-codex", True, 3, (), False)


def test_a_string_input_is_one_user_message() -> None:
    conversation, shape = WIRE.read_request(body(input="what is 2+2?"))
    assert [json.loads(item) for item in conversation.items] == [
        {"role": "user", "content": "what is 2+2?"}]
    assert shape.message_count == 1 and shape.problems == ()
    sent = WIRE.upstream_body(WIRE.upstream_fields(conversation.fields, "gpt-5", False)[0],
                              conversation.items)
    assert json.loads(sent) == {"input": [{"role": "user", "content": "what is 2+2?"}],
                                "model": "gpt-5"}


@pytest.mark.parametrize("given", [None, 5, {"role": "user"}, True])
def test_an_input_neither_string_nor_list_is_reported(given: object) -> None:
    fields = {} if given is None else {"input": given}
    conversation, shape = WIRE.read_request(body(**fields))
    assert shape.problems == ("'input' must be a string or a list",)
    assert conversation.items == []


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "malformed JSON body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"input": []}', "'model' must be a non-empty string"),
    (b'{"model": "", "input": []}', "'model' must be a non-empty string"),
    (b'{"model": "a\\nb", "input": []}', "printable"),
    (b'{"model": "' + b"m" * 1000 + b'", "input": []}', "printable"),
    (b'{"model":"m","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
])
def test_an_unreadable_body_is_refused_with_a_short_message(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedRequest, match=message) as info:
        WIRE.read_request(raw)
    assert len(str(info.value)) < 300
    if "model" in message or "printable" in message:
        assert info.value.code == "invalid_model"


@pytest.mark.parametrize("value", ["100", 100.0, True, [1]])
def test_max_output_tokens_must_be_an_integer(value: object) -> None:
    _, shape = WIRE.read_request(body(input=[], max_output_tokens=value))
    (problem,) = shape.problems
    assert problem.startswith("'max_output_tokens' must be an integer")
    _, fine = WIRE.read_request(body(input=[], max_output_tokens=100))
    assert fine.problems == ()


@pytest.mark.parametrize(("management", "asks"), [
    ([{"type": "compaction", "compact_threshold": 200000}], True),
    ({"type": "compact"}, True),
    ([{"type": "clear_tool_uses"}, {"type": "auto_compaction"}], True),
    ([{"type": "truncation"}], False),
    ("compaction", False),
    (None, False),
])
def test_a_request_asking_the_provider_to_compact(management: object, asks: bool) -> None:
    _, shape = WIRE.read_request(body(input=[], context_management=management))
    assert shape.native_compaction is asks


def test_the_upstream_body_names_the_upstream_model_and_injects_nothing() -> None:
    client = {"model": "openai/gpt-5", "store": False, "reasoning": {"effort": "high"}}
    for stream in (False, True):
        fields, injected = WIRE.upstream_fields(client, "gpt-5", stream)
        assert json.loads(fields) == {**client, "model": "gpt-5"} and not injected
    assert client["model"] == "openai/gpt-5"  # never mutated
    items = [b'{"role":"user","content":"a"}', b'{"type":"reasoning","id":"r"}']
    sent = WIRE.upstream_body(fields, items)
    assert sent.startswith(b'{"input":[' + b",".join(items) + b"],")
    assert json.loads(sent)["input"] == [json.loads(item) for item in items]
    assert WIRE.auth_headers("sk-x") == {"authorization": "Bearer sk-x"}
    assert (WIRE.api_mode, WIRE.path) == ("codex_responses", "/responses")


# ------------------------------------------------------------------ answers

RESPONSE = {
    "id": "resp_1", "object": "response", "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                        "text": "Thinking."}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "content": [
            {"type": "output_text", "text": "four", "annotations": []},
            {"type": "refusal", "refusal": "no"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a":1}'},
        {"type": "custom_tool_call", "call_id": "d", "name": "g", "input": "xyz"},
        {"type": "web_search_call", "id": "ws", "status": "completed"},
    ],
    "usage": {"input_tokens": 10, "output_tokens": 5,
              "input_tokens_details": {"cached_tokens": 0}},
}


def test_a_plain_response_gives_its_usage_output_and_id() -> None:
    raw = json.dumps(RESPONSE).encode()
    # the one web_search_call item is counted into the block, in Anthropic's shape
    reported: Any = RESPONSE["usage"]
    usage = {**reported, "server_tool_use": {"web_search_requests": 1}}
    assert WIRE.read_response(raw) == ResponseFacts(usage, True, 9 + 4 + 2 + 7 + 3, "resp_1")
    assert WIRE.read_response(b"not json") == ResponseFacts(None, True, 0)
    assert response_id(raw) == response_id(RESPONSE) == "resp_1"


@pytest.mark.parametrize(("fields", "found"), [
    ({"previous_response_id": "resp_1", "input": "next"}, "resp_1"),
    ({"previous_response_id": None}, None),
    ({"previous_response_id": ""}, None),
    ({"previous_response_id": 7}, None),
    ({"input": "whole history", "store": False}, None),
])
def test_a_request_continues_the_response_it_names(fields: dict[str, Any],
                                                    found: str | None) -> None:
    assert WIRE.continues(fields) == found


@pytest.mark.parametrize(("data", "found"), [
    ({"type": "response.created", "response": {"id": "resp_2", "object": "response"}},
     "resp_2"),
    ({"type": "response.completed", "response": {"id": "resp_3"}}, "resp_3"),
    ({"id": "resp_4", "output": []}, "resp_4"),
    ({"type": "response.output_item.added", "item": {"id": "msg_1"}}, None),
    ({"id": "chatcmpl-1", "object": "chat.completion"}, None),
    ({"error": {"message": "x"}}, None),
    ({"object": "response", "id": ""}, None),
    (b"not json", None),
    (None, None),
])
def test_response_ids(data: Any, found: str | None) -> None:
    assert response_id(data) == found


# ------------------------------------------------------------------ streams


def event(kind: str, named: bool = True, **data: Any) -> bytes:
    payload = json.dumps({"type": kind, **data}).encode()
    return (b"event: " + kind.encode() + b"\n" if named else b"") + b"data: " + payload + b"\n\n"


USAGE = {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}
STREAM = [
    event("response.created", response={"id": "resp_9", "object": "response",
                                        "status": "in_progress"}),
    event("response.output_item.added", item={"type": "reasoning", "id": "rs"}),
    event("response.reasoning_summary_text.delta", delta="Hmm."),
    event("response.output_text.delta", delta="ab"),
    event("response.output_text.delta", delta="cde"),
    event("response.function_call_arguments.delta", delta='{"x":1}'),
    event("response.output_text.done", text="abcde"),
    event("response.completed", response={"id": "resp_9", "usage": USAGE,
                                          "output": []}),
]


@settings(max_examples=60)
@given(st.lists(st.integers(1, 200), min_size=1, max_size=40), st.booleans())
def test_a_stream_is_relayed_with_its_end_held_back(sizes: list[int], named: bool) -> None:
    events = STREAM if named else [e.split(b"\n", 1)[1] for e in STREAM]  # data lines only
    blob = b"".join(events)
    stream = WIRE.stream(False)
    out, at = b"", 0
    for size in sizes * (len(blob) // sum(sizes) + 1):
        out += stream.feed(blob[at:at + size])
        at += size
        if at >= len(blob):
            break
    assert out == b"".join(events[:-1])
    assert stream.done and stream.usage_block == USAGE
    assert stream.output_chars == 4 + 2 + 3 + 7
    assert isinstance(stream, ResponsesStream) and stream.response_id == "resp_9"
    assert stream.rest() == events[-1]


@pytest.mark.parametrize("end", ["response.incomplete", "response.failed"])
def test_every_terminal_event_ends_the_stream_and_what_follows_is_held(end: str) -> None:
    stream = WIRE.stream(False)
    last = event(end, response={"id": "r", "usage": USAGE, "error": None})
    trailer = b"data: [DONE]\n\n"
    assert stream.feed(STREAM[3] + last + trailer) == STREAM[3]
    assert stream.done and stream.usage_block == USAGE and stream.held == last + trailer


def test_an_error_mid_stream_is_relayed_and_a_cut_stream_is_not_done() -> None:
    stream = WIRE.stream(False)
    error = event("error", code="server_error", message="boom", param=None,
                  sequence_number=3)
    assert stream.feed(STREAM[3] + error + b"data: {\"ty") == STREAM[3] + error
    assert not stream.done and stream.usage_block is None
    assert stream.rest() == b"data: {\"ty"
    odd = WIRE.stream(False)
    junk = b": keep-alive\n\n" + b"data: not json\n\n" + b"event: ping\n\n"
    assert odd.feed(junk) == junk and not odd.done


@pytest.mark.parametrize(("head", "error"), [
    (event("error", code="rate_limit_exceeded", message="slow down"), True),
    (b": comment\n\n" + event("response.failed", response={"error": {"code": "x"}}), True),
    (b'data: {"error": {"message": "bad key"}}\n\n', True),
    (STREAM[0], False),
    (b"data: not json\n\n", False),
    (b"event: ping\n\n", False),
])
def test_a_stream_that_begins_with_an_error(head: bytes, error: bool) -> None:
    found = WIRE.stream_error(head)
    if error:
        assert found is not None and json.loads(found)
    else:
        assert found is None


# ------------------------------------------------------------------ the door


def test_the_session_codex_names() -> None:
    assert WIRE.session_hint({}, {"session_id": "s-1", "conversation_id": "c-1"}) == "s-1"
    assert WIRE.session_hint({"prompt_cache_key": "k"}, {"conversation_id": "c-1"}) == "c-1"
    assert WIRE.session_hint({"prompt_cache_key": "k"}, {"session_id": ""}) == "k"
    assert WIRE.session_hint({"prompt_cache_key": 5}, {}) is None
    assert WIRE.session_hint({}, {"x-other": "y"}) is None


def test_errors_in_openais_shape() -> None:
    assert json.loads(WIRE.error_body(429, "slow down", "rate_limit_error", "rate_limited")) == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None,
                  "code": "rate_limited"}}
    assert json.loads(WIRE.error_body(500, "x", "server_error", None))["error"]["code"] is None


def test_a_stream_error_is_what_the_openai_sdk_reads_as_an_error_event() -> None:
    raw = WIRE.sse_error("the budget is spent", "budget_error", "budget_exceeded")
    (sse,) = list(SSEDecoder().iter_bytes(iter([raw])))
    assert sse.event == "error"
    parsed = ResponseErrorEvent.model_validate(sse.json())
    assert (parsed.type, parsed.code, parsed.message, parsed.param) == (
        "error", "budget_exceeded", "the budget is spent", None)
    # the nested error is what the SDK's stream reader raises APIError on
    assert sse.json()["error"] == {"type": "budget_error", "code": "budget_exceeded",
                                   "message": "the budget is spent", "param": None}
    assert WIRE.stream_error(raw) == raw[len(b"event: error\ndata: "):-2]
