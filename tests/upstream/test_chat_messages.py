"""The chat-completions adapter of the neutral message model: every shape, both ways."""

from typing import Any

import msgspec
import pytest
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
    tool_pairs,
)
from sessionwarden.domain.usage.canonical import text_chars as wire_chars
from sessionwarden.upstream.chat_messages import from_neutral, to_neutral

encode = msgspec.json.encode


def assert_round_trip(messages: list[Any]) -> list[Message]:
    neutral = to_neutral(messages)
    back = from_neutral(neutral)
    assert back == messages
    assert encode(back) == encode(messages)
    return neutral


def plain_call(call_id: str, name: str = "f", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


# ------------------------------------------------------------------ reading each shape


def test_string_content_and_roles() -> None:
    neutral = assert_round_trip([
        {"role": "system", "content": "rules"},
        {"role": "developer", "content": "more rules"},
        {"role": "user", "content": "", "name": "alice"},
        {"role": "assistant", "content": "done"},
    ])
    assert [m.role for m in neutral] == ["system", "system", "user", "assistant"]
    assert neutral[0].parts == (Text("rules"),)
    assert neutral[2].parts == (Text(""), Opaque("field:name", b'"alice"', 0))


def test_content_part_lists() -> None:
    user = {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                            "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
        {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}},
        {"text": "reordered", "type": "text"},
        {"type": "future_part", "x": [1, 2.5, None, True]},
    ]}
    (message,) = assert_round_trip([user])
    kinds = [p.kind if isinstance(p, Opaque) else "Text" for p in message.parts]
    assert kinds == ["Text", "image_url", "input_audio", "file", "Text", "Text", "future_part"]
    assert message.parts[1] == Opaque("image_url", encode(user["content"][1]), 0)
    assert message.parts[4] == Text("cached", encode(user["content"][4]))


def test_assistant_tool_calls_with_null_or_text_content() -> None:
    history = [
        {"role": "assistant", "content": None,
         "tool_calls": [plain_call("a", "read", '{"p": 1}'), plain_call("b")]},
        {"role": "assistant", "content": "let me look", "tool_calls": [plain_call("c")]},
        {"role": "assistant", "tool_calls": [plain_call("d")]},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    neutral = assert_round_trip(history)
    assert neutral[0].parts == (ToolCall("a", "read", '{"p": 1}'), ToolCall("b", "f", "{}"))
    assert neutral[1].parts == (Text("let me look"), ToolCall("c", "f", "{}"))
    assert neutral[3].parts == ()


def test_tool_calls_with_extra_keys_keep_them() -> None:
    """Gemini's thought signatures ride on the call: losing them breaks the next turn."""
    odd = {"function": {"arguments": "{}", "name": "g"}, "id": "x", "type": "function",
           "index": 0, "extra_content": {"google": {"thought_signature": "c2ln"}}}
    (message,) = assert_round_trip([{"role": "assistant", "tool_calls": [odd]}])
    assert message.parts == (ToolCall("x", "g", "{}", encode(odd)),)


def test_tool_messages_become_results() -> None:
    neutral = assert_round_trip([
        {"role": "tool", "tool_call_id": "a", "content": "result"},
        {"role": "tool", "content": [{"type": "text", "text": "r2"}], "tool_call_id": "b",
         "name": "read"},
        {"role": "tool", "tool_call_id": "c", "content": ""},
    ])
    assert neutral[0].parts == (ToolResult("a", (Text("result"),)),)
    assert neutral[1].parts == (ToolResult("b", (Text("r2"),), "read"),)
    assert neutral[2].parts == (ToolResult("c", (Text(""),)),)
    assert all(m.role == "tool" for m in neutral)


def test_legacy_function_call_and_function_role() -> None:
    neutral = assert_round_trip([
        {"role": "assistant", "content": None,
         "function_call": {"name": "lookup", "arguments": '{"q":"x"}'}},
        {"role": "function", "name": "lookup", "content": "found"},
    ])
    assert neutral[0].parts == (ToolCall("", "lookup", '{"q":"x"}'),)
    assert neutral[1].parts == (ToolResult("", (Text("found"),), "lookup"),)
    assert tool_pairs(neutral).pairs == ((0, 1, ""),)


def test_refusal_reasoning_and_unknown_keys_are_opaque() -> None:
    message = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}],
               "refusal": "no", "reasoning_content": "thinking…", "audio": {"id": "au_1"},
               "x-vendor": {"nested": [1, {"a": None}]}, "annotations": []}
    (neutral,) = assert_round_trip([message])
    kinds = [p.kind for p in neutral.parts if isinstance(p, Opaque)]
    assert kinds == ["refusal", "field:refusal", "field:reasoning_content", "field:audio",
                     "field:x-vendor", "field:annotations"]
    assert history_chars([neutral]) == wire_chars([message]) == 2 + 2 + 9


