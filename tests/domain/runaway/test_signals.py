import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult
from sessionwarden.domain.runaway.signals import (
    Observation,
    failed,
    is_failure_tolerant,
    is_idempotent,
    is_poller,
    is_progress,
    is_terminal,
    is_web_search,
    observations,
    result_hash,
    signature,
)
from sessionwarden.domain.runaway.turns import NOTICE_MARKER


def result(text: str, error: bool = False, name: str | None = None) -> ToolResult:
    return ToolResult("c1", (Text(text),), name, error)


# --- signatures ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=4),
    max_leaves=12)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.randoms())
def test_signatures_do_not_depend_on_key_order_or_spacing(args: dict, rnd: random.Random):
    items = list(args.items())
    rnd.shuffle(items)
    shuffled = json.dumps(dict(items), indent=rnd.choice([None, 2]))
    assert signature("read_file", json.dumps(args)) == signature("read_file", shuffled)


def test_a_signature_is_a_hash_and_never_shows_the_arguments():
    sig = signature("terminal", '{"command": "cat /etc/secret-token-xyz"}')
    assert len(sig) == 64 and int(sig, 16) >= 0
    assert "secret" not in sig


def test_signatures_differ_by_name_and_arguments():
    base = signature("terminal", '{"command": "ls"}')
    assert base != signature("terminal", '{"command": "ls -la"}')
    assert base != signature("shell", '{"command": "ls"}')


def test_blank_arguments_are_an_empty_object_and_non_json_is_hashed_raw():
    assert signature("t", "") == signature("t", "{}") == signature("t", "  ")
    assert signature("t", "not json") == signature("t", "not json")
    assert signature("t", "not json") != signature("t", "not  json")


def test_non_ascii_arguments_are_canonical():
    assert signature("t", '{"q": "caf\\u00e9"}') == signature("t", '{"q": "café"}')


# --- failures ---------------------------------------------------------------------------

def test_the_error_flag_is_a_failure():
    assert failed(result("all good", error=True))
    assert not failed(result("all good"))


def test_a_result_without_an_error_attribute_is_read_by_its_content():
    class Legacy:
        call_id, name = "c1", None
        parts = (Text("fine"),)

    assert not failed(Legacy())  # type: ignore[arg-type]


def test_json_statuses_decide():
    assert failed(result('{"exit_code": 1, "output": ""}'))
    assert not failed(result('{"exit_code": 0, "output": "error: none"}'))
    assert failed(result('{"returncode": 2}'))
    assert failed(result('{"output": "x", "metadata": {"exit_code": 1, "duration_seconds": 1}}'))
    assert failed(result('{"error": "no such file"}'))
    assert not failed(result('{"error": "", "content": "ok"}'))
    assert not failed(result('{"error": null, "content": "ok"}'))
    assert failed(result('{"success": false, "message": "exceed the limit"}'))
    assert not failed(result('{"success": true}'))
    assert not failed(result('{"content": "an error happened in the story"}'))
    assert not failed(result('["error", "failed"]'))


def test_text_starting_with_error_or_traceback_is_a_failure():
    assert failed(result("Error: file not found"))
    assert failed(result("  Traceback (most recent call last):\n  File ..."))
    assert failed(result("Error reading file", name="read_file"))


def test_shell_exit_lines_decide():
    assert failed(result("Exit code: 1\nWall time: 0.2 seconds\nOutput:\n"))
    assert not failed(result("Exit code: 0\nWall time: 0.2 seconds\nOutput:\nerror count 3"))
    assert failed(result("Chunk ID: 1\nProcess exited with code 127\nOutput:\nnot found"))
    assert failed(result("Exit code 2"))


def test_the_fallback_reads_the_first_500_characters():
    assert failed(result("make: *** [all] compilation failed"), "terminal")
    assert failed(result("fatal ERROR in module"), "Bash")
    assert not failed(result("x" * 500 + " error"), "terminal")
    assert not failed(result("ran 5 tests, no errors"), "terminal")
    assert not failed(result("5 passed, 0 failed"), "bash")


def test_read_only_content_mentioning_errors_is_not_a_failure():
    code = "     1\tdef handle_error(e):\n     2\t    raise ValueError('failed')"
    assert not failed(result(code), "Read")
    assert not failed(result(code, name="read_file"))
    assert failed(result(code), "custom_tool")  # unknown tools get the fallback


def test_harness_refusals_are_not_failures():
    assert not failed(result('{"error": "repeated call blocked", "guardrail": {"code": "x"}}'))
    assert not failed(result("BLOCKED: this read was deduplicated, error"))
    assert not failed(result("[Tool loop hard stop: failed]"))
    assert not failed(result(f"{NOTICE_MARKER}: x] the call failed"))
    assert not failed(result('{"status": "guardrail_refusal", "error": "x"}'))


def test_a_spill_stand_in_is_classified_by_its_preview():
    note = ("[sessionwarden saved this tool result to a file: it was too large to send inline"
            " (9 characters, 9 B)]\nFull output: /s/a.txt\nRead that file.\n"
            "Preview (the first 9 characters):\n")
    assert failed(result(note + "Traceback\n[end of preview]"))
    assert not failed(result(note + "all fine\n[end of preview]"))


# --- result hashes ----------------------------------------------------------------------

