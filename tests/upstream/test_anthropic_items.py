"""The Anthropic Messages item codec (upstream/anthropic_items.py): every shape, both ways."""

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
    tool_pairs,
)
from sessionwarden.domain.usage.canonical import text_chars as wire_chars
from sessionwarden.upstream.anthropic_items import AnthropicItems

ITEMS = AnthropicItems()
encode = msgspec.json.encode
decode = msgspec.json.decode


def read(raw: bytes) -> Message:
    message = ITEMS.read_item(raw)
    assert isinstance(message, Message), message
    return message


def canonical(raw: bytes) -> bytes:
    """The JSON ``raw`` holds, keys in their order, without the client's whitespace."""
    return encode(decode(raw))


def assert_round_trip(item: Any, spaced: bool = False) -> Message:
    raw = json.dumps(item, indent=1).encode() if spaced else encode(item)
    message = read(raw)
    back = ITEMS.write_item(message)
    assert canonical(back) == canonical(raw)
    if not spaced:
        assert back == raw
    return message


def written(message: Message) -> Any:
    return decode(ITEMS.write_item(message))


THINKING_BLOCK = {"type": "thinking", "thinking": "let me see", "signature": "EqQBCkgIAR=="}
COMPACTION_BLOCK = {"type": "compaction", "content": "summary of it all",
                    "encrypted_content": "Zm9v", "signature": "c2ln"}


# ------------------------------------------------------------------ reading each shape


def test_string_content_and_text_blocks() -> None:
    plain = assert_round_trip({"role": "user", "content": "hello"})
    assert plain.role == "user" and plain.parts == (Text("hello"),)
    cached = {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}}
    blocks = assert_round_trip({"role": "assistant", "content": [
        {"type": "text", "text": "a"}, cached,
        {"type": "text", "text": "cited", "citations": [{"type": "char_location",
                                                         "cited_text": "c"}]},
        {"text": "reordered", "type": "text"}]})
    assert blocks.role == "assistant"
    assert [type(p) for p in blocks.parts] == [Text] * 4
    assert blocks.parts[0] == Text("a")
    first, second = blocks.parts[1], blocks.parts[3]
    assert isinstance(first, Text) and first.text == "cached" and first.wire
    assert b"cached" not in first.wire  # the text lives in the part, not twice
    assert isinstance(second, Text) and second.wire


def test_tool_use_keeps_the_exact_json_text_of_its_input() -> None:
    raw = (b'{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", '
           b'"name": "Read", "input": {"file_path": "/a.py",  "limit": 2.50, "x": "\\u00e9"}}]}')
    message = read(raw)
    assert message.parts == (ToolCall(
        "toolu_1", "Read", '{"file_path": "/a.py",  "limit": 2.50, "x": "\\u00e9"}'),)
    back = ITEMS.write_item(message)
    assert b'{"file_path": "/a.py",  "limit": 2.50, "x": "\\u00e9"}' in back
    assert canonical(back) == canonical(raw)


def test_tool_results_make_a_tool_message_and_keep_their_framing() -> None:
    message = assert_round_trip({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "out", "is_error": True},
        {"type": "tool_result", "tool_use_id": "b",
         "content": [{"type": "text", "text": "r"},
                     {"type": "image", "source": {"type": "base64", "data": "iVBO"}}],
         "cache_control": {"type": "ephemeral"}},
        {"tool_use_id": "c", "type": "tool_result"},
        {"type": "text", "text": "<system-reminder>note</system-reminder>"},
    ]})
    assert message.role == "tool"
    first, second, third, text = message.parts
    assert first == ToolResult("a", (Text("out"),), error=True)  # is_error: true
    assert isinstance(second, ToolResult) and second.parts[0] == Text("r")
    assert not second.error
    assert isinstance(second.parts[1], Opaque) and second.parts[1].kind == "image"
    assert third == ToolResult("c")
    assert text == Text("<system-reminder>note</system-reminder>")