def test_key_order_is_kept() -> None:
    assert_round_trip([
        {"content": "first", "role": "user"},
        {"tool_calls": [plain_call("a")], "content": None, "role": "assistant"},
        {"content": "x", "tool_call_id": "a", "role": "tool"},
    ])


@pytest.mark.parametrize("item", [
    5, None, "text", [], {}, {"role": 3}, {"role": "critic", "content": "x"},
    {"role": "user", "content": 5}, {"role": "user", "content": {"text": "x"}},
    {"role": "assistant", "tool_calls": "nope"},
    {"role": "assistant", "tool_calls": [{"id": "a"}]},
    {"role": "assistant", "tool_calls": [plain_call("a"), {"id": 1, "function": {}}]},
    {"role": "assistant", "function_call": {"name": "f"}},
    {"role": "tool", "tool_call_id": 7, "content": "x"},
    {"role": "tool", "content": "no id"},
    {"role": "tool", "tool_call_id": "a", "content": None, "tool_calls": [plain_call("b")]},
    {"role": "user", "content": [5, "s", {"type": "text", "text": 1}]},
])
def test_shapes_that_are_not_valid_still_pass_through(item: object) -> None:
    (message,) = assert_round_trip([item])
    assert history_chars([message]) == wire_chars([item])


def test_unreadable_items_are_other() -> None:
    neutral = to_neutral([5, {"role": "critic"}, {"content": "no role"}])
    assert [m.role for m in neutral] == ["other"] * 3
    assert neutral[1].parts == (Opaque("message", b'{"role":"critic"}', 0),)


# ------------------------------------------------------------------ writing rewritten messages


def test_a_rewritten_result_keeps_its_framing() -> None:
    original = {"content": [{"type": "text", "text": "x" * 1000}], "role": "tool",
                "tool_call_id": "a", "name": "grep", "x-trace": 1}
    (message,) = to_neutral([original])
    (found,) = [p for p in message.parts if isinstance(p, ToolResult)]
    preview = ToolResult(found.call_id, (Text("xxx… [spilled]"),), found.name)
    rewritten = Message(message.role, tuple(preview if p is found else p
                                            for p in message.parts), message.wire)
    assert from_neutral([rewritten]) == [{
        "content": [{"type": "text", "text": "xxx… [spilled]"}], "role": "tool",
        "tool_call_id": "a", "name": "grep", "x-trace": 1}]
    assert content_hash(rewritten) != content_hash(message)


def test_truncated_arguments_keep_the_call_framing() -> None:
    odd = {"id": "x", "type": "function", "function": {"name": "w", "arguments": "{...}"},
           "index": 2}
    (message,) = to_neutral([{"role": "assistant", "tool_calls": [odd]}])
    (original,) = message.parts
    assert isinstance(original, ToolCall) and original.arguments == "{...}"
    shorter = Message("assistant", (ToolCall("x", "w", "{}", original.wire),), message.wire)
    assert from_neutral([shorter]) == [{"role": "assistant", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "w", "arguments": "{}"},
         "index": 2}]}]


def test_content_string_split_in_parts_stays_a_string() -> None:
    (message,) = to_neutral([{"role": "user", "content": "ab", "name": "n"}])
    split = Message("user", (Text("a"), Text("b"), *message.parts[1:]), message.wire)
    assert from_neutral([split]) == [{"role": "user", "content": "ab", "name": "n"}]
    with_image = Message("user", (Opaque("image_url", b'{"type":"image_url"}'),
                                  *message.parts), message.wire)
    assert from_neutral([with_image]) == [{"role": "user", "content": [
        {"type": "image_url"}, {"type": "text", "text": "ab"}], "name": "n"}]


