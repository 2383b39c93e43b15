"""The simulated provider (upstream/sim.py): OpenAI shapes, streams, tool turns, determinism.

Answers are validated with the official SDK's own types (``openai.types.chat``), and
streams are read with the daemon's own stream reader (:class:`ChatStream`), as the proxy
reads them. Structured answers are validated by pydantic models against whose JSON
schema they were asked for, as a client's SDK validates them.
"""

import asyncio
import json
import math
import time
from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel, Field
from sessionwarden.domain.context.summary import HEADER, summary_end
from sessionwarden.upstream.chat_completions import ChatStream
from sessionwarden.upstream.sim import SimResponse, estimate_prompt_tokens, simulate

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "parameters": {
        "type": "object", "required": ["path", "lines"],
        "properties": {"path": {"type": "string"}, "lines": {"type": "integer"},
                       "mode": {"type": "string", "enum": ["text", "bytes"]}}}}},
    {"type": "function", "function": {"name": "run_tests", "parameters": {
        "type": "object", "properties": {"verbose": {"type": "boolean"}}}}}]
USER = {"role": "user", "content": "Please read the project's README and summarise it."}


def ask(model: str = "chat", **fields: Any) -> SimResponse:
    body = {"model": model, "messages": [USER], **fields}
    return simulate("/chat/completions", json.dumps(body).encode())


def read(response: SimResponse) -> Any:
    return json.loads(asyncio.run(response.read()))


def frames(response: SimResponse) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [chunk async for chunk in response.content.iter_any()]
    return asyncio.run(collect())


def chunks(response: SimResponse) -> list[ChatCompletionChunk]:
    events = b"".join(frames(response)).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    return [ChatCompletionChunk.model_validate_json(e.removeprefix(b"data: "))
            for e in events[:-2]]


def test_a_plain_answer_is_a_valid_chat_completion_with_a_plausible_usage_block() -> None:
    response = ask()
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    answer = ChatCompletion.model_validate(read(response))
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert choice.message.content and "README" in choice.message.content
    assert answer.model == "chat" and answer.id.startswith("chatcmpl-")
    usage = answer.usage
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens == estimate_prompt_tokens({"messages": [USER]})
    assert usage.completion_tokens == len(choice.message.content.split())
    response.release()  # nothing to give back, and harmless


def test_the_prompt_estimate_grows_with_the_request() -> None:
    short = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}]})
    long = estimate_prompt_tokens({"messages": [{"role": "user", "content": "word " * 400}]})
    with_tools = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}],
                                         "tools": TOOLS})
    assert short < 10 and 490 < long < 520 and with_tools > short + 40


def test_every_answer_has_its_own_id_but_the_same_content() -> None:
    first, second = ask(), ask()
    one, two = read(first), read(second)
    assert one["choices"] == two["choices"]
    # ids differ, as two answers of a provider do: a framework that merges by id must not
    assert one["id"] != two["id"] and one["id"].startswith("chatcmpl-sim")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    streamed = chunks(ask(stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in streamed}) == 1 and streamed[0].id not in (one["id"], two["id"])


