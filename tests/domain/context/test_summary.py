import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.context.summary import (
    GOAL_CHARS,
    HEADER,
    MAX_PENDING_ASKS,
    MIN_MAX_CHARS,
    SECTIONS,
    Summary,
    bound,
    builtin_summary,
    render,
)
from sessionwarden.upstream.chat_messages import to_neutral

BIG = 100_000


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def summarise(messages: list[Any], previous: Summary | None = None,
              max_chars: int = BIG) -> Summary:
    return builtin_summary(to_neutral(messages), previous, max_chars)


SESSION: list[Any] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in src/app.py. You must not change the "
                                "public API."},
    call("c1", "read_file", '{"path": "src/app.py", "offset": 10}'),
    result("c1", "def f():\n    return 1\n"),
    call("c2", "terminal", '{"command": "pytest tests/test_app.py"}'),
    result("c2", "Traceback (most recent call last):\nAssertionError\nexit code: 1"),
    {"role": "assistant", "content": "We will change f to return 2. Important: the value is "
                                     "pinned by tests/test_app.py."},
    {"role": "user", "content": "Also update README.md please"},
]

# ------------------------------------------------------------------------ sections


def test_goal_is_the_first_user_request() -> None:
    summary = summarise(SESSION)
    assert summary.goal == ("Fix the failing test in src/app.py. You must not change the "
                            "public API.",)


def test_goal_is_clipped_and_kept_from_the_previous_summary() -> None:
    long = summarise([{"role": "user", "content": "word " * 500}])
    assert len(long.goal) == 1 and len(long.goal[0]) == GOAL_CHARS
    assert long.goal[0].endswith("…")
    again = summarise([{"role": "user", "content": "Something else"}], previous=long)
    assert again.goal == long.goal


def test_no_user_turn_gives_no_goal() -> None:
    summary = summarise([{"role": "assistant", "content": "Hello."}])
    assert summary.goal == ()
    assert "## Goal" not in render(summary)


def test_pending_asks_are_the_user_requests_not_yet_answered() -> None:
    summary = summarise(SESSION)
    assert summary.pending_asks == ("Also update README.md please",)
    answered = summarise([*SESSION, {"role": "assistant", "content": "Done."}])
    assert answered.pending_asks == ()


def test_tool_calls_do_not_answer_an_ask() -> None:
    summary = summarise([{"role": "user", "content": "List the files"},
                         call("c1", "bash", '{"command": "ls"}'), result("c1", "a\nb")])
    assert summary.pending_asks == ("List the files",)


def test_only_the_newest_asks_are_kept() -> None:
    asks = [{"role": "user", "content": f"ask {n}"} for n in range(MAX_PENDING_ASKS + 3)]
    summary = summarise(asks)
    assert summary.pending_asks == tuple(f"ask {n}" for n in range(3, MAX_PENDING_ASKS + 3))


def test_completed_actions_are_one_line_per_tool_result() -> None:
    summary = summarise(SESSION)
    assert summary.completed_actions == (
        "[read_file] src/app.py from line 10 → 2 lines, 22 chars",
        "[terminal] $ pytest tests/test_app.py → exit 1, 3 lines of output",
    )


def test_a_result_without_its_call_uses_its_own_name() -> None:
    summary = summarise([{"role": "tool", "tool_call_id": "x", "name": "grep",
                          "content": "a.py:1: hit"}])
    assert summary.completed_actions == ("[grep] '?' in . → 1 lines",)


def test_a_call_without_result_is_active_state() -> None:
    summary = summarise([call("c9", "bash", '{"command": "make"}')])
    assert summary.active_state == ('Awaiting [bash] {"command": "make"}',)
    assert summary.completed_actions == ()


def test_active_state_holds_the_last_reply() -> None:
    summary = summarise([*SESSION, {"role": "assistant", "content": "Working on it."}])
    assert summary.active_state[-1] == "Last reply: Working on it."


