"""Compression phase 1: dedupe, one-line summaries and argument truncation, without a model."""

import json
import re
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import (
    Message,
    Opaque,
    Text,
    ToolCall,
    ToolResult,
    content_hash,
    history_chars,
    tool_calls,
    tool_pairs,
)
from sessionwarden.domain.context.prune import (
    CUT_SLACK_CHARS,
    STAND_IN_MAX_CHARS,
    PruneEvent,
    PruneSettings,
    prune,
    truncate_arguments,
)
from sessionwarden.domain.context.prune_lines import (
    clip,
    count_lines,
    dedupe_note,
    exit_code,
    fold,
    main_text,
    summary,
)
from sessionwarden.upstream.chat_messages import from_neutral, to_neutral

BIG = "line of output\n" * 40  # 600 chars, over the default threshold


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def session(*items: dict[str, Any]) -> list[Message]:
    return to_neutral([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "fix the build"}, *items])


def assistant(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def tool(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def result_text(message: Message) -> str:
    (result,) = [p for p in message.parts if isinstance(p, ToolResult)]
    return "".join(p.text for p in result.parts if isinstance(p, Text))


# ------------------------------------------------------------------ dedupe


def test_older_duplicates_point_to_the_newest_copy() -> None:
    history = session(
        assistant(call("c1", "terminal", command="make")), tool("c1", BIG),
        assistant(call("c2", "terminal", command="make")), tool("c2", BIG),
        assistant(call("c3", "terminal", command="make")), tool("c3", BIG),
        {"role": "user", "content": "again?"})
    out = prune(history, protect_from=7)
    assert result_text(out.messages[3]) == "[same output as the later call c3]"
    assert result_text(out.messages[5]) == "[same output as the later call c3]"
    assert result_text(out.messages[7]) == BIG  # the newest copy, in the tail
    assert [(e.rule, e.index, e.call_id) for e in out.events] == [
        ("dedupe", 3, "c1"), ("dedupe", 5, "c2")]
    assert out.events[0] == PruneEvent("dedupe", 3, 0, "c1", len(BIG), 34)


def test_duplicates_inside_the_tail_are_left_alone() -> None:
    history = session(
        assistant(call("c1", "terminal", command="make")), tool("c1", BIG),
        assistant(call("c2", "terminal", command="make")), tool("c2", BIG))
    out = prune(history, protect_from=2)  # both copies in the tail: nothing changes
    assert out.messages == tuple(history) and out.events == ()
    both_old = prune(history, protect_from=6)
    assert result_text(both_old.messages[3]) == "[same output as the later call c2]"
    assert result_text(both_old.messages[5]).startswith("[terminal] $ make → exit ?")


def test_results_with_opaque_parts_and_short_ones_are_not_deduped() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    content = [{"type": "text", "text": BIG}, image]
    history = session(
        assistant(call("c1", "shot")), tool("c1", content),
        assistant(call("c2", "shot")), tool("c2", content),
        assistant(call("c3", "t")), tool("c3", "short"),
        assistant(call("c4", "t")), tool("c4", "short"))
    out = prune(history, protect_from=len(history))
    assert all(e.rule == "summary" for e in out.events)
    (first,) = [p for p in out.messages[3].parts if isinstance(p, ToolResult)]
    assert isinstance(first.parts[1], Opaque)  # the image is kept, in place
    assert result_text(out.messages[7]) == "short"


# ------------------------------------------------------------------ summaries


def test_summaries_per_tool_kind() -> None:
    assert summary("read_file", '{"path": "src/app.py", "offset": 40}', BIG) == (
        "[read_file] src/app.py from line 40 → 40 lines, 600 chars")
    assert summary("terminal", '{"command": "make test"}', BIG + '{"exit_code": 2}') == (
        "[terminal] $ make test → exit 2, 41 lines of output")
    assert summary("bash", '{"cmd": "ls"}', "a\nb") == "[bash] $ ls → exit ?, 2 lines of output"
    assert summary("write_file", '{"path": "n.md", "content": "a\\nb"}', "Wrote 2 lines") == (
        "[write_file] n.md, 2 lines written → Wrote 2 lines")
    assert summary("search_files", '{"pattern": "TODO", "path": "src"}', "x\ny\nz") == (
        "[search_files] 'TODO' in src → 3 lines")
    assert summary("patch", '{"path": "a.py"}', "\nApplied 1 hunk\n") == (
        "[patch] a.py → Applied 1 hunk")
    assert summary("web_search", '{"query": "msgspec"}', "r" * 3120) == (
        "[web_search] 'msgspec' → 3,120 chars")
    assert summary("web_extract", '{"urls": [{"url": "https://a"}, "https://b"]}', "x") == (
        "[web_extract] https://a (+1 more) → 1 chars")
    assert summary("lookup", '{"a": 1, "b": "two", "c": 3}', "x\ny") == (
        "[lookup] a=1, b=two → 2 lines, 3 chars")


def test_summaries_never_raise_and_stay_one_short_line() -> None:
    for arguments in ("", "not json", "[1, 2]", '{"path": null}', '{"command": {"x": 1}}',
                      json.dumps({"path": "p\n" * 500, "command": "c" * 900})):
        for name in ("read_file", "terminal", "write_file", "search_files", "patch",
                     "web_search", "fetch", "x" * 300, ""):
            line = summary(name, arguments, "z" * 5000)
            assert "\n" not in line and 0 < len(line) <= STAND_IN_MAX_CHARS
    assert len(dedupe_note("../" * 200)) <= STAND_IN_MAX_CHARS
    assert dedupe_note("") == "[same output as a later tool result]"
    assert clip("a \n b") == "a b"


def test_old_results_are_summarised_from_their_call() -> None:
    history = session(
        assistant(call("r1", "read_file", path="src/app.py"), call("t1", "terminal",
                                                                    command="pytest -q")),
        tool("t1", BIG + "exit code: 1"), tool("r1", BIG),
        {"role": "user", "content": "next"})
    out = prune(history, protect_from=5)
    assert result_text(out.messages[3]) == "[terminal] $ pytest -q → exit 1, 41 lines of output"
    assert result_text(out.messages[4]) == "[read_file] src/app.py → 40 lines, 600 chars"
    assert out.chars_after < out.chars_before
    # The wire keeps its layout: still a tool message answering its call.
    assert from_neutral(out.messages)[4] == {"role": "tool", "tool_call_id": "r1",
                                             "content": result_text(out.messages[4])}


def test_a_result_with_its_own_name_or_no_call_is_summarised_generically() -> None:
    history = to_neutral([{"role": "tool", "tool_call_id": "x", "name": "lookup",
                           "content": BIG},
                          {"role": "tool", "tool_call_id": "y", "content": BIG + "!"}])
    out = prune(history, protect_from=2)
    assert result_text(out.messages[0]) == "[lookup] → 40 lines, 600 chars"
    assert result_text(out.messages[1]) == "[tool] → 41 lines, 601 chars"


def test_a_summarised_result_keeps_its_failure() -> None:
    history = [Message("tool", (ToolResult("x", (Text(BIG),), "lookup", error=True),))]
    [out] = prune(history, protect_from=1).messages
    [result] = out.parts
    assert isinstance(result, ToolResult) and result.error
    assert result_text(out) == "[lookup] → 40 lines, 600 chars"


def test_several_results_in_one_message_find_their_own_calls() -> None:
    """The neutral model allows it (Anthropic's user message of tool_result blocks)."""
    calls = Message("assistant", (
        ToolCall("a", "read_file", '{"path": "one.py"}'),
        ToolCall("a", "terminal", '{"command": "ls"}'),  # a reused id: paired in order
        ToolCall("b", "search_files", '{"pattern": "x"}')))
    results = Message("user", (
        Text("here you go"),
        ToolResult("b", (Text(BIG + "1"),)), ToolResult("a", (Text(BIG + "2"),)),
        ToolResult("a", (Text(BIG + "3"),)), ToolResult("a", (Text(BIG + "4"),))))
    out = prune([calls, results], protect_from=2)
    parts = out.messages[1].parts
    assert parts[0] == Text("here you go")
    assert [p.parts for p in parts[1:] if isinstance(p, ToolResult)] == [
        (Text("[search_files] 'x' in . → 41 lines"),),
        (Text("[read_file] one.py → 41 lines, 601 chars"),),
        (Text("[terminal] $ ls → exit ?, 41 lines of output"),),
        (Text("[tool] → 41 lines, 601 chars"),)]  # an orphan: no call to name it
    assert [(e.part, e.call_id) for e in out.events] == [(1, "b"), (2, "a"), (3, "a"),
                                                         (4, "a")]


def test_threshold_is_never_below_a_stand_in() -> None:
    text = "y" * STAND_IN_MAX_CHARS
    history = session(assistant(call("c1", "t")), tool("c1", text))
    assert prune(history, 4, PruneSettings(result_chars=10)).events == ()
    longer = session(assistant(call("c1", "t")), tool("c1", text + "y"))
    assert len(prune(longer, 4, PruneSettings(result_chars=10)).events) == 1


# ------------------------------------------------------------------ arguments


def test_long_strings_in_arguments_are_cut_and_stay_json() -> None:
    arguments = json.dumps({"path": "a.py", "content": "é" * 2000, "n": [1, 2.5, None]})
    cut = truncate_arguments(arguments, PruneSettings())
    assert json.loads(cut) == {"path": "a.py", "content": "é" * 200 + "…[1800 chars cut]",
                               "n": [1, 2.5, None]}
    assert truncate_arguments(cut, PruneSettings()) == cut  # not cut twice


def test_invalid_json_arguments_become_a_valid_object() -> None:
    arguments = '{"content": "' + "x" * 2000  # a model's truncated output
    cut = truncate_arguments(arguments, PruneSettings())
    assert json.loads(cut) == {"unparsed_arguments": '{"content": "' + "x" * 187
                               + "…[1813 chars cut]"}


def test_lone_surrogates_never_raise() -> None:
    """A lenient JSON decoder (not msgspec) lets ``"\\ud800"`` through into a string."""
    arguments = '{"path": "' + "\ud800" * 600 + '"}'
    assert json.loads(truncate_arguments(arguments, PruneSettings())) == {
        "unparsed_arguments": '{"path": "' + "?" * 190 + "…[412 chars cut]"}
    assert summary("read_file", arguments, "x") == "[read_file] ? → 1 lines, 1 chars"


def test_arguments_that_would_not_shrink_are_left() -> None:
    many = json.dumps({f"k{i}": "v" for i in range(200)}, separators=(",", ":"))
    assert truncate_arguments(many, PruneSettings()) == many
    # Re-encoding alone is a rewrite when it saves characters (pretty-printed JSON).
    assert truncate_arguments(json.dumps(json.loads(many), indent=1), PruneSettings()) == many
    assert truncate_arguments('{"a": 1}', PruneSettings()) == '{"a": 1}'


def test_old_calls_are_truncated_keeping_id_name_and_framing() -> None:
    big = call("w1", "write_file", path="a.py", content="x" * 3000)
    big["extra"] = True  # framing the adapter records on the call
    history = session(assistant(big), tool("w1", "ok"), assistant(big | {"id": "w2"}),
                      tool("w2", "ok"))
    out = prune(history, protect_from=4)
    (old,) = tool_calls(out.messages[2])
    assert (old.id, old.name, old.wire) == ("w1", "write_file", tool_calls(history[2])[0].wire)
    assert len(old.arguments) < 300 and json.loads(old.arguments)["path"] == "a.py"
    assert out.messages[4] == history[4]
    wire = from_neutral(out.messages)[2]["tool_calls"][0]
    assert wire["extra"] is True and wire["function"]["arguments"] == old.arguments
    assert [(e.rule, e.index, e.call_id) for e in out.events] == [("arguments", 2, "w1")]


# ------------------------------------------------------------------ properties

texts = st.sampled_from(["", "ok", BIG, BIG + "tail", "z" * 250, "exit_code: 3\n" * 30])
names = st.sampled_from(["read_file", "terminal", "search_files", "lookup", ""])
argument_texts = st.one_of(
    st.builds(lambda k, v: json.dumps({k: v}), st.sampled_from(["path", "command", "q"]),
              st.sampled_from(["a.py", "x" * 900, "é\n" * 400])),
    st.sampled_from(["", "{}", "not json" * 100, '{"a": [' + '"' + "y" * 700 + '"]}']),
    st.text(max_size=40))


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Chat-completions histories: parallel calls, repeats, aborted calls, huge args."""
    items: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    ids = iter(f"call_{n}" for n in range(1000))
    for _ in range(draw(st.integers(0, 6))):
        items.append({"role": "user", "content": draw(texts)})
        calls = [{"id": next(ids), "type": "function",
                  "function": {"name": draw(names), "arguments": draw(argument_texts)}}
                 for _ in range(draw(st.integers(0, 3)))]
        if calls:
            items.append({"role": "assistant", "content": draw(st.sampled_from([None, ""])),
                          "tool_calls": calls})
            answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
            for answer in answered:
                content = draw(st.one_of(texts, st.just([
                    {"type": "text", "text": BIG},
                    {"type": "image_url", "image_url": {"url": "data:,x"}}])))
                items.append(tool(answer["id"], content))
        items.append({"role": "assistant", "content": draw(texts)})
    return to_neutral(items)


@settings(max_examples=100, deadline=None)
@given(histories(), st.data())
def test_phase_one_properties(history: list[Message], data: st.DataObject) -> None:
    protect_from = data.draw(st.integers(0, len(history) + 1))
    out = prune(history, protect_from)
    assert len(out.messages) == len(history)
    # The tail is untouched, byte for byte.
    for before, after in zip(history[protect_from:], out.messages[protect_from:],
                             strict=True):
        assert content_hash(before) == content_hash(after)
    # Roles, framing, pairing, ids and names and opaque parts are kept.
    assert [(m.role, m.wire) for m in out.messages] == [(m.role, m.wire) for m in history]
    assert tool_pairs(out.messages) == tool_pairs(history)
    for before, after in zip(history, out.messages, strict=True):
        calls_before, calls_after = tool_calls(before), tool_calls(after)
        assert [(c.id, c.name, c.wire) for c in calls_before] == [
            (c.id, c.name, c.wire) for c in calls_after]
        for old, new in zip(calls_before, calls_after, strict=True):
            if new.arguments != old.arguments:
                json.loads(new.arguments)  # every rewritten argument string is JSON
                assert len(new.arguments) < len(old.arguments)
        assert _opaques(before) == _opaques(after)
    # Characters never grow, and the counts are right.
    assert out.chars_before == history_chars(history)
    assert out.chars_after == history_chars(out.messages) <= out.chars_before
    assert out.chars_before - out.chars_after == sum(
        e.chars_before - e.chars_after for e in out.events)
    assert all(e.index < protect_from for e in out.events)
    # Deterministic and idempotent.
    assert prune(history, protect_from) == out
    again = prune(out.messages, protect_from)
    assert again.messages == out.messages and again.events == ()
    # Still valid chat-completions messages, read back to the same neutral history.
    wire = msgspec.json.decode(msgspec.json.encode(from_neutral(out.messages)))
    assert to_neutral(wire) == list(out.messages)


def _opaques(message: Message) -> list[Opaque]:
    found = [p for p in message.parts if isinstance(p, Opaque)]
    for part in message.parts:
        if isinstance(part, ToolResult):
            found.extend(p for p in part.parts if isinstance(p, Opaque))
    return found


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(inner, max_size=4),
                     st.dictionaries(st.text(max_size=5), inner, max_size=4))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(), _containers,
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(json_values, st.integers(0, 300), st.integers(0, 50))
def test_truncated_arguments_are_json_shorter_and_stable(value: Any, arguments_chars: int,
                                                         string_chars: int) -> None:
    limits = PruneSettings(arguments_chars=arguments_chars, string_chars=string_chars)
    for arguments in (json.dumps(value), json.dumps(value, indent=2), json.dumps(value)[:-1]):
        cut = truncate_arguments(arguments, limits)
        if cut != arguments:
            json.loads(cut)
            assert len(cut) < len(arguments)
        assert truncate_arguments(cut, limits) == cut
    assert len("…[999999999 chars cut]") <= CUT_SLACK_CHARS


def test_summaries_of_json_envelopes_count_the_lines_of_their_main_text() -> None:
    # Hermes-style tool results: the whole output inside one JSON object, on one line.
    read = json.dumps({"content": "     1|a\n     2|b\n     3|c\n", "total_lines": 3})
    assert summary("read_file", '{"path": "a.py"}', read) == (
        f"[read_file] a.py → 3 lines, {len(read)} chars")
    term = json.dumps({"output": "x\ny\n", "exit_code": 2, "error": None})
    assert summary("terminal", '{"command": "make"}', term) == (
        "[terminal] $ make → exit 2, 2 lines of output")
    both = json.dumps({"stdout": "1\n2\n3\n4", "content": "one line"})
    assert summary("lookup", "{}", both).endswith("→ 4 lines, " + f"{len(both)} chars")
    found = json.dumps({"total_count": 2, "matches": [{"path": "a.py"}, {"path": "b.py"}]})
    assert summary("search_files", '{"pattern": "x"}', found) == "[search_files] 'x' in . → 2 lines"
    edited = json.dumps({"output": "\n  Applied 1 hunk\nok"})
    assert summary("patch", '{"path": "a.py"}', edited) == "[patch] a.py → Applied 1 hunk"
    # Not an envelope: counted as text (a JSON list, an object without a text field,
    # broken JSON, a non-string main field).
    for text in ('[1,\n2]', '{"bytes_written": 5,\n"x": 1}', '{"output": "a\\nb",\n]',
                 '{"output": 3,\n"content": null}'):
        lines = text.count("\n") + 1
        assert summary("lookup", "{}", text).startswith(f"[lookup] → {lines} lines")


@settings(max_examples=100, deadline=None)
@given(histories(), st.data())
def test_a_given_pairing_prunes_as_the_one_computed(history: list[Message],
                                                    data: st.DataObject) -> None:
    protect_from = data.draw(st.integers(0, len(history) + 1))
    assert prune(history, protect_from, pairing=tool_pairs(history)) == prune(
        history, protect_from)


# Texts made of what the line helpers must get right: every line break str.splitlines
# knows, whitespace runs, "exit" in any case (and the letters IGNORECASE folds into
# ASCII: İ ı ſ K), codes, quotes and separators.
_PIECES = ["exit", "EXIT", "ExIt", "exİt", "exıt", "code", " code", "_code", "status",
           '"', ":", "=", " ", "   ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c",
           "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "0", "2", "-", "x", "é", "word" * 30]
_line_texts = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)
_EXIT_PATTERN = re.compile(r'"?exit[ _]?(?:code|status)?"?\s*[:=]?\s*(-?\d+)', re.IGNORECASE)


@settings(max_examples=1000, deadline=None)
@given(_line_texts, st.integers(1, 300))
def test_line_helpers_agree_with_their_plain_definitions(text: str, limit: int) -> None:
    assert count_lines(text) == len(text.splitlines())
    flat = re.sub(r"\s+", " ", text).strip()
    assert clip(text, limit) == (flat if len(flat) <= limit else flat[:limit - 1] + "…")
    found = _EXIT_PATTERN.search(text)
    assert exit_code(text) == (found.group(1) if found else "")
    folded = fold(text)
    assert len(folded) == len(text)
    for word in ("exit", "code", "status"):  # every case-insensitive match is found
        starts = {m.start() for m in re.finditer(word, text, re.IGNORECASE)}
        assert starts <= {i for i in range(len(text)) if folded.startswith(word, i)}


def test_clip_of_a_long_text_flattens_only_what_it_keeps() -> None:
    text = " \n " + "word \t\n " * 50_000 + "end"
    assert clip(text, 20) == "word word word word…"
    assert clip(" " * 100_000 + "a  b", 10) == "a b"
    assert main_text("{}") == "{}" and main_text('{"content": "x"}') == "x"
