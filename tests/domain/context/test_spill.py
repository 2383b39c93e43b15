import hashlib
import posixpath
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import ToolsConfig
from sessionwarden.domain.context.spill import (
    MIN_RESULT_SIZE_CHARS,
    MIN_TURN_BUDGET_CHARS,
    PREVIEW_END,
    SPILL_SUFFIX,
    TRUNCATION_MARKER,
    Limits,
    oversized_limits,
    plan_turn,
    preview,
    resolve_limits,
    spill_bytes,
    spill_name,
    spill_note,
    spilled_text,
    truncated_text,
)

DIR = "/var/lib/sessionwarden/spill"
DEFAULT = resolve_limits(ToolsConfig(), None)

# ------------------------------------------------------------------ limits


def test_defaults_without_a_known_window() -> None:
    expected = Limits(result_size_chars=100_000, turn_budget_chars=200_000, preview_chars=1500)
    assert expected == DEFAULT
    assert resolve_limits(ToolsConfig(), 0) == DEFAULT


def test_read_file_is_pinned_even_over_an_override() -> None:
    limits = resolve_limits(ToolsConfig(overrides={"read_file": 10, "terminal": 50_000}), None)
    assert limits.threshold("read_file") is None
    assert limits.threshold("terminal") == 50_000
    assert limits.threshold("web_fetch") == 100_000


def test_a_small_window_scales_the_unset_limits_down() -> None:
    # 32K tokens = 128K chars: 15 % = 19,200, 30 % = 38,400.
    limits = resolve_limits(ToolsConfig(), 32_000)
    assert (limits.result_size_chars, limits.turn_budget_chars) == (19_200, 38_400)


def test_a_tiny_window_stops_at_the_floors() -> None:
    limits = resolve_limits(ToolsConfig(), 4_000)
    assert (limits.result_size_chars, limits.turn_budget_chars) == (
        MIN_RESULT_SIZE_CHARS,
        MIN_TURN_BUDGET_CHARS,
    )


def test_a_large_window_never_raises_the_defaults() -> None:
    limits = resolve_limits(ToolsConfig(result_size_chars=30_000), 1_000_000)
    assert (limits.result_size_chars, limits.turn_budget_chars) == (30_000, 200_000)


def test_written_limits_are_taken_as_given() -> None:
    tools = ToolsConfig(result_size_chars=90_000, turn_budget_chars=5_000, overrides={"t": 70_000})
    limits = resolve_limits(tools, 8_000)
    assert (limits.result_size_chars, limits.turn_budget_chars) == (90_000, 5_000)
    assert limits.threshold("t") == 70_000  # overrides are the user's own, never scaled
    only_turn = resolve_limits(ToolsConfig(turn_budget_chars=5_000), 8_000)
    assert only_turn.result_size_chars == MIN_RESULT_SIZE_CHARS
    assert only_turn.turn_budget_chars == 5_000


def test_a_written_limit_equal_to_the_default_is_still_the_users() -> None:
    # The bug: 100000 written was taken for unset and scaled to a 32K window (19,200).
    limits = resolve_limits(ToolsConfig(result_size_chars=100_000, turn_budget_chars=200_000),
                            32_000)
    assert (limits.result_size_chars, limits.turn_budget_chars) == (100_000, 200_000)


def test_only_written_limits_larger_than_a_window_are_warned_of() -> None:
    tools = ToolsConfig(result_size_chars=200_000, overrides={"terminal": 10_000})
    warnings = oversized_limits(tools, {"small": 32_000, "big": 1_000_000, "mid": 40_000})
    assert len(warnings) == 1
    assert "result_size_chars = 200,000" in warnings[0] and "mid, small" in warnings[0]
    assert oversized_limits(ToolsConfig(), {"tiny": 1_000}) == []  # nothing written


# ------------------------------------------------------------------ preview and stand-ins


def test_preview_cuts_after_the_last_newline_past_half() -> None:
    content = "a" * 60 + "\n" + "b" * 30 + "\n" + "c" * 100
    assert preview(content, 100) == content[:92]


def test_preview_cuts_hard_when_the_newline_is_too_early() -> None:
    content = "a" * 10 + "\n" + "b" * 200
    assert preview(content, 100) == content[:100]


def test_preview_of_short_content_is_all_of_it() -> None:
    assert preview("short\n", 100) == "short\n"