def test_failures_are_blocked() -> None:
    summary = summarise([
        call("a", "bash", '{"command": "make"}'), result("a", "ok\nexit code: 0"),
        call("b", "bash", '{"command": "make lint"}'), result("b", "lint\nexit code: 2"),
        call("c", "read_file", '{"path": "x.py"}'), result("c", "Error: no such file"),
    ])
    assert summary.blocked == (
        "[bash] $ make lint → exit 2, 2 lines of output — exit code: 2",
        "[read_file] x.py → 1 lines, 19 chars — Error: no such file",
    )


def test_constraints_and_decisions_come_from_cue_sentences() -> None:
    summary = summarise([
        {"role": "user", "content": "Use tabs. Never push to main! Let's go with SQLite."},
        {"role": "assistant", "content": "I decided to keep the cache. It is fast. "
                                         "You must restart it after edits."},
    ])
    assert summary.constraints == ("Never push to main!",)
    assert summary.decisions == ("Let's go with SQLite.", "I decided to keep the cache.",
                                 "You must restart it after edits.")


def test_relevant_files_from_arguments_and_text_in_first_order() -> None:
    summary = summarise([
        {"role": "user", "content": "See docs/guide.md and https://example.org/a/b.html"},
        call("c1", "write_file", '{"file_path": "src/new.py", "content": "x"}'),
        result("c1", "Wrote src/other.py"),  # tool output is not read for paths
        call("c2", "read_many", '{"paths": ["a/b.rs", "src/new.py"]}'),
        result("c2", "…"),
        {"role": "assistant", "content": "Updated src/new.py and pyproject.toml. Check "
                                         "/etc/hosts and ./run.sh, and/or client/server."},
    ])
    assert summary.relevant_files == ("docs/guide.md", "src/new.py", "a/b.rs",
                                      "pyproject.toml", "/etc/hosts", "./run.sh")


def test_critical_context_from_system_text_and_cues() -> None:
    summary = summarise(SESSION)
    assert summary.critical_context == (
        "You are a coding agent.", "Important: the value is pinned by tests/test_app.py.")


def test_opaque_parts_are_ignored() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://x.org/secret/a.png"}}
    summary = summarise([{"role": "user", "content": [image, {"type": "text",
                                                              "text": "What is this?"}]}])
    assert summary == Summary(goal=("What is this?",), pending_asks=("What is this?",))


def test_render_is_stable_with_a_header_and_sections_in_order() -> None:
    text = render(summarise(SESSION))
    assert text.startswith(HEADER + "\n\n## Goal\n- Fix")
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == [heading for _, heading in SECTIONS]
    assert render(Summary()) == HEADER


# -------------------------------------------------------------------- iterative merge


def test_iterative_merge_keeps_the_previous_lines_and_appends() -> None:
    first = summarise(SESSION)
    second = summarise([
        {"role": "assistant", "content": "README.md updated."},
        call("c3", "terminal", '{"command": "pytest"}'), result("c3", "exit code: 0"),
    ], previous=first)
    assert second.goal == first.goal
    assert second.pending_asks == ()
    assert second.completed_actions == (*first.completed_actions,
                                        "Answered: Also update README.md please",
                                        "[terminal] $ pytest → exit 0, 1 lines of output")
    assert second.relevant_files == first.relevant_files  # README.md deduplicated
    assert second.blocked == first.blocked


def test_previous_asks_stay_pending_without_a_reply() -> None:
    first = summarise(SESSION)
    second = summarise([{"role": "user", "content": "And the changelog"}], previous=first)
    assert second.pending_asks == ("Also update README.md please", "And the changelog")


# ------------------------------------------------------------------------- bounding


def test_bound_cuts_the_oldest_lines_of_the_longest_section_first() -> None:
    summary = Summary(goal=("g",), pending_asks=("p",),
                      completed_actions=tuple(f"action {n} " + "x" * 100 for n in range(30)),
                      relevant_files=("a.py", "b.py"))
    cut = bound(summary, MIN_MAX_CHARS)
    assert len(render(cut)) <= MIN_MAX_CHARS
    assert cut.relevant_files == ("a.py", "b.py")
    assert cut.goal == ("g",) and cut.pending_asks == ("p",)
    assert cut.completed_actions == summary.completed_actions[-len(cut.completed_actions):]
    assert 0 < len(cut.completed_actions) < 30