def test_thinking_compaction_and_other_blocks_are_opaque() -> None:
    blocks = [THINKING_BLOCK, {"type": "redacted_thinking", "data": "EmwKAhgB"},
              COMPACTION_BLOCK, {"type": "compaction", "content": None},
              {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
               "input": {"query": "q"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
              {"type": "document", "source": {"type": "text", "data": "doc"}},
              {"type": "future_block", "v": [1, None]}, {"no": "type"}, 5, "s"]
    message = assert_round_trip({"role": "assistant", "content": blocks})
    kinds = [p.kind for p in message.parts if isinstance(p, Opaque)]
    assert kinds == [THINKING, THINKING, NATIVE_COMPACTION, NATIVE_COMPACTION,
                     "server_tool_use", "web_search_tool_result", "document",
                     "future_block", "part", "part", "part"]
    assert [p.chars for p in message.parts if isinstance(p, Opaque)][:3] == [10, 0, 17]
    assert all(isinstance(p, Opaque) and p.raw == encode(b)
               for p, b in zip(message.parts, blocks, strict=True))


def test_extra_keys_are_opaque_fields_and_key_order_is_kept() -> None:
    message = assert_round_trip({"content": "x", "x-vendor": {"a": [1]}, "role": "user"})
    assert message.parts == (Text("x"), Opaque("field:x-vendor", b'{"a":[1]}', 0))
    assert_round_trip({"content": None, "role": "assistant"})
    assert_round_trip({"role": "user", "content": {"type": "text", "text": "not a list"}})
    assert_round_trip({"role": "user"})


@pytest.mark.parametrize("item", [
    {"role": "system", "content": "x"}, {"role": "tool", "content": "x"},
    {"role": "user", "content": [{"type": "tool_use", "id": 1, "name": "f", "input": {}}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                       "input": [1]}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": 5}]},
    {"role": "user", "content": [{"type": "tool_result", "content": "no id"}]},
    {"role": "user", "content": [{"type": "text", "text": 1}]},
    {"role": "user", "content": [{"type": "text", "text": "t", "content": "more"}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                  "content": [{"type": "tool_use", "id": "b", "name": "f",
                                               "input": {}}]}]},
])
def test_shapes_that_are_not_valid_still_pass_through(item: Any) -> None:
    message = assert_round_trip(item)
    assert history_chars([message]) == wire_chars(item)


def test_unreadable_items() -> None:
    assert ITEMS.read_item(b"{oops") == "a message is not valid JSON"
    assert ITEMS.read_item(b"[1]") == "each message must be an object with a string 'role'"
    assert ITEMS.read_item(b'{"role": 3}') == (
        "each message must be an object with a string 'role'")
    assert ITEMS.read_item(b'{"role": "user", "content": ' + b"[" * 5000 + b"]" * 5000
                           + b"}") == "a message is not valid JSON"
    other = read(b'{"role":"critic", "content":"x"}')
    assert other == Message("other", (Opaque("message", b'{"role":"critic", "content":"x"}',
                                             1),))
    assert ITEMS.write_item(other) == b'{"role":"critic", "content":"x"}'
    assert not ITEMS.is_system(b'{"role": "system", "content": "x"}')
    assert ITEMS.items_key == "messages"


# ------------------------------------------------------------------ writing rewritten messages


def test_a_result_replaced_by_a_preview_keeps_is_error_and_the_rest_byte_for_byte() -> None:
    item = {"role": "user", "content": [
        THINKING_BLOCK,
        {"type": "tool_result", "tool_use_id": "a", "content": [
            {"type": "text", "text": "x" * 1000}], "is_error": True,
         "cache_control": {"type": "ephemeral"}},
        COMPACTION_BLOCK]}
    raw = json.dumps(item).encode()
    message = read(raw)
    preview = ToolResult("a", (Text("xxx… [spilled]"),))
    rewritten = Message(message.role, tuple(preview if isinstance(p, ToolResult) else p
                                            for p in message.parts), message.wire)
    back = ITEMS.write_item(rewritten)
    assert json.dumps(THINKING_BLOCK).encode() in back
    assert json.dumps(COMPACTION_BLOCK).encode() in back
    assert decode(back)["content"][1] == {
        "type": "tool_result", "tool_use_id": "a",
        "content": [{"type": "text", "text": "xxx… [spilled]"}], "is_error": True,
        "cache_control": {"type": "ephemeral"}}
    assert content_hash(rewritten) != content_hash(message)


def test_a_string_result_replaced_stays_a_string_and_results_are_found_by_id() -> None:
    message = read(encode({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "long", "is_error": False},
        {"type": "tool_result", "tool_use_id": "b", "content": "long", "is_error": True}]}))
    # Governance dropped the first result (an orphan) and shortened the second.
    shorter = Message("tool", (ToolResult("b", (Text("short"),)),), message.wire)
    assert written(shorter) == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "b", "content": "short", "is_error": True}]}
    # A result governance added to it has no framing: the plain form, after.
    added = Message("tool", (*shorter.parts, ToolResult("z", (Text("stub"),))), message.wire)
    assert written(added)["content"][1] == {
        "type": "tool_result", "tool_use_id": "z", "content": "stub"}


