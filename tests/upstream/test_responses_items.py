"""The Responses item codec (upstream/responses_items.py): every item shape, both ways."""

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.boundaries import assemble
from sessionwarden.domain.context.messages import (
    NATIVE_COMPACTION,
    THINKING,
    Message,
    Opaque,
    Text,
    ToolCall,
    ToolResult,
    content_hash,
    history_chars,
    text_chars,
    tool_pairs,
)
from sessionwarden.domain.context.prune import prune
from sessionwarden.domain.context.transcript import assemble_body
from sessionwarden.domain.usage.canonical import text_chars as wire_chars
from sessionwarden.upstream.responses_items import ResponsesItems

ITEMS = ResponsesItems()
encode = msgspec.json.encode
decode = msgspec.json.decode


def read(raw: bytes) -> Message:
    message = ITEMS.read_item(raw)
    assert isinstance(message, Message), message
    return message


def canonical(raw: bytes) -> bytes:
    """The JSON ``raw`` holds, keys in their order, without the client's whitespace."""
    return encode(decode(raw))


def round_trip(item: Any, *, spaced: bool = False) -> Message:
    """Read ``item``; check it is written back as the same JSON, and return the message."""
    raw = json.dumps(item).encode() if spaced else encode(item)
    message = read(raw)
    written = ITEMS.write_item(message)
    assert canonical(written) == canonical(raw)
    if not spaced:
        assert written == raw
    return message


def items_of(written: bytes) -> list[Any]:
    """The items of the bytes ``write_item`` wrote, as the upstream reads them."""
    found: list[Any] = json.loads(b"[" + written + b"]")
    return found


# ------------------------------------------------------------------ reading each shape


def test_messages_easy_and_typed() -> None:
    user = round_trip({"role": "user", "content": "hi"})
    assert (user.role, user.parts) == ("user", (Text("hi"),))
    developer = round_trip({"type": "message", "role": "developer",
                            "content": [{"type": "input_text", "text": "rules"}]})
    assert (developer.role, developer.parts) == ("system", (Text("rules"),))
    system = round_trip({"role": "system", "content": "be brief"})
    assert system.role == "system"
    said = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "done", "annotations": [],
                         "logprobs": []}]}
    assistant = round_trip(said)
    (part,) = assistant.parts
    assert assistant.role == "assistant" and isinstance(part, Text)
    assert part.text == "done" and part.wire  # its framing is kept


def test_plain_text_elements_have_no_framing_of_their_own() -> None:
    user = round_trip({"role": "user", "content": [{"type": "input_text", "text": "a"}]})
    assert user.parts == (Text("a"),)
    assistant = round_trip({"role": "assistant",
                            "content": [{"type": "output_text", "text": "b"}]})
    assert assistant.parts == (Text("b"),)
    # The other role's type is not the plain form: it keeps its framing.
    odd = round_trip({"role": "user", "content": [{"type": "output_text", "text": "c"}]})
    assert odd.parts[0] != Text("c")


def test_content_elements_that_are_not_text_are_opaque() -> None:
    content = [{"type": "input_image", "image_url": "data:image/png;base64,AAAA",
                "detail": "low"},
               {"type": "input_file", "file_id": "file-1"},
               {"type": "refusal", "refusal": "no"},
               {"type": "future_part", "x": [1, 2.5, None]},
               {"type": "input_text", "text": 5}, "loose", 7]
    message = round_trip({"role": "assistant", "content": content})
    kinds = [part.kind for part in message.parts if isinstance(part, Opaque)]
    assert kinds == ["input_image", "input_file", "refusal", "future_part", "input_text",
                     "part", "part"]
    assert message.parts[0] == Opaque("input_image", encode(content[0]), 0)
    assert text_chars(message) == wire_chars(content) == 2 + 5  # "no", "loose"