def test_bound_returns_a_fitting_summary_unchanged() -> None:
    summary = summarise(SESSION)
    assert bound(summary, BIG) is summary


def test_a_small_max_chars_is_raised_to_the_minimum() -> None:
    summary = summarise([{"role": "user", "content": "q " * 1000}] * 10
                        + [call("c", "bash", '{"command": "ls"}')])
    assert len(render(bound(summary, 10))) <= MIN_MAX_CHARS
    assert summary.goal and summary.pending_asks


# ------------------------------------------------------------------------ properties

_words = st.sampled_from(["fix", "src/app.py", "must", "never", "we will", "error", "exit 3",
                          "Traceback", "README.md", "decided", ".", "!", "\n", "important",
                          "ok", "é", "", "don't", "https://a.b/c.py", "x" * 150])
_text = st.lists(_words, max_size=12).map(" ".join)
_args = st.one_of(
    st.just('{"path": "a/b.py"}'), st.just("not json"), st.just("[1, 2]"),
    st.just('{"paths": ["x.md", 3, null]}'), st.just('{"command": "make"}'), _text)
_ids = st.sampled_from(["", "c1", "c2", "c3"])
_opaque = st.builds(Opaque, st.sampled_from(["image_url", "field:reasoning"]),
                    st.binary(max_size=20), st.integers(0, 50))
_result_part = st.one_of(st.builds(Text, _text), _opaque)
_part = st.one_of(
    st.builds(Text, _text), _opaque,
    st.builds(ToolCall, _ids, st.sampled_from(["bash", "read_file", "grep", "", "odd"]),
              _args),
    st.builds(ToolResult, _ids, st.lists(_result_part, max_size=3).map(tuple),
              st.sampled_from([None, "bash", ""])),
)
_message = st.builds(Message, st.sampled_from(["system", "user", "assistant", "tool", "other"]),
                     st.lists(_part, max_size=4).map(tuple))
_history = st.lists(_message, max_size=25)
_max_chars = st.integers(0, 6000)


def _lines(summary: Summary) -> list[str]:
    return [line for field, _ in SECTIONS for line in getattr(summary, field)]


@settings(max_examples=80, deadline=None)
@given(_history, _max_chars)
def test_deterministic_and_bounded(history: list[Message], max_chars: int) -> None:
    summary = builtin_summary(history, None, max_chars)
    assert builtin_summary(list(history), None, max_chars) == summary
    assert len(render(summary)) <= max(max_chars, MIN_MAX_CHARS)
    assert all(line and "\n" not in line for line in _lines(summary))


@settings(max_examples=80, deadline=None)
@given(_history, _history, _max_chars)
def test_iterative_merge_keeps_what_fits(first: list[Message], second: list[Message],
                                         max_chars: int) -> None:
    previous = builtin_summary(first, None, BIG)
    merged = builtin_summary(second, previous, BIG)
    assert merged.goal == previous.goal or not previous.goal
    rendered = render(merged)
    for field, _ in SECTIONS:
        if field == "pending_asks":
            continue  # answered, or displaced by newer asks: checked below
        for line in getattr(previous, field):
            assert line in getattr(merged, field)
    for ask in previous.pending_asks:
        assert ask in rendered or len(merged.pending_asks) == MAX_PENDING_ASKS
    bounded = builtin_summary(second, previous, max_chars)
    assert bounded.goal == merged.goal
    assert len(render(bounded)) <= max(max_chars, MIN_MAX_CHARS)


@settings(max_examples=60, deadline=None)
@given(_history)
def test_summarising_a_summary_again_with_nothing_new_changes_nothing(
        history: list[Message]) -> None:
    summary = builtin_summary(history, None, BIG)
    assert builtin_summary([], summary, BIG) == summary


def test_a_hand_made_previous_is_flattened_and_blank_lines_dropped() -> None:
    previous = Summary(goal=("", "Ship\nit"), decisions=("keep\n  SQLite", "  "),
                       pending_asks=("why\tnot?",))
    summary = builtin_summary([], previous, BIG)
    assert summary == Summary(goal=("Ship it",), decisions=("keep SQLite",),
                              pending_asks=("why not?",))