@pytest.mark.parametrize(("value", "error"), [
    (b"true", True), (b"false", False), (b'"true"', False), (b"1", False), (b"null", False)])
def test_only_is_error_true_marks_a_failed_result_and_it_is_written_back_as_it_came(
        value: bytes, error: bool) -> None:
    raw = (b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"a",'
           b'"is_error":' + value + b',"content":"boom"}]}')
    message = read(raw)
    [result] = message.parts
    assert isinstance(result, ToolResult) and result.error is error
    assert ITEMS.write_item(message) == raw  # byte for byte, is_error where it was
    # a result whose parts governance replaced keeps its is_error as read
    shorter = Message("tool", (ToolResult("a", (Text("b…"),), error=error),), message.wire)
    assert ITEMS.write_item(shorter) == raw.replace(b'"boom"', '"b…"'.encode())


def test_a_failed_result_governance_built_is_written_with_is_error() -> None:
    built = Message("tool", (ToolResult("z", (Text("stub"),), error=True),
                             ToolResult("y", (Text("ok"),))))
    assert written(built)["content"] == [
        {"type": "tool_result", "tool_use_id": "z", "content": "stub", "is_error": True},
        {"type": "tool_result", "tool_use_id": "y", "content": "ok"}]


@pytest.mark.parametrize(("arguments", "expected"), [
    ('{"path":"a"}', {"path": "a"}),
    ('{"unparsed_arguments": "cut…"}', {"unparsed_arguments": "cut…"}),
    ('{"path": "a", "tru', {"unparsed_arguments": '{"path": "a", "tru'}),
    ("[1, 2]", {"value": [1, 2]}),
    ('"text"', {"value": "text"}),
    (" {} ", {}),
])
def test_arguments_replaced_keep_the_call_framing(arguments: str, expected: Any) -> None:
    item = {"role": "assistant", "content": [
        THINKING_BLOCK,
        {"type": "tool_use", "id": "t", "name": "w", "input": {"path": "a" * 100},
         "cache_control": {"type": "ephemeral"}}]}
    message = read(encode(item))
    thinking, call = message.parts
    assert isinstance(call, ToolCall) and call.wire
    cut = Message("assistant", (thinking, ToolCall("t", "w", arguments, call.wire)),
                  message.wire)
    back = ITEMS.write_item(cut)
    assert encode(THINKING_BLOCK) in back
    assert decode(back)["content"][1] == {"type": "tool_use", "id": "t", "name": "w",
                                          "input": expected,
                                          "cache_control": {"type": "ephemeral"}}


def test_messages_governance_builds_are_written_plainly() -> None:
    built = [
        Message("user", (Text("summary of turns 3-40"),)),
        Message("system", (Text("[note]"),)),
        Message("assistant", (Text("t"), ToolCall("k", "f", '{"a": 1}'))),
        Message("tool", (ToolResult("k", (Text("r"),), "f"),)),
        Message("tool", (ToolResult("k2", (Opaque("image", b'{"type":"image"}'),)),)),
        Message("tool", (ToolResult("k3"),)),
        Message("user", (Opaque("field:x", b"1", 0), Text("a"), Text("b"))),
    ]
    assert [written(m) for m in built] == [
        {"role": "user", "content": "summary of turns 3-40"},
        {"role": "user", "content": "[note]"},
        {"role": "assistant", "content": [{"type": "text", "text": "t"}, {
            "type": "tool_use", "id": "k", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "k",
                                      "content": "r"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "k2",
                                      "content": [{"type": "image"}]}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "k3",
                                      "content": ""}]},
        {"role": "user", "content": "ab", "x": 1},
    ]