def test_spilled_text_names_the_file_and_sizes() -> None:
    content = "line\n" * 40_000  # 200,000 chars
    path = posixpath.join(DIR, spill_name(content))
    text = spilled_text(content, path, 1500)
    assert f"Full output: {path}\n" in text
    assert "200,000 characters, 195.3 KB" in text
    assert text.endswith(preview(content, 1500) + PREVIEW_END)
    assert text.startswith("[sessionwarden saved this tool result to a file")


def test_megabytes_are_named_so() -> None:
    assert "2.0 MB" in spill_note("/p", 2 * 1024 * 1024, 2 * 1024 * 1024, 10)


def test_truncated_text_carries_an_explicit_marker() -> None:
    content = "x" * 5000
    text = truncated_text(content, 1500)
    assert text.startswith("x" * 1500 + "\n" + TRUNCATION_MARKER)
    assert "the first 1,500 of 5,000 characters" in text


def test_spill_name_is_the_content_hash() -> None:
    name = spill_name("héllo")
    assert name == hashlib.sha256("héllo".encode()).hexdigest() + SPILL_SUFFIX


def test_lone_surrogates_are_written_as_replacement_characters() -> None:
    assert spill_bytes("a\ud800b") == "a\ufffdb".encode()
    assert spill_name("a\ud800b") == spill_name("a\ufffdb")


# ------------------------------------------------------------------ the turn plan


def test_over_threshold_result_is_spilled_and_read_file_never() -> None:
    big = "x" * 150_000
    plan = plan_turn([("web_fetch", big, False), ("read_file", big, False)], DEFAULT, DIR)
    assert [(s.index, s.reason) for s in plan.spills] == [(0, "threshold")]
    spill = plan.spills[0]
    assert spill.replacement == spilled_text(big, f"{DIR}/{spill_name(big)}", 1500)
    assert plan.chars_after == len(spill.replacement) + 150_000
    assert plan.chars_before == 300_000


def test_turn_budget_spills_the_largest_first_until_under() -> None:
    sizes = [60_000, 90_000, 80_000, 70_000]  # 300,000 chars, none over 100,000
    results = [("t", str(i) * n, False) for i, n in enumerate(sizes)]
    plan = plan_turn(results, DEFAULT, DIR)
    # Spilling 90K brings it to ~212K, then 80K to ~133K: under 200K.
    assert [(s.index, s.reason) for s in plan.spills] == [(1, "turn_budget"), (2, "turn_budget")]
    assert plan.chars_after <= 200_000


def test_already_spilled_results_count_but_are_skipped() -> None:
    limits = Limits(result_size_chars=100_000, turn_budget_chars=10_000, preview_chars=1500)
    results = [("t", "s" * 9_000, True), ("t", "a" * 3_000, False)]
    plan = plan_turn(results, limits, DIR)
    assert [s.index for s in plan.spills] == [1]


def test_a_small_override_bounds_the_preview_too() -> None:
    limits = resolve_limits(ToolsConfig(overrides={"terminal": 500}), None)
    plan = plan_turn([("terminal", "y" * 2_000, False)], limits, DIR)
    assert plan.spills[0].preview_chars == 500


def test_a_result_no_longer_than_its_stand_in_is_not_spilled_for_the_budget() -> None:
    limits = Limits(result_size_chars=100_000, turn_budget_chars=100, preview_chars=1500)
    plan = plan_turn([("t", "z" * 1_000, False), ("t", "w" * 1_600, False)], limits, DIR)
    assert plan.spills == ()
    assert plan.chars_after == plan.chars_before == 2_600


# ------------------------------------------------------------------ properties

_LINES = st.lists(st.text(alphabet="ab \n\u00e9\u4e2d", max_size=60), max_size=40).map("\n".join)
_TOOLS = st.sampled_from(["read_file", "terminal", "web_fetch", "search"])


@st.composite
def _turns(draw: st.DrawFn) -> tuple[list[tuple[str, str, bool]], Limits]:
    limits = Limits(
        result_size_chars=draw(st.integers(1, 3_000)),
        turn_budget_chars=draw(st.integers(1, 6_000)),
        preview_chars=draw(st.integers(1, 400)),
        overrides=draw(st.dictionaries(_TOOLS, st.integers(1, 3_000), max_size=2)),
    )
    results = draw(
        st.lists(
            st.tuples(
                _TOOLS,
                st.one_of(_LINES, st.integers(0, 4_000).map(lambda n: "q" * n)),
                st.booleans(),
            ),
            max_size=8,
        )
    )
    return results, limits


