"""The wire-neutral message model: hashes, character counts, tool pairing."""

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.messages import (
    Message,
    Opaque,
    Part,
    Text,
    ToolCall,
    ToolPairing,
    ToolResult,
    content_hash,
    history_chars,
    text_chars,
    tool_calls,
    tool_pairs,
    tool_results,
)


def call(call_id: str, name: str = "f", arguments: str = "{}") -> Message:
    return Message("assistant", (ToolCall(call_id, name, arguments),))


def result(call_id: str, text: str = "ok") -> Message:
    return Message("tool", (ToolResult(call_id, (Text(text),)),))


# ------------------------------------------------------------------ hashes


def test_hash_is_pinned_across_processes() -> None:
    """A hash recorded by one daemon is recognised by the next: no salt, a fixed encoding.

    If this fails, the encoding changed: bump HASH_VERSION (recorded hashes stop matching).
    """
    message = Message("user", (Text("hello"),))
    assert content_hash(message) == (
        "597cbb19ea2115939cacd9146833137e26d2458d642f3c175f5c34ecb039b114")


def test_every_field_changes_the_hash() -> None:
    base = Message("assistant", (Text("a"), ToolCall("c1", "f", "{}"),
                                 Opaque("field:x", b'"y"', 1)), b"[1]")
    variants = [
        Message("user", base.parts, base.wire),
        Message("assistant", (Text("b"), *base.parts[1:]), base.wire),
        Message("assistant", (Text("a", b"{}"), *base.parts[1:]), base.wire),
        Message("assistant", (Text("a"), ToolCall("c2", "f", "{}"), base.parts[2]), base.wire),
        Message("assistant", (Text("a"), ToolCall("c1", "g", "{}"), base.parts[2]), base.wire),
        Message("assistant", (Text("a"), ToolCall("c1", "f", "{ }"), base.parts[2]), base.wire),
        Message("assistant", (*base.parts[:2], Opaque("field:z", b'"y"', 1)), base.wire),
        Message("assistant", (*base.parts[:2], Opaque("field:x", b'"Y"', 1)), base.wire),
        Message("assistant", tuple(reversed(base.parts)), base.wire),
        Message("assistant", base.parts[:2], base.wire),
        Message("assistant", base.parts, b"[2]"),
        Message("assistant", base.parts),
    ]
    hashes = {content_hash(m) for m in variants}
    assert content_hash(base) not in hashes
    assert len(hashes) == len(variants)


def test_text_and_result_with_the_same_words_differ() -> None:
    assert content_hash(Message("tool", (Text("x"),))) != content_hash(result("", "x"))
    assert content_hash(result("a", "x")) != content_hash(
        Message("tool", (ToolResult("a", (Text("x"),), "f"),)))


texts = st.text(max_size=6, alphabet="ab{}\"\\é\n")
result_parts = st.one_of(
    st.builds(Text, texts, st.sampled_from([b"", b'{"k":1}'])),
    st.builds(Opaque, st.sampled_from(["image_url", "field:refusal"]),
              st.binary(max_size=4), st.integers(0, 3)),
)
parts: st.SearchStrategy[Part] = st.one_of(
    result_parts,
    st.builds(ToolCall, texts, texts, texts, st.sampled_from([b"", b"{}"])),
    st.builds(ToolResult, texts, st.lists(result_parts, max_size=2).map(tuple),
              st.none() | texts),
)
messages = st.builds(
    Message, st.sampled_from(["system", "user", "assistant", "tool", "other"]),
    st.lists(parts, max_size=3).map(tuple), st.sampled_from([b"", b"[]", b'["x"]']),
)


@settings(max_examples=150)
@given(messages, messages)
def test_hash_equal_exactly_when_the_messages_are(a: Message, b: Message) -> None:
    assert (content_hash(a) == content_hash(b)) == (a == b)


@given(messages)
def test_the_model_survives_msgspec(message: Message) -> None:
    """Neutral messages can be stored and read back (tagged parts decode to their type)."""
    for codec in (msgspec.json, msgspec.msgpack):
        back = codec.decode(codec.encode(message), type=Message)
        assert back == message
        assert content_hash(back) == content_hash(message)


# ------------------------------------------------------------------ character counts