def test_text_split_or_merged_keeps_the_string_form() -> None:
    message = read(b'{"role":"user","content":"ab"}')
    merged = Message("user", (Text("summary\n\n"), *message.parts), message.wire)
    assert written(merged) == {"role": "user", "content": "summary\n\nab"}
    with_image = Message("user", (Opaque("image", b'{"type":"image"}'), *message.parts),
                         message.wire)
    assert written(with_image) == {"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "ab"}]}


@pytest.mark.parametrize("message", [
    Message("other", (Text("x"),)),
    Message("other", (Opaque("message", b"{}"), Opaque("message", b"{}"))),
])
def test_an_other_message_must_be_its_item(message: Message) -> None:
    with pytest.raises(ValueError, match="other"):
        ITEMS.write_item(message)


# ------------------------------------------------------------------ generated histories

json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=5), children, max_size=3),
                           max_leaves=6)
texts = st.text(max_size=12)
ids = st.sampled_from(["toolu_1", "toolu_2", "toolu_3", ""]) | texts  # ids that meet
cache_control = st.just({"type": "ephemeral"}) | st.just({"type": "ephemeral", "ttl": "1h"})
#: Extra keys of a message (what the model reads in them is counted on both sides).
message_extras = st.dictionaries(st.sampled_from(["x-vendor", "name", "id", "text"]),
                                 json_values, max_size=2)
#: Extra keys of a block: none holds text the model reads (see the module doc).
block_extras = st.fixed_dictionaries({}, optional={"cache_control": cache_control,
                                                   "x-vendor": st.integers()})


