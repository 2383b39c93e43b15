"""``upstream/answers.py``: the daemon's own answers parse as real ones in the official SDKs."""

import json

import anthropic
import httpx
import httpx2
import openai
import pytest
from sessionwarden.upstream.answers import local_answer

TEXT = "[sessionwarden runtime notice] the turn's iteration budget is spent"


def transport(answer: bytes, content_type: bytes) -> httpx.MockTransport:
    """An upstream that answers every request with ``answer`` (the SDKs parse it)."""
    return httpx.MockTransport(lambda request: httpx.Response(
        200, content=answer, headers={"content-type": content_type.decode()}))


def openai_client(api_mode: str, stream: bool) -> openai.OpenAI:
    answer = local_answer(api_mode, "c1", "gpt-x", TEXT, created=1_700_000_000, stream=stream)
    return openai.OpenAI(base_url="http://sw.test/v1", api_key="t", max_retries=0,
                         http_client=httpx.Client(transport=transport(answer.body,
                                                                      answer.content_type)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_answer_is_a_stop_without_tool_calls(stream: bool) -> None:
    sdk = openai_client("chat_completions", stream)
    if stream:
        chunks = list(sdk.chat.completions.create(model="gpt-x", messages=[], stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT
        assert chunks[-1].choices[0].finish_reason == "stop"
    else:
        done = sdk.chat.completions.create(model="gpt-x", messages=[])
        assert done.choices[0].message.content == TEXT
        assert done.choices[0].finish_reason == "stop" and not done.choices[0].message.tool_calls
        assert done.usage is not None and done.usage.total_tokens == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_answer_completes(stream: bool) -> None:
    sdk = openai_client("codex_responses", stream)
    if stream:
        events = list(sdk.responses.create(model="gpt-x", input="x", stream=True))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        final = events[-1]
        assert final.type == "response.completed"
        assert final.response.output_text == TEXT
    else:
        done = sdk.responses.create(model="gpt-x", input="x")
        assert done.output_text == TEXT and done.status == "completed"
        assert done.usage is not None and done.usage.output_tokens == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_answer_ends_its_turn(stream: bool) -> None:
    answer = local_answer("anthropic_messages", "c1", "claude-x", TEXT, created=0,
                          stream=stream)
    # This anthropic release runs on httpx2, with the same transport API.
    upstream = httpx2.MockTransport(lambda request: httpx2.Response(
        200, content=answer.body, headers={"content-type": answer.content_type.decode()}))
    sdk = anthropic.Anthropic(base_url="http://sw.test", api_key="t", max_retries=0,
                              http_client=httpx2.Client(transport=upstream))
    if stream:
        with sdk.messages.stream(model="claude-x", max_tokens=10, messages=[]) as events:
            final = events.get_final_message()
    else:
        final = sdk.messages.create(model="claude-x", max_tokens=10, messages=[])
    assert final.stop_reason == "end_turn" and final.content[0].text == TEXT  # type: ignore[union-attr]
    assert final.usage.output_tokens == 0


def test_the_plain_answers_are_json() -> None:
    for mode in ("chat_completions", "anthropic_messages", "codex_responses"):
        answer = local_answer(mode, "c1", "m", TEXT, created=0, stream=False)
        assert answer.content_type == b"application/json" and json.loads(answer.body)