def test_function_calls_and_outputs_pair() -> None:
    call = round_trip({"type": "function_call", "id": "fc_1", "call_id": "call_1",
                       "name": "shell", "arguments": '{"cmd": "ls"}', "status": "completed"})
    assert (call.role, call.parts) == ("assistant",
                                       (ToolCall("call_1", "shell", '{"cmd": "ls"}'),))
    result = round_trip({"type": "function_call_output", "call_id": "call_1",
                         "output": "a\nb"})
    assert (result.role, result.parts) == ("tool", (ToolResult("call_1", (Text("a\nb"),)),))
    listed = round_trip({"type": "function_call_output", "id": "fco_1", "call_id": "call_2",
                         "output": [{"type": "input_text", "text": "x"},
                                    {"type": "input_image", "image_url": "u"}],
                         "status": "completed"})
    (found,) = listed.parts
    assert isinstance(found, ToolResult) and found.parts[0] == Text("x")
    assert tool_pairs([call, result]).pairs == ((0, 1, "call_1"),)


def test_custom_and_built_in_tool_calls() -> None:
    custom = round_trip({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
                         "input": "*** Begin Patch"})
    assert custom.parts == (ToolCall("c1", "apply_patch", "*** Begin Patch"),)
    round_trip({"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"})
    action = '{"type": "exec", "command": ["ls", "-la"], "timeout_ms": 1000}'
    raw = b'{"type": "local_shell_call", "id": "lsh_1", "call_id": "c2", "status": ' \
          b'"completed", "action": ' + action.encode() + b"}"
    shell = read(raw)
    # The payload's exact JSON text: written back byte for byte while unchanged.
    assert shell.parts == (ToolCall("c2", "local_shell", action),)
    assert action.encode() in ITEMS.write_item(shell)
    assert canonical(ITEMS.write_item(shell)) == canonical(raw)
    patch = round_trip({"type": "apply_patch_call", "call_id": "c3", "status": "completed",
                        "operation": {"type": "update_file", "path": "a.py", "diff": "-x"}})
    assert patch.parts[0] == ToolCall("c3", "apply_patch", encode(
        {"type": "update_file", "path": "a.py", "diff": "-x"}).decode())
    round_trip({"type": "apply_patch_call_output", "call_id": "c3", "status": "completed"})
    output = round_trip({"type": "shell_call_output", "call_id": "c4", "output": [
        {"stdout": "hello\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]})
    (result,) = output.parts
    assert isinstance(result, ToolResult) and text_chars(output) == 6  # stdout is read
    screenshot = round_trip({"type": "computer_call_output", "call_id": "c5", "output": {
        "type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}})
    assert screenshot.parts == (ToolResult("c5", (Opaque("computer_screenshot", encode(
        {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}), 0),)),)


def test_reasoning_is_thinking_byte_for_byte() -> None:
    raw = (b'{ "type": "reasoning", "id": "rs_1",\n  "summary": [{"type": "summary_text", '
           b'"text": "Looking at it"}], "encrypted_content": "gAAAAB\\u002f+x==" }')
    message = read(raw)
    assert message.role == "assistant"
    assert message.parts == (Opaque(THINKING, raw, len("Looking at it")),)
    assert ITEMS.write_item(message) == raw  # whitespace and escapes included
    with_text = read(encode({"type": "reasoning", "id": "rs_2", "summary": [],
                             "content": [{"type": "reasoning_text", "text": "abc"}]}))
    assert text_chars(with_text) == 3


@pytest.mark.parametrize("item", [
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "zzz"},
    {"type": "compaction_summary", "encrypted_content": "zzz"},
])
def test_compaction_items_are_native_compaction(item: dict[str, Any]) -> None:
    raw = json.dumps(item, indent=1).encode()
    message = read(raw)
    assert message.role == "assistant"
    assert message.parts == (Opaque(NATIVE_COMPACTION, raw, 0),)
    assert ITEMS.write_item(message) == raw


@pytest.mark.parametrize(("item", "role"), [
    ({"type": "item_reference", "id": "msg_0"}, "other"),
    ({"type": "future_item", "payload": {"a": [1]}}, "other"),
    ({"type": 3}, "other"),
    ({"content": "no role"}, "other"),
    ({"role": "critic", "content": "x"}, "other"),
    ({"role": "user", "content": None}, "other"),
    ({"role": "user", "content": {"text": "x"}}, "other"),
    ({"type": "message", "role": "user"}, "other"),
    ({"type": "function_call", "call_id": 1, "name": "f", "arguments": "{}"}, "assistant"),
    ({"type": "function_call", "call_id": "a", "arguments": "{}"}, "assistant"),
    ({"type": "function_call_output", "output": "no id"}, "other"),
    ({"type": "local_shell_call_output", "id": "lsh_1", "output": "x"}, "other"),
    ({"type": "web_search_call", "id": "ws_1", "status": "completed",
      "action": {"type": "search", "query": "q"}}, "assistant"),
    ({"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "f",
      "arguments": "{}", "output": "out"}, "assistant"),
])
def test_other_items_are_carried_whole(item: dict[str, Any], role: str) -> None:
    raw = json.dumps(item, indent=2).encode()
    message = read(raw)
    (part,) = message.parts
    assert message.role == role
    assert isinstance(part, Opaque) and part.kind.startswith("item:") and part.raw == raw
    assert part.chars == wire_chars(item)
    assert ITEMS.write_item(message) == raw


@pytest.mark.parametrize(("raw", "why"), [
    (b'"text"', "each input item must be a JSON object"),
    (b"[1]", "each input item must be a JSON object"),
    (b"{not json", "an input item is not valid JSON"),
    (b'{"a": 1},', "an input item is not valid JSON"),
    (b'{"a": 1},5', "each input item must be a JSON object"),
])
def test_what_is_not_an_item_is_refused(raw: bytes, why: str) -> None:
    assert ITEMS.read_item(raw) == why


def test_system_and_developer_messages_are_system() -> None:
    assert ITEMS.is_system(b'{"role": "developer", "content": "x"}')
    assert ITEMS.is_system(b'{"type": "message", "role": "system", "content": []}')
    assert not ITEMS.is_system(b'{"type": "reasoning", "role": "system"}')
    assert not ITEMS.is_system(b'{"type": null, "role": "system", "content": "x"}')
    assert not ITEMS.is_system(b'{"role": "user", "content": "x"}')
    assert not ITEMS.is_system(b"[1]") and not ITEMS.is_system(b"{oops")
    assert ITEMS.items_key == "input"


# ------------------------------------------------------------------ writing rewritten messages


def test_messages_governance_builds_are_written_plainly() -> None:
    built = [
        Message("user", (Text("summary"),)),
        Message("system", (Text("note"),)),
        Message("assistant", (Text("a"), Text("b"))),
        Message("user", ()),
        Message("tool", (ToolResult("k", (Text("r"),), "f"),)),
        Message("assistant", (ToolCall("k", "f", "{}"),)),
        Message("user", (Text("look"), Opaque("input_image", b'{"type":"input_image"}'))),
    ]
    assert [decode(ITEMS.write_item(message)) for message in built] == [
        {"role": "user", "content": "summary"},
        {"role": "system", "content": "note"},
        {"role": "assistant", "content": "ab"},
        {"role": "user", "content": ""},
        {"type": "function_call_output", "call_id": "k", "output": "r"},
        {"type": "function_call", "call_id": "k", "name": "f", "arguments": "{}"},
        {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                     {"type": "input_image"}]},
    ]


def test_a_spilled_output_keeps_its_other_keys() -> None:
    original = {"type": "function_call_output", "id": "fco_1", "call_id": "call_1",
                "output": "x" * 1000, "status": "completed"}
    message = read(encode(original))
    preview = Message("tool", (ToolResult("call_1", (Text("xxx… [spilled]"),)),),
                      message.wire)
    assert decode(ITEMS.write_item(preview)) == {**original, "output": "xxx… [spilled]"}
    assert content_hash(preview) != content_hash(message)
    listed = read(encode({**original, "output": [{"type": "input_text", "text": "y" * 900}]}))
    spilled = Message("tool", (ToolResult("call_1", (Text("short"),)),), listed.wire)
    assert decode(ITEMS.write_item(spilled))["output"] == [
        {"type": "input_text", "text": "short"}]


def test_pruned_arguments_keep_the_call_framing() -> None:
    long = json.dumps({"path": "a.py", "content": "z" * 5000})
    raw = encode({"type": "function_call", "id": "fc_9", "call_id": "c9", "name": "write",
                  "arguments": long, "status": "completed"})
    history = [read(raw), read(encode({"type": "function_call_output", "call_id": "c9",
                                       "output": "ok"})), read(b'{"role":"user","content":"x"}')]
    pruned = prune(history, 2).messages[0]
    written = decode(ITEMS.write_item(pruned))
    assert list(written) == ["type", "id", "call_id", "name", "arguments", "status"]
    assert len(written["arguments"]) < len(long) and json.loads(written["arguments"])
    action = {"type": "exec", "command": ["echo", "q" * 5000]}
    shell = read(encode({"type": "shell_call", "call_id": "s1", "action": action}))
    (call,) = shell.parts
    assert isinstance(call, ToolCall)
    cut = Message("assistant", (ToolCall("s1", "shell", '{"type":"exec","command":["x"]}'),),
                  shell.wire)
    assert decode(ITEMS.write_item(cut))["action"] == {"type": "exec", "command": ["x"]}
    broken = Message("assistant", (ToolCall("s1", "shell", "{oops"),), shell.wire)
    assert decode(ITEMS.write_item(broken))["action"] == "{oops"


@pytest.mark.parametrize("item", [
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
    {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"},
    {"type": "compaction", "encrypted_content": "z"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                          "text": "t"}]},
])
def test_a_summary_merged_into_an_item_goes_out_before_it(item: dict[str, Any]) -> None:
    """assemble merges the summary into the first kept message: an item of its own here."""
    raw = json.dumps(item).encode()
    message = read(raw)
    merged = Message(message.role, (Text("SUMMARY\n\n"), *message.parts), message.wire)
    written = ITEMS.write_item(merged)
    if item["type"] == "message":
        assert items_of(written) == [{**item, "content": [
            {"type": "output_text", "text": "SUMMARY\n\n"}, item["content"][0]]}]
    else:
        assert items_of(written) == [{"role": "assistant", "content": "SUMMARY\n\n"}, item]
        assert raw in written or item["type"] == "function_call"
    again = read(written)  # the daemon reads what it wrote as the one message
    assert again.role == "assistant" and again.parts == merged.parts
    assert ITEMS.write_item(again) == written
    if item["type"] != "message":  # a later compaction merges into the same message
        twice = Message("assistant", (Text("NEWER "), *again.parts), again.wire)
        assert items_of(ITEMS.write_item(twice)) == [
            {"role": "assistant", "content": "NEWER SUMMARY\n\n"}, item]


def test_a_compacted_codex_history_is_a_valid_input_list() -> None:
    """The real assemble on a Codex-shaped history: the body it makes is valid items."""
    history = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "shell",
         "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "e2"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "shell",
         "arguments": '{"cmd":"cat a.py"}'},
        {"type": "function_call_output", "call_id": "c2", "output": "print(1)"},
    ]
    messages = [read(encode(item)) for item in history]
    compacted = assemble(messages[:2], "SUMMARY", messages[5:], "NOTE")
    body = assemble_body(b'{"model":"m"}', "input",
                         [ITEMS.write_item(message) for message in compacted])
    sent = json.loads(body)["input"]
    assert sent == [history[0], history[1], {"role": "system", "content": "NOTE"},
                    {"role": "assistant", "content": "SUMMARY\n\n"}, *history[5:]]


def test_what_no_item_holds_any_more_is_left_out() -> None:
    call = read(encode({"type": "function_call", "call_id": "c", "name": "f",
                        "arguments": "{}"}))
    moved = Message("assistant", (Text("only text"),), call.wire)
    assert items_of(ITEMS.write_item(moved)) == [{"role": "assistant", "content": "only text"}]
    empty = read(b'{"role":"user","content":[]}')
    assert ITEMS.write_item(empty) == b'{"role":"user","content":[]}'


# ------------------------------------------------------------------ generated items

json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=5), children, max_size=3),
                           max_leaves=6)