@st.composite
def shuffled(draw: st.DrawFn, base: dict[str, Any],
             extras: st.SearchStrategy[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``base`` with maybe a few extra keys, its keys in any order."""
    merged = dict(base)
    if extras is not None and draw(st.integers(0, 3)) == 0:
        merged.update(draw(extras))
    order = draw(st.permutations(list(merged)))
    return {key: merged[key] for key in order}


def text_block() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda t: {"type": "text", "text": t}, texts).flatmap(
        lambda b: shuffled(b, block_extras))


def media_block() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda d: {"type": "image", "source": {"type": "base64",
                                                         "media_type": "image/png",
                                                         "data": d}}, texts),
        st.builds(lambda d: {"type": "document", "source": {"type": "text", "data": d}},
                  texts),
        st.builds(lambda v: {"type": "mystery", "v": v}, json_values),
        json_scalars,
    )


@st.composite
def tool_use(draw: st.DrawFn) -> dict[str, Any]:
    arguments = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3))
    return draw(shuffled({"type": "tool_use", "id": draw(ids), "name": draw(texts),
                          "input": arguments}, block_extras))


@st.composite
def tool_result(draw: st.DrawFn, call_id: str | None = None) -> dict[str, Any]:
    base: dict[str, Any] = {"type": "tool_result",
                            "tool_use_id": draw(ids) if call_id is None else call_id}
    content = draw(st.none() | texts | st.lists(text_block() | media_block(), max_size=3))
    if content is not None:
        base["content"] = content
    if draw(st.booleans()):
        base["is_error"] = draw(st.booleans())
    return draw(shuffled(base, block_extras))


thinking_blocks = st.one_of(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, texts, texts),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, texts),
    st.builds(lambda t, e: {"type": "compaction", "content": t, "encrypted_content": e},
              st.none() | texts, texts),
)


@st.composite
def anthropic_message(draw: st.DrawFn) -> Any:
    role = draw(st.sampled_from(["user", "assistant", "other"]))
    if role == "other":  # a role Anthropic does not have: carried whole
        return draw(shuffled({"role": draw(st.sampled_from(["system", "tool", "critic"])),
                              "content": draw(json_values)}, message_extras))
    blocks: list[st.SearchStrategy[Any]] = [text_block(), media_block(), thinking_blocks]
    blocks.append(tool_use() if role == "assistant" else tool_result())
    content = draw(texts | st.lists(st.one_of(blocks), max_size=4))
    return draw(shuffled({"role": role, "content": content}, message_extras))


@st.composite
def tool_turn(draw: st.DrawFn) -> list[Any]:
    """An assistant's parallel calls, and one user message answering some, in any order."""
    calls = draw(st.lists(tool_use(), min_size=1, max_size=3))
    thinking = draw(st.lists(thinking_blocks, max_size=1))
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    results = [draw(tool_result(call["id"])) for call in answered]
    return [{"role": "assistant", "content": [*thinking, *calls]},
            *([{"role": "user", "content": results}] if results else [])]


histories = st.lists(anthropic_message().map(lambda m: [m]) | tool_turn(), max_size=4).map(
    lambda chunks: [message for chunk in chunks for message in chunk])


def arguments_correction(neutral: list[Message]) -> int:
    """A call's arguments count as JSON text; the wire counts the strings in ``input``."""
    return sum(len(p.arguments) - wire_chars({"input": json.loads(p.arguments)})
               for m in neutral for p in m.parts if isinstance(p, ToolCall))


@settings(max_examples=150)
@given(histories, st.booleans())
def test_generated_histories_round_trip_count_and_pair(items: list[Any], spaced: bool) -> None:
    """The same JSON back; the wire's char count; every call and result paired once."""
    neutral = [assert_round_trip(item, spaced) for item in items]
    assert history_chars(neutral) == wire_chars(items) + arguments_correction(neutral)
    pairing = tool_pairs(neutral)
    calls = [(i, p.id) for i, m in enumerate(neutral) for p in m.parts
             if isinstance(p, ToolCall)]
    results = [(i, p.call_id) for i, m in enumerate(neutral) for p in m.parts
               if isinstance(p, ToolResult)]
    assert sorted([(c, i) for c, _, i in pairing.pairs] + list(pairing.orphan_calls)) == \
        sorted(calls)
    assert sorted([(r, i) for _, r, i in pairing.pairs] + list(pairing.orphan_results)) == \
        sorted(results)
    assert all(m.role == "tool" for m in neutral for p in m.parts if isinstance(p, ToolResult))


@settings(max_examples=150)
@given(anthropic_message(), st.booleans())
def test_rewritten_parts_leave_every_opaque_byte_and_result_key_alone(
    item: Any, spaced: bool,
) -> None:
    raw = json.dumps(item, indent=1).encode() if spaced else encode(item)
    message = read(raw)
    parts = tuple(
        ToolResult(p.call_id, (Text("[spilled]"),)) if isinstance(p, ToolResult)
        else ToolCall(p.id, p.name, '{"cut": true}', p.wire) if isinstance(p, ToolCall)
        else p for p in message.parts)
    back = ITEMS.write_item(Message(message.role, parts, message.wire))
    for part in parts:
        if isinstance(part, Opaque):
            assert part.raw in back
    if not isinstance(item, dict) or not isinstance(item.get("content"), list) \
            or message.role == "other":
        return
    for before, after in zip(item["content"], decode(back)["content"], strict=True):
        if isinstance(before, dict) and before.get("type") == "tool_result" \
                and isinstance(before.get("tool_use_id"), str):
            assert list(after) == list(before) + (["content"] if "content" not in before
                                                  else [])
            assert {k: v for k, v in after.items() if k != "content"} == \
                {k: v for k, v in before.items() if k != "content"}
        elif isinstance(before, dict) and before.get("type") == "tool_use":
            assert after == {**before, "input": {"cut": True}}


@settings(max_examples=100)
@given(anthropic_message(), anthropic_message())
def test_same_message_same_hash_any_change_another(a: Any, b: Any) -> None:
    first, second = read(encode(a)), read(encode(b))
    assert (content_hash(first) == content_hash(second)) == (encode(a) == encode(b))
