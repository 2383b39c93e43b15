from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.context.spill import TRUNCATION_MARKER
from sessionwarden.domain.context.summary import SUMMARY_START
from sessionwarden.domain.runaway.turns import (
    NOTICE_MARKER,
    SPILL_NOTE,
    IterationKey,
    is_daemon_text,
    is_new_turn,
    is_real_user_message,
    is_resend,
    iteration_key,
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


def test_a_retry_is_a_resend_and_a_grown_history_is_not():
    history = [SYSTEM, user("task"), *tool_round(0)]
    first = iteration_key(history)
    assert first == IterationKey(turn_key(user("task")), 1, 2)
    assert is_resend(first, iteration_key(list(history)))
    grown = iteration_key([*history, *tool_round(1)])
    assert not is_resend(first, grown) and not is_new_turn(first, grown)
    assert not is_resend(None, first) and is_new_turn(None, first)


def test_a_new_user_message_starts_a_new_turn_even_with_the_same_words():
    history = [SYSTEM, user("continue"), *tool_round(0), Message("assistant", (Text("done"),))]
    before = iteration_key(history)
    after = iteration_key([*history, user("continue")])
    assert after.turn == before.turn and is_new_turn(before, after)
    assert is_new_turn(before, iteration_key([*history, user("next task")]))


def test_a_compacted_history_keeps_its_turn():
    history = [SYSTEM, user("old"), *tool_round(0), user("task"), *tool_round(1)]
    before = iteration_key(history)
    summary = Message("user", (Text(f"{SUMMARY_START} — earlier turns]"),))
    compacted = [SYSTEM, summary, Message("assistant", (Text("ok"),)), *history[4:],
                 *tool_round(2)]
    after = iteration_key(compacted)
    assert after.turn == before.turn and after.start < before.start
    assert not is_new_turn(before, after)


def test_without_a_user_message_the_history_is_one_turn():
    key = iteration_key([SYSTEM, *tool_round(0)])
    assert key == IterationKey("", -1, 3)
    assert not is_new_turn(key, iteration_key([SYSTEM, *tool_round(0), *tool_round(1)]))


@given(st.lists(st.integers(0, 3), max_size=12), st.integers(1, 4))
def test_appending_tool_rounds_keeps_the_turn_and_counts_items(layout, rounds):
    history: list[Message] = [SYSTEM]
    for kind in layout:
        history += [user(f"u{kind}")] if kind == 0 else tool_round(kind)
    before = iteration_key(history)
    grown = history + [m for i in range(rounds) for m in tool_round(100 + i)]
    after = iteration_key(grown)
    assert (after.turn, after.start) == (before.turn, before.start)
    assert after.items == before.items + 2 * rounds
    assert not is_new_turn(before, after) and not is_resend(before, after)
    assert is_resend(after, iteration_key(list(grown)))
