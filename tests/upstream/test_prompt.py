"""The daemon's own prompts: the request it sends, and how the answer is read."""

import json

import pytest
from sessionwarden.upstream.errors import MalformedResponse, UpstreamError
from sessionwarden.upstream.prompt import PATH, prompt_body, read_answer, supports


def test_a_prompt_is_a_plain_chat_completions_request() -> None:
    body = json.loads(prompt_body("gpt-x", "the rules", "the turns"))
    assert body == {"model": "gpt-x", "stream": False, "messages": [
        {"role": "system", "content": "the rules"}, {"role": "user", "content": "the turns"}]}
    assert PATH == "/chat/completions"


def test_a_cap_is_sent_only_when_positive() -> None:
    assert json.loads(prompt_body("m", "s", "p", 512))["max_tokens"] == 512
    assert "max_tokens" not in json.loads(prompt_body("m", "s", "p", 0))


def test_only_chat_completions_carries_prompts_today() -> None:
    assert supports("chat_completions")
    assert not supports("anthropic_messages") and not supports("codex_responses")


def test_the_answer_is_the_first_choice_and_its_usage() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 3}
    answer = {"choices": [{"message": {"role": "assistant", "content": "## Goal\n- g"}},
                          {"message": {"content": "second"}}], "usage": usage}
    assert read_answer(json.dumps(answer).encode()) == ("## Goal\n- g", usage)


def test_text_parts_are_joined_and_no_text_reads_as_empty() -> None:
    parts = {"choices": [{"message": {"content": [
        {"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]}}]}
    assert read_answer(json.dumps(parts).encode()) == ("ab", None)
    refusal = {"choices": [{"message": {"content": None, "refusal": "no"}}]}
    assert read_answer(json.dumps(refusal).encode()) == ("", None)


@pytest.mark.parametrize("body", [
    b"not json", b"[1, 2]", b"{}", b'{"choices": []}', b'{"choices": ["x"]}',
    b'{"choices": [{"message": "text"}]}', b"[" * 100_000,
])
def test_a_malformed_answer_raises_without_quoting_it(body: bytes) -> None:
    with pytest.raises(MalformedResponse) as caught:
        read_answer(body)
    assert isinstance(caught.value, UpstreamError)
    assert "choices" not in str(caught.value) and "json" not in str(caught.value)