def test_messages_governance_builds_are_written_plainly() -> None:
    built = [
        Message("system", (Text("summary of turns 3-40"),)),
        Message("user", ()),
        Message("assistant", (ToolCall("k", "f", "{}"),)),
        Message("assistant", (Text("t"), ToolCall("k2", "f", "{}"))),
        Message("tool", (ToolResult("k", (Text("r"),), "f"),)),
        Message("tool", (ToolResult("k2", (Opaque("image_url", b'{"type":"image_url"}'),)),)),
        Message("assistant", (Opaque("field:reasoning_content", b'"hm"', 2),)),
    ]
    assert from_neutral(built) == [
        {"role": "system", "content": "summary of turns 3-40"},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": None, "tool_calls": [plain_call("k")]},
        {"role": "assistant", "content": "t", "tool_calls": [plain_call("k2")]},
        {"role": "tool", "tool_call_id": "k", "name": "f", "content": "r"},
        {"role": "tool", "tool_call_id": "k2", "content": [{"type": "image_url"}]},
        {"role": "assistant", "content": "", "reasoning_content": "hm"},
    ]


@pytest.mark.parametrize("message", [
    Message("user", (ToolResult("a"),)),
    Message("tool", (ToolResult("a"), ToolResult("b"))),
    Message("other", (Text("x"),)),
])
def test_what_chat_completions_cannot_say_is_a_programming_error(message: Message) -> None:
    with pytest.raises(ValueError, match="message"):
        from_neutral([message])


# ------------------------------------------------------------------ generated histories

json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=5), children, max_size=3),
                           max_leaves=6)
texts = st.text(max_size=12)
call_ids = st.sampled_from(["call_1", "call_2", "call_3", ""]) | texts  # ids that meet
extra_keys = st.dictionaries(
    st.sampled_from(["x-vendor", "refusal", "reasoning_content", "reasoning", "audio",
                     "annotations", "name", "cache_control", "index", "content", "id"]),
    json_values, max_size=2)


#: Extra keys seen on tool calls (none holds text the model reads: see the adapter doc).
call_extra_keys = st.dictionaries(st.sampled_from(["index", "extra_content", "x-vendor"]),
                                  json_values, max_size=2)


@st.composite
def shuffled(draw: st.DrawFn, base: dict[str, Any],
             extras: st.SearchStrategy[dict[str, Any]] | None = extra_keys) -> dict[str, Any]:
    """``base`` with maybe a few extra keys, its keys in any order."""
    merged = dict(base)
    if extras is not None and draw(st.integers(0, 4)) == 0:
        merged.update(draw(extras))
    order = draw(st.permutations(list(merged)))
    return {key: merged[key] for key in order}


def content_parts(assistant: bool) -> st.SearchStrategy[dict[str, Any]]:
    kinds = [
        st.builds(lambda t: {"type": "text", "text": t}, texts),
        st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, texts),
        st.builds(lambda d: {"type": "input_audio", "input_audio": {"data": d,
                                                                    "format": "mp3"}}, texts),
        st.builds(lambda f: {"type": "file", "file": {"file_data": f}}, texts),
        st.builds(lambda v: {"type": "mystery", "v": v}, json_values),
    ]
    if assistant:
        kinds.append(st.builds(lambda r: {"type": "refusal", "refusal": r}, texts))
    return st.one_of(kinds).flatmap(shuffled)


user_contents = texts | st.lists(content_parts(assistant=False), max_size=3)
assistant_contents = texts | st.none() | st.lists(content_parts(assistant=True), max_size=3)


@st.composite
def tool_call(draw: st.DrawFn) -> dict[str, Any]:
    function = draw(shuffled({"name": draw(texts), "arguments": draw(texts)}, extras=None))
    return draw(shuffled({"id": draw(call_ids), "type": "function", "function": function},
                         extras=call_extra_keys))


