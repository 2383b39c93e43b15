from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.context.spill import TRUNCATION_MARKER
from sessionwarden.domain.context.summary import SUMMARY_START
from sessionwarden.domain.runaway.turns import (
    NOTICE_MARKER,
    SPILL_NOTE,
    is_daemon_text,
    is_real_user_message,
    runtime_notice,
    turn_key,
    turn_start,
)


def user(*texts: str) -> Message:
    return Message("user", tuple(Text(t) for t in texts))


def tool_round(i: int) -> list[Message]:
    return [Message("assistant", (ToolCall(f"c{i}", "terminal", "{}"),)),
            Message("tool", (ToolResult(f"c{i}", (Text("ok"),)),))]


SYSTEM = Message("system", (Text("you are an agent"),))


def test_the_newest_real_user_message_starts_the_turn():
    history = [SYSTEM, user("first"), *tool_round(0), user("second"), *tool_round(1)]
    assert turn_start(history) == 4
    assert turn_start([SYSTEM]) is None
    assert turn_start([]) is None


def test_tool_results_in_user_messages_are_not_requests():
    results = Message("user", (ToolResult("c0", (Text("ok"),)),))
    with_text = Message("user", (ToolResult("c0", (Text("ok"),)), Text("<system-reminder>")))
    history = [user("task"), Message("assistant", (ToolCall("c0", "Bash", "{}"),)), results]
    assert turn_start(history) == 0
    assert turn_start([*history[:2], with_text]) == 0
    assert not is_real_user_message(results) and not is_real_user_message(with_text)


def test_daemon_items_and_blank_text_are_not_requests():
    for text in (runtime_notice("tool-loop warning", "x"), f"{SUMMARY_START} — built]",
                 f"{TRUNCATION_MARKER}: showing", f"{SPILL_NOTE} to a file]", "   "):
        assert not is_real_user_message(user(text)), text
    assert is_daemon_text(f"  {NOTICE_MARKER}: x]")
    assert not is_real_user_message(Message("user", (Opaque("image", b"{}"),)))
    assert not is_real_user_message(Message("assistant", (Text("hi"),)))
    history = [user("task"), *tool_round(0), user(runtime_notice("iteration budget", "x"))]
    assert turn_start(history) == 0


def test_a_user_message_with_a_notice_beside_its_text_is_still_real():
    assert is_real_user_message(user("do it", runtime_notice("x", "y")))


def test_the_turn_key_is_the_user_written_text():
    assert turn_key(user("fix it")) == turn_key(Message("user", (Text("fix it", b"{...}"),),
                                                        b"framing"))
    assert turn_key(user("fix it")) != turn_key(user("fix it!"))
    assert turn_key(user("ab", "c")) != turn_key(user("a", "bc"))
    assert turn_key(user("fix it", runtime_notice("x", "y"))) == turn_key(user("fix it"))
