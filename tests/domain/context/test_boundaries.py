from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.context.boundaries import (
    STUB_RESULT,
    BoundarySettings,
    Cut,
    assemble,
    choose_cut,
    is_actionable_request,
    is_assistant_text,
    repair,
    unread_tokens,
)
from sessionwarden.domain.context.messages import (
    NATIVE_COMPACTION,
    Message,
    Opaque,
    Text,
    ToolResult,
    content_hash,
    text_chars,
    tool_pairs,
)
from sessionwarden.upstream.chat_messages import from_neutral, to_neutral

NOTE = "[Note: earlier turns were summarised]"
SUMMARY = "## Goal\nfix the build"


def chars4(message: Message) -> int:
    return text_chars(message) // 4 + 1


def call(call_id: str, name: str = "read", arguments: str = '{"path": "a"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def sys(text: str = "you are an agent") -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def asst(text: str | None, *calls: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def parts(history: Sequence[Message], cut: Cut) -> tuple[list[Message], list[Message]]:
    return list(history[:cut.head_end]), list(history[cut.tail_start:])


def crosses(history: Sequence[Message], boundary: int) -> bool:
    return any(c < boundary <= r for c, r, _ in tool_pairs(history).pairs)


# ------------------------------------------------------------------ where to cut


def test_huge_newest_request_is_kept_verbatim_with_a_small_tail_budget() -> None:
    # Hermes #10896: the token budget alone would summarise the newest request away.
    wire = [sys(), user("start"), asst("ok"), user("step"), asst("done")]
    for k in range(6):
        wire += [asst(None, call(f"c{k}")), tool(f"c{k}", "x" * 400)]
    request = "please refactor everything " * 4000
    newest = len(wire)
    wire += [user(request), asst(None, call("l1")), tool("l1", "y" * 4000),
             asst(None, call("l2")), tool("l2", "y" * 4000), asst("on it")]
    history = to_neutral(wire)
    cut = choose_cut(history, BoundarySettings(tail_budget_tokens=50, min_tail_messages=1),
                     chars4)
    # In the tail, and not its first message (bridged back to the tool group before it).
    assert cut == Cut(4, newest - 2)
    assert history[newest].parts == (Text(request),)
    head, tail = parts(history, cut)
    out = assemble(head, SUMMARY, tail, NOTE)
    assert content_hash(history[newest]) in {content_hash(m) for m in out}


def test_tail_start_moves_back_to_the_assistant_that_made_the_calls() -> None:
    wire = [sys(), user("task"), asst(None, call("q")), tool("q", "r"),
            asst(None, call("p1"), call("p2"), call("p3")),
            tool("p1", "1" * 400), tool("p2", "2" * 400), tool("p3", "3" * 400),
            asst("all read")]
    history = to_neutral(wire)
    # The budget takes the final text and the last result: the cut falls inside the group.
    cut = choose_cut(history, BoundarySettings(protect_first_n=1, tail_budget_tokens=110,
                                               ceiling_factor=1.0, min_tail_messages=1),
                     chars4)
    assert cut == Cut(2, 4)
    assert not crosses(history, cut.tail_start)


def test_head_is_extended_past_the_results_of_its_calls() -> None:
    wire = [sys(), user("go"), asst(None, call("h1"), call("h2")), tool("h1", "r"),
            tool("h2", "r"), asst("x"), user("y"), asst("z"), user("w"), asst("v")]
    history = to_neutral(wire)
    cut = choose_cut(history, BoundarySettings(protect_first_n=2, tail_budget_tokens=1,
                                               min_tail_messages=1), chars4)
    assert cut == Cut(5, 7)  # anchors 8 and 9, bridged back to 7


def test_second_walk_on_the_plain_budget_when_everything_fits_the_ceiling() -> None:
    # Hermes #40803: with the 1.5x ceiling everything fits and nothing would be compressed.
    wire = [sys(), user("u" * 40), asst("a" * 40), user("u" * 40), asst("a" * 40),
            user("u" * 40), asst("a" * 40), user("now"), asst("ok")]
    history = to_neutral(wire)
    assert sum(chars4(m) for m in history[4:]) == 35
    rules = BoundarySettings(tail_budget_tokens=30, min_tail_messages=1)
    assert choose_cut(history, rules, chars4) == Cut(4, 5)
    # Even the plain budget takes everything: the tail is the minimum, then anchored.
    roomy = BoundarySettings(tail_budget_tokens=100, min_tail_messages=1)
    assert choose_cut(history, roomy, chars4) == Cut(4, 6)


def test_nothing_to_compress_is_reported() -> None:
    history = to_neutral([sys(), user("hi"), asst("hello"), user("and?"), asst("so")])
    cut = choose_cut(history, BoundarySettings(), chars4)
    assert cut.empty
    assert choose_cut([], BoundarySettings(), chars4).empty


def test_what_counts_as_a_request_and_as_assistant_text() -> None:
    blank, image, results = to_neutral([
        user("  \n"),
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        user("real"),
    ])
    assert not is_actionable_request(blank)
    assert is_actionable_request(image)
    assert not is_actionable_request(results, is_summary=lambda m: True)
    anthropic_style = Message("user", (ToolResult("c", (Text("out"),)),))
    assert not is_actionable_request(anthropic_style)
    calls_only, spoken = to_neutral([asst(None, call("c")), asst("hi", call("d"))])
    assert not is_assistant_text(calls_only)
    assert is_assistant_text(spoken)


def test_a_summary_is_not_the_newest_request() -> None:
    wire = [sys(), user("task"), asst("a"), user("b"), asst(None, call("x")), tool("x", "r"),
            asst(None, call("y")), tool("y", "r"), user(SUMMARY)]
    for k in range(5):
        wire += [asst(None, call(f"k{k}")), tool(f"k{k}", "r" * 400)]
    wire.append(asst("done"))
    history = to_neutral(wire)
    rules = BoundarySettings(tail_budget_tokens=10, min_tail_messages=1)
    assert choose_cut(history, rules, chars4) == Cut(4, 6)
    aware = choose_cut(history, rules, chars4, is_summary=lambda m: m.parts == (Text(SUMMARY),))
    assert aware == Cut(4, 17)


# ------------------------------------------------------------------ assembly


def test_summary_after_system_head_is_a_user_message() -> None:
    head = to_neutral([sys()])
    tail = to_neutral([asst("done"), user("next")])
    out = assemble(head, SUMMARY, tail, NOTE)
    assert [m.role for m in out] == ["system", "system", "user", "assistant", "user"]
    assert out[1].parts == (Text(NOTE),) and out[2].parts == (Text(SUMMARY),)
    assert out[0] is head[0] and out[3:] == tail


def test_summary_between_user_and_user_is_an_assistant_message() -> None:
    # The note between them does not count: the summary still follows the user's turn.
    head = to_neutral([sys(), user("a")])
    out = assemble(head, SUMMARY, to_neutral([user("b")]), NOTE)
    assert [m.role for m in out] == ["system", "user", "system", "assistant", "user"]
    assert out[:2] == head and out[2].parts == (Text(NOTE),)


def test_summary_after_tool_results_before_a_user_is_an_assistant_message() -> None:
    head = to_neutral([sys(), user("a"), asst(None, call("c")), tool("c", "r")])
    out = assemble(head, SUMMARY, to_neutral([user("b")]), NOTE)
    assert [m.role for m in out][-2:] == ["assistant", "user"]


def test_summary_is_merged_into_the_first_tail_message_when_both_roles_collide() -> None:
    head = to_neutral([sys(), user("a"), asst("b")])
    tail = to_neutral([user("c"), asst("d")])
    out = assemble(head, SUMMARY, tail, NOTE)
    assert [m.role for m in out] == ["system", "user", "assistant", "system", "user",
                                     "assistant"]
    assert out[:3] == head and out[3].parts == (Text(NOTE),)
    assert out[4].parts == (Text(SUMMARY + "\n\n"), Text("c"))
    assert from_neutral(out)[4] == {"role": "user", "content": SUMMARY + "\n\nc"}


def test_forced_user_summary_merges_into_a_leading_user_tail() -> None:
    out = assemble([], SUMMARY, to_neutral([user("c"), asst("d")]), NOTE)
    assert [m.role for m in out] == ["system", "user", "assistant"]
    assert out[1].parts[0] == Text(SUMMARY + "\n\n")


def test_summary_is_a_user_message_when_no_user_message_survives() -> None:
    # Hermes #58753: a history without any user turn is refused by some providers.
    head = to_neutral([sys()])
    tail = to_neutral([asst(None, call("c")), tool("c", "r")])
    out = assemble(head, SUMMARY, tail, NOTE)
    assert [m.role for m in out] == ["system", "system", "user", "assistant", "tool"]


def test_the_head_comes_first_as_it_was_then_the_note_and_the_summary() -> None:
    # Issue 23: what was forwarded before the cut stays a byte prefix (prompt cache).
    head = to_neutral([sys(), user("a"), asst(None, call("c")), tool("c", "r")])
    tail = to_neutral([user("b"), asst("d")])
    out = assemble(head, SUMMARY, tail, NOTE)
    assert all(ours is theirs for ours, theirs in zip(out, head, strict=False))
    assert [m.role for m in out[4:]] == ["system", "assistant", "user", "assistant"]
    assert out[4].parts == (Text(NOTE),) and out[5].parts == (Text(SUMMARY),)
    assert out[6:] == tail


def test_a_head_ending_with_a_user_turn_gets_its_summary_merged_into_an_assistant_tail() -> None:
    # user, note, user would be two user turns on a wire that folds the note away.
    head = to_neutral([user("a")])
    out = assemble(head, SUMMARY, to_neutral([asst("b"), user("c")]), NOTE)
    assert [m.role for m in out] == ["user", "system", "assistant", "user"]
    assert out[0] is head[0]
    assert out[2].parts == (Text(SUMMARY + "\n\n"), Text("b"))


def test_system_messages_at_the_tail_start_do_not_separate_the_summary_from_a_turn() -> None:
    head = to_neutral([sys(), user("a"), asst("b")])
    tail = to_neutral([sys("a reminder"), user("c"), asst("d")])
    out = assemble(head, SUMMARY, tail, NOTE)
    assert [m.role for m in out] == ["system", "user", "assistant", "system", "system",
                                     "user", "assistant"]
    assert out[:3] == head and out[4] is tail[0]
    assert out[5].parts == (Text(SUMMARY + "\n\n"), Text("c"))
    # The bridge rule sees the same message: a newest request there moves the cut back.
    history = to_neutral([sys(), user("task"), asst("x" * 400), user("y" * 400),
                          asst("z" * 400), sys("a reminder"), user("now"), asst("ok")])
    cut = choose_cut(history, BoundarySettings(protect_first_n=1, tail_budget_tokens=1,
                                               min_tail_messages=1), chars4)
    assert cut == Cut(2, 4)  # not 5: the merge would have gone into "now"


def test_the_note_is_added_once() -> None:
    head = to_neutral([sys()])
    first = assemble(head, SUMMARY, to_neutral([asst("x")]), NOTE)
    again = assemble(first[:2], SUMMARY, to_neutral([asst("y")]), NOTE)
    assert sum(m.parts == (Text(NOTE),) for m in again) == 1


# ------------------------------------------------------------------ repair


def test_repair_stubs_unanswered_calls_after_the_existing_results() -> None:
    history = to_neutral([user("go"), asst(None, call("a"), call("b"), call("c")),
                          tool("b", "rb"), user("stop")])
    out = repair(history)
    assert [m.role for m in out] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert out[2] is history[2]
    assert tool_pairs(out).complete
    rendered = from_neutral(out)
    assert rendered[3] == {"role": "tool", "tool_call_id": "a", "name": "read",
                           "content": STUB_RESULT}
    assert rendered[4]["tool_call_id"] == "c"


def test_repair_drops_results_that_answer_no_call() -> None:
    history = to_neutral([user("go"), tool("ghost", "r"), asst("x", call("a")),
                          tool("a", "ra"), tool("a", "again")])
    out = repair(history)
    assert out == [history[0], history[2], history[3]]
    assert repair(out) == out


# ------------------------------------------------------------------ properties


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = [sys(f"system {k}") for k in range(draw(st.integers(0, 2)))]
    text = st.sampled_from(["", " ", "ok", "x" * 50, "y" * 900, "z" * 5000])
    ids = 0
    for _ in range(draw(st.integers(0, 24))):
        kind = draw(st.sampled_from(["user", "user", "image", "assistant", "calls", "calls",
                                     "orphan", "null"]))
        if kind == "user":
            wire.append(user(draw(text)))
        elif kind == "image":
            wire.append({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:x"}}]})
        elif kind == "assistant":
            wire.append(asst(draw(text)))
        elif kind == "null":
            wire.append({"role": "assistant", "content": None})
        elif kind == "orphan":
            wire.append(tool("nobody", draw(text)))
        else:
            count = draw(st.integers(1, 3))
            made = [f"id{ids + k}" for k in range(count)]
            ids += count
            wire.append(asst(draw(st.sampled_from([None, "", "calling"])),
                             *(call(i, arguments=draw(text)) for i in made)))
            answered = draw(st.lists(st.sampled_from(made), unique=True, max_size=count))
            wire += [tool(i, draw(text)) for i in answered]  # aborted: some never answered
    return wire


boundary_settings = st.builds(
    BoundarySettings, protect_first_n=st.integers(0, 4),
    tail_budget_tokens=st.integers(0, 3000), min_tail_messages=st.integers(0, 5),
    ceiling_factor=st.sampled_from([1.0, 1.5, 2.0]))


def orphan_results(messages: Sequence[Message]) -> set[int]:
    return {index for index, _ in tool_pairs(messages).orphan_results}


@settings(max_examples=250, deadline=None)
@given(histories(), boundary_settings)
def test_cut_and_assembly_properties(wire: list[dict[str, Any]],
                                     rules: BoundarySettings) -> None:
    history = to_neutral(wire)
    cut = choose_cut(history, rules, chars4)
    assert 0 <= cut.head_end <= cut.tail_start <= len(history)
    assert not crosses(history, cut.head_end) and not crosses(history, cut.tail_start)
    head, tail = parts(history, cut)
    tail_hashes = {content_hash(m) for m in tail}
    anchors = []
    for test in (is_actionable_request, is_assistant_text):
        newest = max((i for i, m in enumerate(history) if test(m)), default=None)
        if newest is None:
            continue
        anchors.append(history[newest])
        assert not cut.head_end <= newest < cut.tail_start  # never in the middle
        if newest >= cut.head_end and not cut.empty:
            assert content_hash(history[newest]) in tail_hashes
            assert newest != cut.tail_start
    if cut.empty:
        return

    out = assemble(head, SUMMARY, tail, NOTE)
    assert tool_pairs(out).complete
    from_neutral(out)  # accepted by the chat-completions adapter (raises otherwise)
    inputs = {id(m) for m in history}
    merged = {id(m) for m in out
              if m.parts[:1] == (Text(SUMMARY + "\n\n"),) and id(m) not in inputs}
    # System messages do not separate turns (a wire may fold them away).
    for left, right in pairwise(m for m in out if m.role != "system"):
        if left.role == right.role and left.role in ("user", "assistant"):
            # Only the client's own adjacency survives; assembly never creates one.
            assert {id(left), id(right)} <= inputs | merged
    if tool_pairs(head).complete:  # nothing of the client's to repair in the head
        # The head comes first, as it was: the cached prefix survives (issue 23).
        assert len(out) > len(head)
        assert all(ours is theirs for ours, theirs in zip(out, head, strict=False))
    assert sum(m.role == "system" and m.parts == (Text(NOTE),) for m in out) == 1
    out_hashes = {content_hash(m) for m in out}
    for anchor in anchors:
        assert content_hash(anchor) in out_hashes

    # Head and tail unchanged: take away what assembly added, the merged summary part
    # and the client's orphan results.
    kept: list[Message] = []
    summaries = 0
    for message in out:
        if message.parts == (Text(NOTE),) or (message.role == "tool" and id(message)
                                               not in inputs):
            continue
        if message.parts == (Text(SUMMARY),) and id(message) not in inputs:
            summaries += 1
            continue
        if message.parts[:1] == (Text(SUMMARY + "\n\n"),) and id(message) not in inputs:
            summaries += 1
            message = Message(message.role, message.parts[1:], message.wire)
        kept.append(message)
    assert summaries == 1
    expected = [m for i, m in enumerate(head) if i not in orphan_results(head)]
    expected += [m for i, m in enumerate(tail) if i not in orphan_results(tail)]
    assert [content_hash(m) for m in kept] == [content_hash(m) for m in expected]


@settings(max_examples=100, deadline=None)
@given(histories(), boundary_settings)
def test_a_given_pairing_cuts_as_the_one_computed(wire: list[dict[str, Any]],
                                                  rules: BoundarySettings) -> None:
    history = to_neutral(wire)
    assert choose_cut(history, rules, chars4, pairing=tool_pairs(history)) == choose_cut(
        history, rules, chars4)


def test_a_native_compaction_and_all_before_it_stay_in_the_head() -> None:
    # The provider's own summary stands for what precedes it: the daemon compacts after it.
    block = Opaque(NATIVE_COMPACTION, b'{"type":"compaction","content":"earlier work"}', 12)
    wire = [sys(), user("go"), asst("a" * 80), user("more"), asst("b" * 80)]
    history = to_neutral(wire)
    history.insert(3, Message("assistant", (block,)))
    history += to_neutral([user("u" * 80), asst("c" * 80), user("now"), asst("ok")])
    rules = BoundarySettings(protect_first_n=0, tail_budget_tokens=1, min_tail_messages=1)
    cut = choose_cut(history, rules, chars4)
    assert cut.head_end == 4  # through the compaction block
    assert not cut.empty and cut.tail_start == 7  # the anchors, bridged back
    # A compaction block in the newest messages leaves nothing to compress.
    history.insert(8, Message("assistant", (block,)))
    assert choose_cut(history, rules, chars4).empty


def test_the_provider_reads_from_its_newest_compaction_on() -> None:
    block = Opaque(NATIVE_COMPACTION, b'{"type":"compaction","content":"x"}', 1)
    read = {b"plain": Message("user", (Text("plain"),)),
            b"compaction": Message("assistant", (block,)),
            b"says compaction": Message("user", (Text("says compaction"),))}
    tokens = [10, 20, 30, 40, 50]
    assert unread_tokens([b"plain"] * 5, tokens, read.__getitem__) == 0
    items = [b"plain", b"compaction", b"plain", b"compaction", b"says compaction"]
    # the newest compaction counts; a message that only names the word does not
    assert unread_tokens(items, tokens, read.__getitem__) == 10 + 20 + 30
    assert unread_tokens([b"compaction", b"plain"], [5, 6], read.__getitem__) == 0
    assert unread_tokens([b"says compaction"], [5], read.__getitem__) == 0
    assert unread_tokens([], [], read.__getitem__) == 0