@st.composite
def chat_message(draw: st.DrawFn) -> Any:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool",
                                 "function", "other"]))
    base: dict[str, Any] = {"role": role}
    if role == "assistant":
        if draw(st.booleans()):
            base["content"] = draw(assistant_contents)
        if draw(st.booleans()):
            base["tool_calls"] = draw(st.lists(tool_call(), max_size=3))
        elif draw(st.integers(0, 5)) == 0:
            base["function_call"] = draw(shuffled({"name": draw(texts),
                                                   "arguments": draw(texts)}))
    elif role == "tool":
        base.update(tool_call_id=draw(call_ids), content=draw(user_contents))
    elif role == "function":
        base.update(name=draw(texts), content=draw(texts))
    elif role == "other":
        return draw(json_values)
    else:
        base["content"] = draw(user_contents)
    return draw(shuffled(base))


@st.composite
def tool_turn(draw: st.DrawFn) -> list[Any]:
    """An assistant's parallel calls and the tool messages answering some, in any order."""
    calls = draw(st.lists(tool_call(), min_size=1, max_size=3))
    content = draw(st.none() | texts)
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    return [draw(shuffled({"role": "assistant", "content": content, "tool_calls": calls})),
            *(draw(shuffled({"role": "tool", "tool_call_id": call["id"],
                             "content": draw(user_contents)})) for call in answered)]


chat_histories = st.lists(chat_message().map(lambda m: [m]) | tool_turn(), max_size=4).map(
    lambda chunks: [message for chunk in chunks for message in chunk])


def legacy_chars(messages: list[Any]) -> int:
    """Characters of legacy ``function_call`` arguments (counted by the neutral side only)."""
    return sum(len(m["function_call"]["arguments"]) for m in messages
               if isinstance(m, dict) and m.get("role") == "assistant"
               and isinstance(m.get("function_call"), dict)
               and isinstance(m["function_call"].get("arguments"), str)
               and isinstance(m["function_call"].get("name"), str))


@settings(max_examples=100)
@given(chat_histories)
def test_generated_histories_round_trip_count_and_pair(messages: list[Any]) -> None:
    """Byte-identical round trip; the wire's char count; every call and result paired once."""
    neutral = assert_round_trip(messages)
    assert history_chars(neutral) == wire_chars(messages) + legacy_chars(messages)
    pairing = tool_pairs(neutral)
    calls = [(i, p.id) for i, m in enumerate(neutral) for p in m.parts
             if isinstance(p, ToolCall)]
    results = [(i, p.call_id) for i, m in enumerate(neutral) for p in m.parts
               if isinstance(p, ToolResult)]
    assert sorted([(c, i) for c, _, i in pairing.pairs] + list(pairing.orphan_calls)) == \
        sorted(calls)
    assert sorted([(r, i) for _, r, i in pairing.pairs] + list(pairing.orphan_results)) == \
        sorted(results)
    assert all(c < r for c, r, _ in pairing.pairs)


@settings(max_examples=100)
@given(chat_message(), chat_message())
def test_same_message_same_hash_any_change_another(a: Any, b: Any) -> None:
    (first,), (second,) = to_neutral([a]), to_neutral([b])
    assert (content_hash(first) == content_hash(second)) == (encode(a) == encode(b))
    (again,) = to_neutral([msgspec.json.decode(encode(a))])
    assert content_hash(again) == content_hash(first)


@settings(max_examples=60)
@given(chat_message(), st.sampled_from(["append", "reorder", "retype"]))
def test_small_edits_change_the_hash(message: Any, edit: str) -> None:
    if not isinstance(message, dict) or "role" not in message or len(message) < 2:
        message = {"role": "user", "content": "x"}
    if edit == "append":
        edited = {**message, "x-added": 1}
    elif edit == "reorder":
        edited = dict(reversed(list(message.items())))
    else:
        edited = {key: ([{"type": "text", "text": value}] if isinstance(value, str) else value)
                  for key, value in message.items()} | {"role": message["role"]}
    if encode(edited) == encode(message):
        edited["x-differs"] = None
    (first,), (second,) = to_neutral([message]), to_neutral([edited])
    assert content_hash(first) != content_hash(second)
