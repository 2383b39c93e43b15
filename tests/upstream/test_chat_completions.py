"""The chat-completions adapter (upstream/chat_completions.py): requests, responses, streams."""

import json
from typing import Any

import pytest
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.chat_completions import ChatCompletions, ResponseFacts
from sessionwarden.upstream.errors import MalformedRequest

from tests.actors.actor_support import call_request

WIRE = ChatCompletions()


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "openai/gpt", **fields}).encode()


def test_a_request_becomes_a_payload_and_a_wire_neutral_shape() -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    payload, shape = WIRE.read_request(body(messages=messages, stream=True))
    assert payload["messages"] == messages
    assert (shape.model, shape.stream, shape.message_count, shape.problems) == (
        "openai/gpt", True, 2, ())
    assert shape.prompt_chars == len("be brief") + len("hello")


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "malformed JSON body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": []}', "'model' must be a non-empty string"),
    (b'{"model": ""}', "'model' must be a non-empty string"),
    (b"[" * 5000 + b"]" * 5000, "malformed JSON body"),
])
def test_an_unreadable_body_is_refused_with_a_short_message(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedRequest, match=message) as info:
        WIRE.read_request(raw)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(("messages", "problem"), [
    ("hi", "'messages' must be a list"),
    (None, "'messages' must be a list"),
    ([{"role": "user", "content": "x"}, "oops"], "messages[1] must be an object"),
    ([{"content": "no role"}], "messages[0] must be an object with a string 'role'"),
])
def test_faults_in_the_messages_are_reported_for_the_validation_stage(
    messages: object, problem: str
) -> None:
    fields = {} if messages is None else {"messages": messages}
    _, shape = WIRE.read_request(body(**fields))
    assert shape.problems and shape.problems[0].startswith(problem)


def test_the_upstream_body_names_the_upstream_model_and_always_asks_for_stream_usage() -> None:
    request = call_request("c1", "s1", stream=False)
    sent, injected = WIRE.upstream_body(request)
    assert json.loads(sent)["model"] == "model-x" and not injected
    assert "stream_options" not in json.loads(sent)

    streamed = call_request("c2", "s1", stream=True)
    sent, injected = WIRE.upstream_body(streamed)
    assert json.loads(sent)["stream_options"] == {"include_usage": True} and injected
    asked = streamed.__class__(**{**{f: getattr(streamed, f) for f in streamed.__struct_fields__},
                                  "body": {**streamed.body, "stream_options": {
                                      "include_usage": True, "x": 1}}})
    sent, injected = WIRE.upstream_body(asked)
    assert json.loads(sent)["stream_options"] == {"include_usage": True, "x": 1}
    assert not injected
    assert "stream_options" not in streamed.body  # the client's body is never mutated


def test_a_plain_response_gives_its_usage_and_output() -> None:
    response = {"choices": [{"message": {"role": "assistant", "content": "four",
                                         "tool_calls": [{"function": {"arguments": "{}"}}]}}],
                "usage": {"prompt_tokens": 3}}
    assert WIRE.read_response(json.dumps(response).encode()) == ResponseFacts(
        {"prompt_tokens": 3}, True, 6)
    assert WIRE.read_response(b"not json") == ResponseFacts(None, True, 0)


def chunk(content: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    data: dict[str, Any] = {"choices": [] if content is None else
                            [{"delta": {"content": content}}]}
    if usage is not None:
        data["usage"] = usage
    return b"data: " + json.dumps(data).encode() + b"\n\n"


@pytest.mark.parametrize("injected", [False, True])
def test_a_stream_is_relayed_with_done_held_back_and_injected_usage_hidden(
    injected: bool,
) -> None:
    stream = WIRE.stream(injected)
    usage = {"prompt_tokens": 5, "completion_tokens": 2}
    events = [chunk("ab"), chunk("cde"), chunk(None, usage), b"data: [DONE]\n\n"]
    blob = b"".join(events)
    out = b"".join(stream.feed(blob[i:i + 7]) for i in range(0, len(blob), 7))
    assert out == events[0] + events[1] + (b"" if injected else events[2])
    assert stream.done and stream.usage_block == usage and stream.output_chars == 5
    assert stream.rest() == b"data: [DONE]\n\n"


def test_a_stream_cut_off_is_not_done() -> None:
    stream = WIRE.stream(False)
    assert stream.feed(chunk("ab") + b"data: {\"cho") == chunk("ab")
    assert not stream.done and stream.rest() == b"data: {\"cho"


def test_adapters_by_api_mode() -> None:
    assert isinstance(adapter_for("chat_completions"), ChatCompletions)
    assert adapter_for("anthropic_messages") is None