def test_legacy_calls_without_ids_pair_in_order() -> None:
    summary = summarise([
        {"role": "assistant", "content": None,
         "function_call": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"role": "function", "name": "bash", "content": "a.py"},
    ])
    assert summary.completed_actions == ("[bash] $ ls → exit ?, 1 lines of output",)
    assert summary.active_state == ()


# ------------------------------------------------------------------------ long outputs


def blocked_by(output: str) -> tuple[str, ...]:
    return summarise([call("c1", "terminal", '{"command": "t"}'), result("c1", output)]).blocked


def test_the_failing_line_is_found_in_long_and_odd_outputs() -> None:
    ok = "all good here\n" * 5_000
    assert blocked_by(ok) == ()
    # the first failing line, whatever breaks the lines (str.splitlines' set)
    for brk in ("\n", "\r\n", "\r", "\x0b", "\x1c", "\u2028"):
        found = blocked_by(ok.replace("\n", brk) + "FATAL: disk full" + brk + "more" * 9)
        assert found and found[0].endswith(" — FATAL: disk full")
    # a line's first exit code decides: 0 then 3 on one line is not a failure
    assert blocked_by("exit 0 then exit 3\n" + ok) == ()
    assert blocked_by("step\nExit Code: 3 and exit 0\n")[0].endswith(
        " — Exit Code: 3 and exit 0")
    # words count only as words, in any case
    assert blocked_by("no errors, stderr empty, TRACEBACKs none\n" * 100) == ()
    assert blocked_by("x" * 200_000 + " TraceBack")[0].endswith("x…")


def test_a_json_envelope_result_is_one_line_with_its_outcome() -> None:
    output = json.dumps({"output": "line\n" * 2_000, "exit_code": 0, "error": None})
    summary = summarise([call("c1", "terminal", '{"command": "make"}'), result("c1", output)])
    assert summary.completed_actions == ("[terminal] $ make → exit 0, 2,000 lines of output",)
    assert summary.blocked == ()  # its exit code and its null error say it succeeded


def test_every_cue_is_found_whatever_its_case_and_spacing() -> None:
    cues = {
        "constraints": ["must", "mustn't", "don't", "do not", "never", "always", "only",
                        "should not", "shouldn't", "make sure", "avoid", "require",
                        "required"],
        "decisions": ["decided", "decide", "we will", "we'll", "let's", "go with",
                      "going with", "chose", "choose", "instead of", "plan is"],
        "critical_context": ["important", "remember", "note that", "critical", "warning"],
    }
    for field, words in cues.items():
        for word in words:
            for spelled in (word, word.upper(), word.replace(" ", " \t  ")):
                role = "assistant" if field == "decisions" else "user"
                text = f"Plain words first. Then {spelled} here."
                found = getattr(summarise([{"role": role, "content": text}]), field)
                assert found == (f"Then {' '.join(spelled.split())} here.",), (field, spelled)


def test_a_json_envelope_says_itself_whether_the_tool_failed() -> None:
    def blocked(content: str) -> tuple[str, ...]:
        calls = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "make"}'}}]}
        middle = to_neutral([calls, {"role": "tool", "tool_call_id": "t", "content": content}])
        return builtin_summary(middle, None, 8_000).blocked

    ok = json.dumps({"output": "built 3 targets\nall good", "exit_code": 0, "error": None})
    assert blocked(ok) == ()  # the key "error" of a result that succeeded is no failure
    failed = json.dumps({"output": "cc: fatal error", "exit_code": 2, "error": None})
    assert len(blocked(failed)) == 1 and "exit 2" in blocked(failed)[0]
    errored = json.dumps({"output": "", "error": "file not found: a.py"})
    assert "file not found: a.py" in blocked(errored)[0]
    scanned = json.dumps({"output": "step 1\nTraceback (most recent call last):\n  x",
                          "exit_code": 0})
    assert "Traceback" in blocked(scanned)[0]  # the main text is still read