@settings(max_examples=150, deadline=None)
@given(_turns())
def test_plan_respects_the_budget_and_the_pins(
    turn: tuple[list[tuple[str, str, bool]], Limits],
) -> None:
    results, limits = turn
    plan = plan_turn(results, limits, DIR)
    spilled = {s.index: s for s in plan.spills}
    sizes = [
        len(spilled[i].replacement) if i in spilled else len(content)
        for i, (_, content, _) in enumerate(results)
    ]
    assert plan.chars_after == sum(sizes)
    assert plan.chars_before == sum(len(c) for _, c, _ in results)
    for index, (tool, content, already) in enumerate(results):
        if tool == "read_file" or already:
            assert index not in spilled
        threshold = limits.threshold(tool)
        if not already and threshold is not None and len(content) > threshold:
            assert spilled[index].reason == "threshold"
    if plan.chars_after > limits.turn_budget_chars:
        # Over budget only when nothing left could shrink.
        for index, (tool, content, already) in enumerate(results):
            if index in spilled or already or tool == "read_file":
                continue
            path = f"{DIR}/{spill_name(content)}"
            assert len(spilled_text(content, path, limits.preview_chars)) >= len(content)
    # Largest first: a budget spill is never smaller than a candidate left inline.
    budget_spills = [s for s in plan.spills if s.reason == "turn_budget"]
    if budget_spills:
        smallest = min(s.chars for s in budget_spills)
        for index, (tool, content, already) in enumerate(results):
            if index in spilled or already or tool == "read_file":
                continue
            if len(content) > limits.preview_chars:
                assert len(content) <= smallest


@settings(max_examples=100, deadline=None)
@given(_turns())
def test_a_resend_plans_byte_identically_and_a_replayed_plan_spills_nothing(
    turn: tuple[list[tuple[str, str, bool]], Limits],
) -> None:
    results, limits = turn
    plan = plan_turn(results, limits, DIR)
    assert plan_turn(list(results), limits, DIR) == plan
    spilled = {s.index: s.replacement for s in plan.spills}
    governed = [
        (tool, spilled.get(i, content), already or i in spilled)
        for i, (tool, content, already) in enumerate(results)
    ]
    again = plan_turn(governed, limits, DIR)
    assert again.spills == ()
    assert again.chars_after == plan.chars_after


@settings(max_examples=200, deadline=None)
@given(st.one_of(_LINES, st.text(max_size=300)), st.integers(1, 200))
def test_preview_is_a_bounded_prefix_cut_on_a_line_when_it_can(content: str, budget: int) -> None:
    head = preview(content, budget)
    assert content.startswith(head)
    assert len(head) <= budget
    if len(content) <= budget:
        assert head == content
    elif content.rfind("\n", 0, budget) > budget // 2:
        assert head.endswith("\n") and "\n" not in content[len(head) : budget]
    else:
        assert len(head) == budget
    path = f"{DIR}/{spill_name(content)}"
    text = spilled_text(content, path, budget)
    note = spill_note(path, len(content), len(spill_bytes(content)), len(head))
    assert text == note + head + PREVIEW_END
    assert len(text) <= budget + len(note) + len(PREVIEW_END)
    assert text == spilled_text(content, path, budget)  # deterministic
    assert truncated_text(content, budget).startswith(head + "\n" + TRUNCATION_MARKER)
    assert re.fullmatch(r"[0-9a-f]{64}\.txt", spill_name(content))


def test_the_smallest_threshold_counts_the_overrides() -> None:
    limits = Limits(result_size_chars=1_000, turn_budget_chars=9_000, preview_chars=100,
                    overrides={"a": 300, "b": 5_000})
    assert limits.smallest == 300
    assert Limits(result_size_chars=1_000, turn_budget_chars=9_000,
                  preview_chars=100).smallest == 1_000
    # at the smallest threshold nothing spills; one character over, the tool's own counts
    assert plan_turn([("a", "x" * 300, False)], limits, DIR).spills == ()
    assert [s.index for s in plan_turn([("b", "x" * 900, False), ("a", "x" * 301, False)],
                                       limits, DIR).spills] == [1]
