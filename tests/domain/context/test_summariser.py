"""The model summariser's pure half: its prompt, the checking of its answer, its cooldowns."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.context.summariser import (
    ANSWER_MAX_BYTES,
    ARGUMENTS_MAX_CHARS,
    COOLDOWN_LADDER_S,
    FOCUS_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    MIDDLE_MAX_CHARS,
    MODEL_HEADER,
    PREVIOUS_MAX_CHARS,
    PROMPT_MAX_CHARS,
    SummariserHealth,
    accept_summary,
    answer_max_bytes,
    available,
    cooldown_seconds,
    lift_cooldown,
    record_failure,
    record_success,
    render_middle,
    summary_request,
)
from sessionwarden.domain.context.summary import HEADER, MIN_MAX_CHARS, SECTIONS

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def user(text: str) -> Message:
    return Message("user", (Text(text),))


def assistant(text: str = "", *calls: ToolCall) -> Message:
    parts: tuple[Text | ToolCall, ...] = ((Text(text),) if text else ()) + calls
    return Message("assistant", parts)


def tool(call_id: str, text: str, name: str | None = None) -> Message:
    return Message("tool", (ToolResult(call_id, (Text(text),), name),))


MIDDLE = [
    user("Fix the failing test in src/app.py; do not change the public API."),
    assistant("", ToolCall("c1", "read_file", '{"path": "src/app.py"}')),
    tool("c1", "def f():\n    return 1\n", "read_file"),
    Message("user", (Text("look at this"), Opaque("image_url", b'{"url": "x"}', 0))),
]

# ------------------------------------------------------------------------ the prompt


def test_a_first_summary_asks_for_every_section_of_the_builtin_template() -> None:
    system, prompt = summary_request(MIDDLE, None, "", 8_000)
    for _, heading in SECTIONS:
        assert f"## {heading}" in system
    assert "Create a structured checkpoint" in prompt
    assert "previous-summary" not in prompt
    assert "at most 8,000 characters" in prompt
    assert "FOCUS TOPIC" not in prompt


def test_the_middle_is_rendered_with_labels_calls_and_results() -> None:
    text = render_middle(MIDDLE)
    assert text.startswith("[USER]: Fix the failing test in src/app.py")
    assert '[ASSISTANT]: [Tool calls:\n  read_file({"path": "src/app.py"})\n]' in text
    assert "[TOOL RESULT c1 read_file]: def f():" in text
    assert "[USER]: look at this\n[image_url]" in text


def test_an_update_quotes_the_previous_summary_and_the_new_turns() -> None:
    _, prompt = summary_request(MIDDLE, HEADER + "\n\n## Goal\n- old goal", "", 8_000)
    assert "Update the previous summary" in prompt
    previous = prompt.index("<previous-summary>\n")
    turns = prompt.index("<new-turns>\n")
    assert previous < prompt.index("- old goal") < turns < prompt.index("[USER]: Fix")


def test_a_blank_previous_summary_is_a_first_summary() -> None:
    _, prompt = summary_request(MIDDLE, "  \n", "", 8_000)
    assert "Create a structured checkpoint" in prompt


def test_a_focus_topic_is_asked_for_flattened_and_bounded() -> None:
    _, prompt = summary_request(MIDDLE, None, "the  database\nmigration", 8_000)
    assert "FOCUS TOPIC: the database migration\n" in prompt
    _, long = summary_request(MIDDLE, None, "x" * 5_000, 8_000)
    assert "FOCUS TOPIC: " + "x" * FOCUS_MAX_CHARS + "\n" in long
    assert "x" * (FOCUS_MAX_CHARS + 1) not in long


def test_a_long_message_keeps_its_head_and_tail() -> None:
    text = "H" * 5_000 + "M" * 5_000 + "T" * 2_000
    rendered = render_middle([tool("c9", text)])
    label = "[TOOL RESULT c9]: "  # part of the message's text: within its 4,000 head
    assert rendered.startswith(label + "H" * (4_000 - len(label)) + "\n...[truncated]...\n")
    assert rendered.endswith("T" * 1_500)
    assert "M" not in rendered and len(rendered) <= MESSAGE_MAX_CHARS


def test_long_tool_arguments_are_cut() -> None:
    call = ToolCall("c1", "write_file", '{"content": "' + "a" * 3_000 + '"}')
    rendered = render_middle([assistant("", call)])
    assert '  write_file({"content": "' + "a" * (1_200 - 13) + "...)" in rendered
    assert len(rendered) < ARGUMENTS_MAX_CHARS + 100


def test_a_huge_middle_keeps_its_head_and_tail_within_the_cap() -> None:
    middle = [user(f"turn {i:05d} " + "w" * 990) for i in range(400)]  # ≈ 400 KB
    text = render_middle(middle)
    assert len(text) == MIDDLE_MAX_CHARS
    assert text.startswith("[USER]: turn 00000 ")
    assert text.endswith("w" * 50)
    assert "turn 00399" in text and "turn 00200" not in text
    omitted = int(text.split("omitted ")[1].split(" chars")[0].replace(",", ""))
    full = "\n\n".join(f"[USER]: turn {i:05d} " + "w" * 990 for i in range(400))
    marker_start = text.index("\n\n...[summary input truncated")
    marker_end = text.index("]...\n\n") + len("]...\n\n")
    assert omitted == len(full) - marker_start - (len(text) - marker_end)


def test_a_huge_previous_summary_is_bounded() -> None:
    _, prompt = summary_request([], "p" * 100_000, "", 8_000)
    quoted = prompt.split("<previous-summary>\n")[1].split("\n</previous-summary>")[0]
    assert len(quoted) == PREVIOUS_MAX_CHARS


_texts = st.one_of(st.text(max_size=40), st.integers(0, 12_000).map(lambda n: "z" * n))
_parts = st.one_of(
    _texts.map(Text),
    st.builds(ToolCall, st.text(max_size=8), st.text(max_size=8),
              st.integers(0, 4_000).map(lambda n: "{" + "a" * n + "}")),
    st.builds(ToolResult, st.text(max_size=8), st.lists(_texts.map(Text), max_size=3).map(tuple)),
    st.builds(Opaque, st.text(max_size=8), st.just(b"{}")),
)
_messages = st.builds(Message, st.sampled_from(["system", "user", "assistant", "tool", "other"]),
                      st.lists(_parts, max_size=4).map(tuple))


@settings(max_examples=60, deadline=None)
@given(middle=st.lists(_messages, max_size=40),
       previous=st.one_of(st.none(), _texts, st.integers(0, 90_000).map(lambda n: "q" * n)),
       focus=_texts, max_chars=st.integers(-10, 200_000))
def test_the_prompt_is_always_bounded(middle: list[Message], previous: str | None,
                                      focus: str, max_chars: int) -> None:
    system, prompt = summary_request(middle, previous, focus, max_chars)
    assert len(prompt) <= PROMPT_MAX_CHARS
    assert system == summary_request([], None, "", 0)[0]  # the rules never vary


@settings(max_examples=40, deadline=None)
@given(count=st.integers(0, 30), size=st.integers(0, 20_000))
def test_the_rendered_middle_never_exceeds_its_cap(count: int, size: int) -> None:
    text = render_middle([user("u" * size), tool("c", "r" * size)] * count)
    assert len(text) <= MIDDLE_MAX_CHARS


# ------------------------------------------------------------------------ the answer


def test_an_answer_gets_the_model_header() -> None:
    accepted = accept_summary("  ## Goal\n- fix it\n\n", 8_000)
    assert accepted == MODEL_HEADER + "\n## Goal\n- fix it"
    assert MODEL_HEADER != HEADER and MODEL_HEADER.startswith("[Context summary")


@pytest.mark.parametrize("text", ["", "   \n\t", "<think>only thoughts</think>\n",
                                  MODEL_HEADER + "\n  ", HEADER])
def test_an_empty_answer_is_unusable(text: str) -> None:
    assert accept_summary(text, 8_000) is None


def test_think_blocks_and_a_copied_header_are_removed() -> None:
    accepted = accept_summary("<think>plan\nmore</think>\n" + HEADER + "\n## Goal\n- g", 8_000)
    assert accepted == MODEL_HEADER + "\n## Goal\n- g"


def test_a_long_answer_is_cut_at_a_line_and_marked() -> None:
    text = "\n".join(f"- line {i:04d} " + "x" * 80 for i in range(500))
    accepted = accept_summary(text, 10_000)
    assert accepted is not None and len(accepted) <= 10_000
    assert accepted.endswith("x\n...[summary truncated]")
    assert accepted.startswith(MODEL_HEADER + "\n- line 0000 ")


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(), st.integers(0, 50_000).map(lambda n: "y" * n)),
       max_chars=st.integers(-5, 60_000))
def test_an_accepted_answer_is_bounded_and_headed(text: str, max_chars: int) -> None:
    accepted = accept_summary(text, max_chars)
    if accepted is None:
        return
    assert accepted.startswith(MODEL_HEADER + "\n")
    assert len(accepted) <= max(max_chars, MIN_MAX_CHARS)
    assert accepted.removeprefix(MODEL_HEADER + "\n").strip()


# ------------------------------------------------------------------------ cooldowns


def test_the_cooldown_ladder_follows_hermes() -> None:
    assert [cooldown_seconds(n) for n in range(6)] == [0.0, 60.0, 300.0, 900.0, 900.0, 900.0]
    assert COOLDOWN_LADDER_S == (60.0, 300.0, 900.0)


def test_a_failure_cools_the_summariser_down_until_its_end() -> None:
    health = record_failure(SummariserHealth(), NOW)
    assert health == SummariserHealth(1, NOW + timedelta(seconds=60))
    assert available(SummariserHealth(), NOW)
    assert not available(health, NOW + timedelta(seconds=59.9))
    assert available(health, NOW + timedelta(seconds=60))  # the end itself is free
    again = record_failure(health, NOW + timedelta(seconds=61))
    assert again == SummariserHealth(2, NOW + timedelta(seconds=361))


def test_a_success_resets_and_a_lift_keeps_the_count() -> None:
    health = record_failure(record_failure(SummariserHealth(), NOW), NOW)
    assert record_success(health) == SummariserHealth()
    lifted = lift_cooldown(health)
    assert lifted.failures == 2 and available(lifted, NOW)
    assert record_failure(lifted, NOW).cooldown_until == NOW + timedelta(seconds=900)


@given(failures=st.lists(st.integers(0, 10_000), max_size=20))
def test_cooldowns_never_shrink_while_failures_go_on(failures: list[int]) -> None:
    health, now, previous = SummariserHealth(), NOW, 0.0
    for gap in failures:
        now += timedelta(seconds=gap)
        health = record_failure(health, now)
        assert health.cooldown_until is not None
        length = (health.cooldown_until - now).total_seconds()
        assert previous <= length <= max(COOLDOWN_LADDER_S)
        assert not available(health, now)
        previous = length
    assert health.failures == len(failures)


def test_the_answer_read_is_bounded_by_the_summarys_size() -> None:
    # Issue 21, item 12: a few hundred KiB at most, whatever the summary's bound.
    assert answer_max_bytes(40_000) == (64 << 10) + 8 * 40_000
    assert answer_max_bytes(0) == answer_max_bytes(MIN_MAX_CHARS)
    assert answer_max_bytes(10**9) == ANSWER_MAX_BYTES == 512 << 10
    assert answer_max_bytes(2_000) > 4 * MIN_MAX_CHARS  # room for escapes, think blocks
