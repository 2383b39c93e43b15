"""The chat-completions adapter (upstream/chat_completions.py): requests, responses, streams."""

import json
from typing import Any

import pytest
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.chat_completions import ChatCompletions, ResponseFacts
from sessionwarden.upstream.errors import MalformedRequest

WIRE = ChatCompletions()


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "openai/gpt", **fields}).encode()


def test_a_request_becomes_fields_raw_messages_and_a_wire_neutral_shape() -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    raw = body(messages=messages, stream=True)
    conversation, shape = WIRE.read_request(raw)
    assert conversation.fields == {"model": "openai/gpt", "stream": True}
    assert [json.loads(item) for item in conversation.items] == messages
    # Each item is the exact bytes the client sent: governance hashes and forwards them.
    assert all(item in raw for item in conversation.items)
    assert (shape.model, shape.stream, shape.message_count, shape.problems) == (
        "openai/gpt", True, 2, ())


def test_items_are_read_one_at_a_time_and_written_back_as_they_were() -> None:
    items = WIRE.items
    user = json.dumps({"role": "user", "content": "hi"}, separators=(",", ":")).encode()
    message = items.read_item(user)
    assert not isinstance(message, str) and message.role == "user"
    assert items.write_item(message) == user
    assert items.is_system(b'{"role": "developer", "content": "x"}')
    assert not items.is_system(user) and not items.is_system(b"[1]")
    assert items.read_item(b'"oops"') == "each message must be an object with a string 'role'"
    assert items.read_item(b'{"content": "no role"}') == (
        "each message must be an object with a string 'role'")


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "malformed JSON body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": []}', "'model' must be a non-empty string"),
    (b'{"model": ""}', "'model' must be a non-empty string"),
    (b"[" * 5000 + b"]" * 5000, "must be a JSON object"),
    (b'{"model":"m","x":' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'{"model":"m","messages":[' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too deeply"),
])
def test_an_unreadable_body_is_refused_with_a_short_message(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedRequest, match=message) as info:
        WIRE.read_request(raw)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("messages", ["hi", None, {"role": "user"}])
def test_messages_that_are_not_a_list_are_reported_for_the_validation_stage(
    messages: object,
) -> None:
    fields = {} if messages is None else {"messages": messages}
    _, shape = WIRE.read_request(body(**fields))
    assert shape.problems == ("'messages' must be a list",)


def test_the_upstream_body_names_the_upstream_model_and_always_asks_for_stream_usage() -> None:
    client = {"model": "prov/model-x", "temperature": 0}
    fields, injected = WIRE.upstream_fields(client, "model-x", stream=False)
    assert json.loads(fields) == {"model": "model-x", "temperature": 0} and not injected

    fields, injected = WIRE.upstream_fields(client, "model-x", stream=True)
    assert json.loads(fields)["stream_options"] == {"include_usage": True} and injected
    asked = {**client, "stream_options": {"include_usage": True, "x": 1}}
    fields, injected = WIRE.upstream_fields(asked, "model-x", stream=True)
    assert json.loads(fields)["stream_options"] == {"include_usage": True, "x": 1}
    assert not injected
    assert client == {"model": "prov/model-x", "temperature": 0}  # never mutated

    items = [b'{"role":"user","content":"a"}', b'{"role":"assistant","content":"b"}']
    sent = WIRE.upstream_body(fields, items)
    assert json.loads(sent) == {**json.loads(fields), "messages": [json.loads(i) for i in items]}


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
    assert adapter_for("anthropic_messages").api_mode == "anthropic_messages"  # type: ignore[union-attr]
    assert adapter_for("codex_responses").api_mode == "codex_responses"  # type: ignore[union-attr]
    assert adapter_for("bedrock") is None