def test_json_results_hash_canonically():
    assert result_hash(result('{"a": 1, "b": [1, 2]}')) == result_hash(result('{"b":[1,2],"a":1}'))
    assert result_hash(result('{"a": 1}')) != result_hash(result('{"a": 2}'))
    assert result_hash(result("plain")) != result_hash(result("plain "))


def test_execute_code_volatile_metadata_is_ignored_and_kept_elsewhere():
    one = result('{"output": "4", "duration_seconds": 0.1, "kernel": {"execution_count": 3}}')
    two = result('{"output": "4", "duration_seconds": 0.7, "kernel": {"execution_count": 9}}')
    assert result_hash(one, "execute_code") == result_hash(two, "execute_code")
    assert result_hash(one, "terminal") != result_hash(two, "terminal")
    other = result('{"output": "5", "duration_seconds": 0.1}')
    assert result_hash(one, "execute_code") != result_hash(other, "execute_code")


def test_the_error_flag_and_opaque_parts_count():
    assert result_hash(result("x")) != result_hash(result("x", error=True))
    image = ToolResult("c1", (Opaque("image", b'{"data":"AAA"}'),))
    other = ToolResult("c1", (Opaque("image", b'{"data":"AAB"}'),))
    assert result_hash(image) != result_hash(other)


# --- categories -------------------------------------------------------------------------

def test_categories_match_case_insensitively_across_agents():
    for name in ("read_file", "Read", "Glob", "Grep", "LS", "WebFetch", "WebSearch",
                 "mcp_filesystem_read_file", "mcp__filesystem__list_directory"):
        assert is_idempotent(name), name
    for name in ("Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "shell", "apply_patch",
                 "update_plan", "terminal", "write_file", "patch"):
        assert is_progress(name) and not is_idempotent(name), name
    for name in ("Bash", "shell", "terminal", "execute_code", "browser_navigate"):
        assert is_failure_tolerant(name), name
    assert not is_failure_tolerant("Edit") and not is_failure_tolerant("send_message")
    assert is_terminal("BASH") and is_terminal("shell") and not is_terminal("Read")
    assert is_web_search("web_search") and is_web_search("WebSearch")


def test_an_agents_own_tools_are_in_no_category():
    for name in ("get_weather", "lookup_order"):
        assert not (is_idempotent(name) or is_progress(name) or is_failure_tolerant(name)
                    or is_poller(name))


def test_pollers():
    assert is_poller("process_manage") and is_poller("BashOutput")
    assert is_poller("job_get_result") and is_poller("build_poll")
    assert not is_poller("poll_builder")


# --- observations -----------------------------------------------------------------------

def call(cid: str, name: str = "terminal", args: str = '{"command": "ls"}') -> ToolCall:
    return ToolCall(cid, name, args)


def test_calls_pair_with_their_results_in_result_order():
    history = [
        Message("user", (Text("go"),)),
        Message("assistant", (call("a", "read_file", '{"path": "x"}'), call("b"))),
        Message("tool", (ToolResult("b", (Text("Error: no"),)),)),
        Message("tool", (ToolResult("a", (Text("content"),)),)),
        Message("assistant", (call("c"),)),  # not answered yet
    ]
    found = observations(history)
    assert [(o.call_id, o.tool, o.failed, o.result_index) for o in found] == [
        ("b", "terminal", True, 2), ("a", "read_file", False, 3)]
    assert found[1].signature == signature("read_file", '{"path": "x"}')
    assert isinstance(found[0], Observation)


def test_anthropic_results_in_user_messages_pair_too():
    history = [
        Message("user", (Text("go"),)),
        Message("assistant", (Text("looking"), call("t1", "Bash"), call("t2", "Read"))),
        Message("user", (ToolResult("t1", (Text("ok"),), error=True),
                         ToolResult("t2", (Text("file"),)), Text("<reminder>"))),
    ]
    found = observations(history)
    assert [(o.call_id, o.failed) for o in found] == [("t1", True), ("t2", False)]


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    messages = [Message("user", (Text("task"),))]
    counter = 0
    for _ in range(draw(st.integers(0, 8))):
        width = draw(st.integers(1, 3))
        ids = [f"id{counter + i}" for i in range(width)]
        counter += width
        names = [draw(st.sampled_from(["terminal", "read_file", "Edit", "x"])) for _ in ids]
        messages.append(Message("assistant", tuple(
            call(cid, name, json.dumps({"n": draw(st.integers(0, 2))}))
            for cid, name in zip(ids, names, strict=True))))
        answered = ids[:draw(st.integers(0, width))] if draw(st.booleans()) else ids
        texts = st.sampled_from(["ok", "Error: x", "same", '{"exit_code": 1}'])
        if draw(st.booleans()):  # chat shape: one tool message per result
            messages += [Message("tool", (ToolResult(cid, (Text(draw(texts)),)),))
                         for cid in answered]
        elif answered:  # Anthropic shape: one user message with every result
            messages.append(Message("user", tuple(
                ToolResult(cid, (Text(draw(texts)),)) for cid in answered)))
        if draw(st.booleans()):
            messages.append(Message("user", (Text("more"),)))
    return messages


@settings(max_examples=200)
@given(histories(), st.data())
def test_observations_since_an_index_are_the_tail_of_all_of_them(history, data):
    since = data.draw(st.integers(0, len(history)))
    every = observations(history)
    assert observations(history, since) == [o for o in every if o.result_index >= since]
    assert [o.result_index for o in every] == sorted(o.result_index for o in every)