def test_the_same_request_gets_the_same_answer_streamed_or_not() -> None:
    first, second = read(ask()), read(ask())
    assert first["choices"] == second["choices"] and first["usage"] == second["usage"]
    other = read(simulate("/chat/completions", json.dumps(
        {"model": "chat", "messages": [{"role": "user", "content": "something else"}]}
    ).encode()))
    assert other["choices"] != first["choices"]
    streamed = chunks(ask(stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == first["choices"][0]["message"]["content"]
    assert streamed[-1].usage is not None
    assert streamed[-1].usage.model_dump() == ChatCompletion.model_validate(
        first).usage.model_dump()  # type: ignore[union-attr]


def test_a_stream_with_include_usage_ends_with_a_usage_chunk_as_openai_does() -> None:
    response = ask(stream=True, stream_options={"include_usage": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    parsed = chunks(response)
    assert len(parsed) > 3
    *body, last = parsed
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens
    assert all(c.usage is None and len(c.choices) == 1 for c in body)
    assert body[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in body][-2:] == [None, "stop"]
    # The daemon's own reader sees the usage and the text the proxy records.
    reader = ChatStream(injected=True)
    relayed = b"".join(reader.feed(f) for f in frames(ask(
        stream=True, stream_options={"include_usage": True})))
    assert reader.usage_block == last.usage.model_dump(exclude_none=True)
    assert b'"choices":[]' not in relayed and reader.held == b"data: [DONE]\n\n"
    assert reader.output_chars == sum(len(c.choices[0].delta.content or "") for c in body)


def test_a_stream_without_include_usage_carries_no_usage() -> None:
    parsed = chunks(ask(stream=True))
    assert parsed[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in parsed)
    assert b'"usage"' not in b"".join(frames(ask(stream=True)))


def test_the_agent_model_calls_a_tool_then_answers_after_its_result() -> None:
    first = ChatCompletion.model_validate(read(ask("agent", tools=TOOLS)))
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in {"read_file", "run_tests"}
    arguments = json.loads(call.function.arguments)
    if call.function.name == "read_file":
        assert set(arguments) == {"path", "lines"} and isinstance(arguments["lines"], int)
    assert first.usage is not None and first.usage.completion_tokens > 0

    history = [USER, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "# README\nhello"}]
    final = ChatCompletion.model_validate(read(simulate("/chat/completions", json.dumps(
        {"model": "agent", "messages": history, "tools": TOOLS}).encode())))
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    assert "1 tool result" in final.choices[0].message.content


def test_agent_n_plays_n_tool_turns_and_a_named_tool_choice_is_obeyed() -> None:
    history: list[dict[str, Any]] = [USER]
    reasons = []
    for _ in range(4):
        answer = read(simulate("/chat/completions", json.dumps({
            "model": "agent-3", "messages": history, "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "run_tests"}},
        }).encode()))
        message = answer["choices"][0]["message"]
        reasons.append(answer["choices"][0]["finish_reason"])
        history.append(message)
        for call in message.get("tool_calls") or []:
            assert call["function"]["name"] == "run_tests"
            history.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    assert reasons == ["tool_calls", "tool_calls", "tool_calls", "stop"]


@pytest.mark.parametrize(("model", "fields"), [
    ("chat", {"tools": TOOLS}),  # the chat model ignores tools
    ("agent", {}),  # no tools offered
    ("agent", {"tools": TOOLS, "tool_choice": "none"}),
])
def test_a_text_answer_when_no_tool_call_is_wanted(model: str, fields: dict[str, Any]) -> None:
    answer = ChatCompletion.model_validate(read(ask(model, **fields)))
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.content


def test_a_streamed_tool_call_assembles_into_valid_json_arguments() -> None:
    parsed = chunks(ask("agent", tools=TOOLS, stream=True,
                        stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in parsed if c.choices]
    calls = [t for d in deltas for t in d.tool_calls or []]
    assert calls[0].id and calls[0].function and calls[0].function.name
    arguments = "".join(t.function.arguments or "" for t in calls if t.function)
    assert isinstance(json.loads(arguments), dict)
    assert [c.choices[0].finish_reason for c in parsed if c.choices][-1] == "tool_calls"
    plain = read(ask("agent", tools=TOOLS))["choices"][0]["message"]["tool_calls"][0]
    assert arguments == plain["function"]["arguments"] and calls[0].id == plain["id"]


def test_max_tokens_cuts_the_answer() -> None:
    answer = read(ask(max_completion_tokens=3))
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 3
    assert len(answer["choices"][0]["message"]["content"].split()) == 3


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/chat/completions", b"{nope", 400),
    ("/chat/completions", b'{"model": "chat", "messages": "hi"}', 400),
    ("/embeddings", b'{"model": "chat", "messages": []}', 404),
    ("/chat/completions", b'{"model": "error-429", "messages": []}', 429),
    ("/chat/completions", b'{"model": "error-503", "messages": []}', 503),
])
def test_errors_have_openai_error_bodies(path: str, body: bytes, status: int) -> None:
    response = simulate(path, body)
    assert response.status == status
    error = read(response)["error"]
    assert error["message"] and error["type"]
    assert ("retry-after" in response.headers) == (status == 429)


def test_the_daemons_summary_is_no_request_and_its_turns_count() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c9", "content": "ok"}

    def finish(summary: dict[str, Any]) -> str:
        answer = read(simulate("/chat/completions", json.dumps({
            "model": "agent-3", "tools": TOOLS,
            "messages": [USER, summary, turn, result]}).encode()))
        return str(answer["choices"][0]["finish_reason"])

    covering = HEADER + "\n\n## Goal\n- summarise\n\n" + summary_end(2)
    # 2 turns in the summary + 1 after it = 3: done, whichever role the summary has.
    assert finish({"role": "user", "content": covering}) == "stop"
    assert finish({"role": "assistant", "content": covering}) == "stop"
    assert finish({"role": "user", "content": HEADER + "\n" + summary_end(1)}) == "tool_calls"
    # A request that quotes the mark elsewhere is still a request.
    assert finish({"role": "user", "content": "about " + HEADER}) == "tool_calls"


class Step(BaseModel):
    action: str
    minutes: Annotated[int, Field(ge=5, le=7)]


class Node(BaseModel):
    """A recursive model: the value must end."""

    name: str
    children: list["Node"]
    parent: "Node | None"


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Plan(BaseModel):
    """What structured-output clients ask for: nesting, bounds, formats, unions, tuples."""

    title: Annotated[str, Field(min_length=40, max_length=45)]
    steps: Annotated[list[Step], Field(min_length=3)]
    ratio: Annotated[float, Field(gt=0, lt=1)]
    priority: Literal["low", "high"]
    due: date | None
    at: datetime
    ref: UUID
    tree: Node
    pet: Cat | Dog = Field(discriminator="kind")
    pair: tuple[int, str]
    tags: dict[str, int]


def schema_format(model: type[BaseModel]) -> dict[str, Any]:
    """``response_format`` as the openai SDK sends it for ``model``."""
    return {"type": "json_schema", "json_schema": {
        "name": model.__name__, "schema": model.model_json_schema(), "strict": True}}


def test_a_json_schema_answer_is_valid_against_the_schema_streamed_or_not() -> None:
    answer = ChatCompletion.model_validate(read(ask(response_format=schema_format(Plan))))
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content
    plan = Plan.model_validate_json(choice.message.content)
    assert len(plan.steps) == 3 and all(5 <= s.minutes <= 7 for s in plan.steps)
    assert plan.tree.children == [] and plan.tree.parent is None  # the recursion ended
    # one completion token a four-character piece, and a stream's pieces are the JSON
    assert answer.usage is not None
    assert answer.usage.completion_tokens == math.ceil(len(choice.message.content) / 4)
    parsed = chunks(ask(response_format=schema_format(Plan), stream=True))
    pieces = [c.choices[0].delta.content for c in parsed if c.choices[0].delta.content]
    assert "".join(pieces) == choice.message.content and len(pieces) > 10
    # the same request, the same JSON; another request, other values
    assert read(ask(response_format=schema_format(Plan)))["choices"][0]["message"][
        "content"] == choice.message.content
    other = read(ask("priced", response_format=schema_format(Plan)))
    assert Plan.model_validate_json(other["choices"][0]["message"]["content"]) != plan


def test_a_json_object_answer_is_an_object_and_max_tokens_cuts_json_too() -> None:
    asked = {"role": "user", "content": "Reply in JSON."}
    body = {"model": "chat", "messages": [asked], "response_format": {"type": "json_object"}}
    content = read(simulate("/chat/completions", json.dumps(body).encode()))[
        "choices"][0]["message"]["content"]
    assert content.startswith("(sim)", len('{"answer":"'))
    assert isinstance(json.loads(content)["answer"], str)
    cut = read(simulate("/chat/completions", json.dumps({**body, "max_tokens": 3}).encode()))
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"] == content[:12]
    assert cut["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(("response_format", "says"), [
    ({"type": "json_object"}, "must contain the word 'json'"),  # as OpenAI checks it
    ({"type": "json_schema"}, "Missing required parameter: 'response_format.json_schema'"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": []}}, "expected an object"),
    ({"type": "yaml"}, "'text', 'json_object' or 'json_schema'"),
    ("json", "'text', 'json_object' or 'json_schema'"),
])
def test_a_malformed_response_format_is_a_400(response_format: object, says: str) -> None:
    response = ask(response_format=response_format)
    assert response.status == 400
    error = read(response)["error"]
    assert says in error["message"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "response_format")


def test_a_text_response_format_is_a_text_answer() -> None:
    content = read(ask(response_format={"type": "text"}))["choices"][0]["message"]["content"]
    assert content.startswith("(sim) You asked: ")


@pytest.mark.parametrize("schema", [
    {"type": "array", "minItems": 10**9, "items": {"type": "array", "minItems": 10**9}},
    {"type": "object", "required": ["me"], "properties": {"me": {"$ref": "#"}}},
    {"type": "string", "minLength": 10**9},
    {"type": "array", "minItems": 64, "items": {"type": "array", "minItems": 64, "items": {
        "type": "string", "minLength": 4_000}}},
    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
])
def test_a_hostile_schema_gets_a_bounded_answer_soon(schema: dict[str, Any]) -> None:
    began = time.process_time()
    response = ask(response_format={"type": "json_schema",
                                    "json_schema": {"name": "x", "schema": schema}})
    assert response.status == 200
    assert len(read(response)["choices"][0]["message"]["content"]) < 200_000
    assert time.process_time() - began < 5  # CPU time: not wall-clock speed


def test_the_priced_models_play_another_model() -> None:
    chat = ChatCompletion.model_validate(read(ask("priced")))
    assert chat.model == "priced" and chat.choices[0].message.content
    agent = ChatCompletion.model_validate(read(ask("priced-agent-2", tools=TOOLS)))
    assert agent.model == "priced-agent-2" and agent.choices[0].finish_reason == "tool_calls"
    assert ask("priced-error-429").status == 429