texts = st.text(max_size=12)
call_ids = st.sampled_from(["call_1", "call_2", ""]) | texts
#: Framing keys seen on items (ids and states), and one unknown.
extra_keys = st.dictionaries(st.sampled_from(["id", "status", "x-vendor", "phase"]),
                             json_values, max_size=2)


@st.composite
def shuffled(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with maybe a few extra keys, its keys in any order."""
    merged = dict(base)
    if draw(st.integers(0, 3)) == 0:
        merged.update({k: v for k, v in draw(extra_keys).items() if k not in base})
    order = draw(st.permutations(list(merged)))
    return {key: merged[key] for key in order}


def elements(text_type: str) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda t: {"type": text_type, "text": t}, texts),
        st.builds(lambda t: {"type": text_type, "text": t, "annotations": []}, texts),
        st.builds(lambda u: {"type": "input_image", "image_url": u, "detail": "auto"}, texts),
        st.builds(lambda f: {"type": "input_file", "file_data": f}, texts),
        st.builds(lambda r: {"type": "refusal", "refusal": r}, texts),
        st.builds(lambda v: {"type": "mystery", "v": v}, json_values),
    ).flatmap(shuffled)


@st.composite
def message_item(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    text_type = "output_text" if role == "assistant" else "input_text"
    content = draw(texts | st.lists(elements(text_type), max_size=3))
    base: dict[str, Any] = {"role": role, "content": content}
    if draw(st.booleans()):
        base = {"type": "message", **base}
    return draw(shuffled(base))


@st.composite
def call_item(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["function_call", "custom_tool_call"]))
    payload = "arguments" if kind == "function_call" else "input"
    return draw(shuffled({"type": kind, "call_id": draw(call_ids), "name": draw(texts),
                          payload: draw(texts)}))


@st.composite
def output_item(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["function_call_output", "custom_tool_call_output"]))
    output = draw(texts | st.lists(elements("input_text"), max_size=3))
    return draw(shuffled({"type": kind, "call_id": draw(call_ids), "output": output}))


def reasoning_item(summary: list[str], encrypted: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_x",
            "summary": [{"type": "summary_text", "text": s} for s in summary],
            "encrypted_content": encrypted}


whole_items = st.one_of(
    st.builds(reasoning_item, st.lists(texts, max_size=2), texts),
    st.builds(lambda e: {"type": "compaction", "encrypted_content": e}, texts),
    st.builds(lambda i: {"type": "item_reference", "id": i}, texts),
    st.dictionaries(st.text(max_size=5), json_values, max_size=3),
)
items = st.one_of(message_item(), call_item(), output_item(), whole_items)
#: Items whose neutral count is the wire's (reasoning adds its summaries: see the module).
counted_items = st.one_of(message_item(), call_item(), output_item())


@settings(max_examples=200)
@given(items, st.booleans())
def test_generated_items_round_trip(item: Any, spaced: bool) -> None:
    """write_item(read_item(raw)) is the same JSON; opaque items are the same bytes."""
    message = round_trip(item, spaced=spaced)
    if message.parts and isinstance(message.parts[0], Opaque) and not message.wire:
        raw = json.dumps(item).encode() if spaced else encode(item)
        assert ITEMS.write_item(message) == raw


@settings(max_examples=100)
@given(counted_items)
def test_the_neutral_count_is_the_wire_count(item: Any) -> None:
    assert history_chars([read(encode(item))]) == wire_chars(item)


@settings(max_examples=100)
@given(st.lists(items, max_size=4))
def test_messages_governance_rewrites_stay_readable(history: list[Any]) -> None:
    """Any message, text put before its parts, is written as items the codec reads back."""
    for item in history:
        message = read(encode(item))
        merged = Message(message.role, (Text("S"), *message.parts), message.wire)
        written = ITEMS.write_item(merged)
        assert all(isinstance(sent, dict) for sent in items_of(written))
        again = read(written)
        assert text_chars(again) == text_chars(merged)
        assert ITEMS.write_item(again) == written


@settings(max_examples=100)
@given(items, items)
def test_same_item_same_hash_any_change_another(a: Any, b: Any) -> None:
    first, second = read(encode(a)), read(encode(b))
    assert (content_hash(first) == content_hash(second)) == (encode(a) == encode(b))
