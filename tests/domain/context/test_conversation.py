"""domain/context/conversation.py: the session a call without X-Session-Id belongs to."""

import msgspec
from sessionwarden.domain.context.conversation import DERIVED_PREFIX, derived_session_id
from sessionwarden.upstream.chat_completions import ChatCompletions

WIRE = ChatCompletions()


def session_of(*messages: dict[str, object]) -> str:
    conversation, _ = WIRE.read_request(msgspec.json.encode(
        {"model": "m", "messages": list(messages)}))
    return derived_session_id(conversation)


SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Fix the failing build."}


def test_one_agents_calls_share_a_session_whatever_follows() -> None:
    first = session_of(SYSTEM, TASK)
    later = session_of(SYSTEM, TASK, {"role": "assistant", "content": "Looking."},
                       {"role": "user", "content": "Also run the tests."})
    assert first == later and first.startswith(DERIVED_PREFIX)
    assert len(first) <= 128 and first.replace("-", "").isalnum()


def test_two_agents_get_two_sessions() -> None:
    assert session_of(SYSTEM, TASK) != session_of(SYSTEM, {"role": "user", "content": "Other"})
    other_prompt = {"role": "system", "content": "You are a reviewer."}
    assert session_of(SYSTEM, TASK) != session_of(other_prompt, TASK)
    # The items are framed: moving bytes between the system and the task changes the id.
    assert session_of({"role": "system", "content": "ab"}, {"role": "user", "content": "c"}) \
        != session_of({"role": "system", "content": "a"}, {"role": "user", "content": "bc"})


def test_a_conversation_without_a_system_message_is_known_by_its_first_item() -> None:
    assert session_of(TASK) == session_of(TASK, {"role": "assistant", "content": "ok"})
    assert session_of(TASK) != session_of(SYSTEM, TASK)