def test_text_chars_counts_what_the_model_reads() -> None:
    message = Message("assistant", (
        Text("four"),
        ToolCall("id-not-counted", "name_not_counted", '{"a":1}'),
        ToolResult("x", (Text("12"), Opaque("image_url", b'{"url":"data:..."}', 0))),
        Opaque("field:reasoning_content", b'"abc"', 3),
    ))
    assert text_chars(message) == 4 + 7 + 2 + 0 + 3
    assert text_chars(Message("user")) == 0
    assert history_chars([message, Message("user", (Text("xy"),))]) == 18


# ------------------------------------------------------------------ pairing


def test_parallel_calls_pair_with_their_results_in_any_order() -> None:
    history = [
        Message("user", (Text("go"),)),
        Message("assistant", (Text("two at once"), ToolCall("a", "f", "{}"),
                              ToolCall("b", "g", "{}"))),
        result("b"), result("a"),
    ]
    pairing = tool_pairs(history)
    assert pairing == ToolPairing(pairs=((1, 2, "b"), (1, 3, "a")))
    assert pairing.complete


def test_orphans_on_both_sides() -> None:
    history = [result("early"), call("a"), call("aborted"), result("a"), result("a"),
               result("stranger")]
    pairing = tool_pairs(history)
    assert pairing.pairs == ((1, 3, "a"),)
    assert pairing.orphan_calls == ((2, "aborted"),)
    assert pairing.orphan_results == ((0, "early"), (4, "a"), (5, "stranger"))
    assert not pairing.complete


def test_a_reused_id_pairs_oldest_first() -> None:
    history = [call("x"), call("x"), result("x"), result("x")]
    assert tool_pairs(history).pairs == ((0, 2, "x"), (1, 3, "x"))


def test_legacy_calls_without_ids_pair_in_order() -> None:
    history = [call(""), result(""), call(""), result(""), call("")]
    pairing = tool_pairs(history)
    assert pairing.pairs == ((0, 1, ""), (2, 3, ""))
    assert pairing.orphan_calls == ((4, ""),)


def test_accessors() -> None:
    message = Message("assistant", (ToolCall("a", "f", ""), Text("t"), ToolCall("b", "g", "")))
    assert [c.id for c in tool_calls(message)] == ["a", "b"]
    assert tool_results(message) == ()
    assert tool_results(result("z"))[0].call_id == "z"


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Message], set[tuple[int, int, str]],
                                        set[tuple[int, str]], set[tuple[int, str]]]:
    """A tool-heavy history and the pairing it was built with.

    Turns of parallel calls (unique ids) whose results come back in any order, some
    never (aborted calls), plus stray results whose id no call has.
    """
    history: list[Message] = [Message("user", (Text("task"),))]
    pairs: set[tuple[int, int, str]] = set()
    open_calls: set[tuple[int, str]] = set()
    strays: set[tuple[int, str]] = set()
    for turn in range(draw(st.integers(0, 5))):
        ids = [f"call_{turn}_{n}" for n in range(draw(st.integers(1, 4)))]
        at = len(history)
        history.append(Message("assistant", tuple(ToolCall(i, "t", "{}") for i in ids)))
        answered = draw(st.permutations(ids))[: draw(st.integers(0, len(ids)))]
        for call_id in ids:
            if call_id not in answered:
                open_calls.add((at, call_id))
        for call_id in answered:
            if draw(st.booleans()):
                strays.add((len(history), f"stray_{len(history)}"))
                history.append(result(f"stray_{len(history)}"))
            pairs.add((at, len(history), call_id))
            history.append(result(call_id))
        if draw(st.booleans()):
            history.append(Message("user", (Text(""),)))
    return history, pairs, open_calls, strays


@settings(max_examples=200)
@given(histories())
def test_pairing_on_generated_histories(
    case: tuple[list[Message], set[tuple[int, int, str]], set[tuple[int, str]],
                set[tuple[int, str]]],
) -> None:
    history, pairs, open_calls, strays = case
    pairing = tool_pairs(history)
    assert set(pairing.pairs) == pairs and len(pairing.pairs) == len(pairs)
    assert set(pairing.orphan_calls) == open_calls
    assert set(pairing.orphan_results) == strays
    assert pairing.complete == (not open_calls and not strays)
    for call_index, result_index, _ in pairing.pairs:
        assert call_index < result_index
