"""One compression of a governed history: its phases put together (domain.context.compression)."""

from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from sessionwarden.config import CompressionConfig
from sessionwarden.domain.context.boundaries import is_actionable_request, is_assistant_text
from sessionwarden.domain.context.compression import NOTE, builtin, is_summary, prepare, tokens_of
from sessionwarden.domain.context.history import GovernedHistory, Item, digest
from sessionwarden.domain.context.messages import (
    Message,
    Text,
    content_hash,
    tool_calls,
    tool_pairs,
)
from sessionwarden.domain.context.summary import SUMMARY_START, covered_turns, summary_end
from sessionwarden.upstream.chat_completions import ChatItems

from tests.cmd.test_context_e2e import agent_session, check_forwarded
from tests.domain.context.test_boundaries import asst, call, histories, tool, user

CODEC = ChatItems()
_encode = msgspec.json.encode


def governed(wire: list[dict[str, Any]]) -> tuple[GovernedHistory, list[bytes]]:
    raws = [_encode(m) for m in wire]
    items = []
    for index, raw in enumerate(raws):
        read = CODEC.read_item(raw)
        assert not isinstance(read, str)
        items.append(Item(digest(raw), len(raw), tokens_of(read), None, index))
    return GovernedHistory(client=tuple(digest(r) for r in raws), items=tuple(items),
                           tokens=sum(i.tokens for i in items)), raws


def decoded(history: GovernedHistory, raws: list[bytes]) -> list[Message]:
    out = []
    for raw in history.forwarded(raws):
        read = CODEC.read_item(raw)
        assert not isinstance(read, str)
        out.append(read)
    return out


def test_a_long_run_after_one_ask_is_summarised_with_the_ask_kept_verbatim() -> None:
    ask = user("Fix the build; do not touch the database schema.")
    wire: list[dict[str, Any]] = [ask]
    for n in range(40):
        wire += [asst(None, call(f"c{n}", "terminal", '{"cmd": "make"}')),
                 tool(f"c{n}", f"step {n}\n" + "output line\n" * 60)]
    history, raws = governed(wire)
    compression = CompressionConfig(protect_first_n=0)
    prepared = prepare(history, raws, CODEC, compression, threshold=8_000)
    assert prepared is not None and len(prepared.middle) > 40
    done = builtin(prepared, CODEC, 8_000)
    assert done is not None and done.history.tokens < history.tokens * 0.5
    out = decoded(done.history, raws)
    # The ask, pinned after the (empty) head, then the note: the ask was the first item
    # forwarded, so it still is.
    assert done.history.items[0] is history.items[0]
    assert content_hash(out[0]) == content_hash(CODEC.read_item(raws[0]))  # type: ignore[arg-type]
    assert out[1].role == "system" and out[1].parts == (Text(NOTE),)
    assert tool_pairs(out).complete
    assert done.history.client == history.client and done.history.compressed == 1
    # The tail's items are the very items forwarded before: their bytes come from the
    # client's request, unchanged.
    assert done.history.items[-1] is history.items[-1]


def test_a_compression_that_saves_too_little_is_not_made() -> None:
    wire = [user("a" * 50), asst("b" * 50), user("c" * 50), asst("d" * 50),
            user("e" * 50), asst("f" * 50)]
    history, raws = governed(wire)
    prepared = prepare(history, raws, CODEC, CompressionConfig(protect_first_n=0),
                       threshold=64_000)
    assert prepared is None or builtin(prepared, CODEC, 64_000) is None


@settings(max_examples=80, deadline=None)
@given(histories())
def test_every_compression_keeps_pairs_the_newest_request_and_text(
    wire: list[dict[str, Any]]
) -> None:
    # System items are not part of a governed history: the request supplies them.
    wire = [m for m in wire if m["role"] != "system"]
    history, raws = governed(wire)
    before = decoded(history, raws)
    prepared = prepare(history, raws, CODEC, CompressionConfig(), threshold=2_000)
    if prepared is None:
        return
    done = builtin(prepared, CODEC, 2_000)
    if done is None:
        return
    out = decoded(done.history, raws)
    assert tool_pairs(out).complete
    hashes = {content_hash(m) for m in out}
    for test in (is_actionable_request, is_assistant_text):
        newest = next((m for m in reversed(before) if test(m)), None)
        if newest is not None:
            assert content_hash(newest) in hashes
    assert sum(m.parts == (Text(NOTE),) for m in out) == 1
    # The prefix before the cut: every head item phase 1 left alone keeps its place and
    # its bytes (a head with the client's own orphans is repaired instead).
    k = len(prepared.head) - prepared.pinned
    if tool_pairs(prepared.messages[:k]).complete:
        for index in range(k):
            if prepared.head[index] is prepared.messages[index]:
                assert done.history.items[index] == history.items[index]
        if prepared.pruned == 0:
            assert done.history.forwarded(raws)[:k] == history.forwarded(raws)[:k]
    originals = {content_hash(m) for m in before}
    for left, right in pairwise(out):
        if left.role == right.role == "user":
            # Only the client's own adjacency survives (one of the two may carry the
            # summary merged in): compression never creates one.
            for message in (left, right):
                assert content_hash(message) in originals or is_summary(message)


def test_the_summary_says_how_many_steps_it_covers_and_reads_no_earlier_one_as_an_ask() -> None:
    ask = user("Fix the build; do not touch the database schema.")
    wire: list[dict[str, Any]] = [ask]
    for n in range(40):
        wire += [asst(None, call(f"c{n}", "terminal", '{"cmd": "make"}')),
                 tool(f"c{n}", f"step {n}\n" + "output line\n" * 60)]
    history, raws = governed(wire)
    compression = CompressionConfig(protect_first_n=1)
    first = builtin(prepare(history, raws, CODEC, compression, 8_000), CODEC, 8_000)  # type: ignore[arg-type]
    assert first is not None
    [summary] = [m for m in decoded(first.history, raws) if is_summary(m)]
    text = summary.parts[0].text  # type: ignore[union-attr]
    steps_kept = sum(1 for m in decoded(first.history, raws) if tool_calls(m))
    assert covered_turns(text) == 40 - steps_kept and steps_kept < 20
    assert "not a new request" in text
    # Forty more steps, compressed again: the earlier summary is merged, not read as the
    # user's words, and the steps add up.
    for n in range(40, 80):
        wire += [asst(None, call(f"c{n}", "terminal", '{"cmd": "make"}')),
                 tool(f"c{n}", f"step {n}\n" + "output line\n" * 60)]
    more = [_encode(m) for m in wire[len(raws):]]
    grown = GovernedHistory(
        client=(*first.history.client, *(digest(r) for r in more)),
        items=(*first.history.items, *(Item(digest(r), len(r), 700, None, len(raws) + i)
                                       for i, r in enumerate(more))),
        tokens=first.history.tokens + 700 * len(more), compressed=1,
        summary=first.history.summary)
    second = builtin(prepare(grown, [*raws, *more], CODEC, compression, 8_000),  # type: ignore[arg-type]
                     CODEC, 8_000)
    assert second is not None
    out = decoded(second.history, [*raws, *more])
    [summary] = [m for m in out if is_summary(m)]
    text = summary.parts[0].text  # type: ignore[union-attr]
    assert text.count(SUMMARY_START) == 1  # the earlier one is not quoted as an ask
    steps_kept = sum(1 for m in out if tool_calls(m))
    assert covered_turns(text) == 80 - steps_kept
    assert text.rstrip().endswith(summary_end(80 - steps_kept))


def _grown(history: GovernedHistory, raws: list[bytes], wire: list[dict[str, Any]]
           ) -> tuple[GovernedHistory, list[bytes]]:
    """``history`` after a call that resent ``wire``: its new items appended, as governed."""
    more = [_encode(m) for m in wire[len(raws):]]
    items = []
    for index, raw in enumerate(more, start=len(raws)):
        read = CODEC.read_item(raw)
        assert not isinstance(read, str)
        items.append(Item(digest(raw), len(raw), tokens_of(read), None, index))
    return history._replace(
        client=(*history.client, *(digest(r) for r in more)),
        items=(*history.items, *items),
        tokens=history.tokens + sum(i.tokens for i in items)), [*raws, *more]


@pytest.mark.parametrize("protect_first_n", [1, 3, 6])
def test_a_compaction_keeps_the_prefix_before_its_cut_byte_for_byte(
    protect_first_n: int
) -> None:
    # Issue 23: the compacted history's first k items (k: the head's length) are the
    # very bytes forwarded before at those places, so the provider's prompt cache keeps
    # hitting on them at the call that compacts. A realistic agent's session, governed
    # call by call and compacted whenever it is over its trigger.
    threshold = 3_000
    compression = CompressionConfig(protect_first_n=protect_first_n)
    history, raws = GovernedHistory(), []
    heads = []
    for wire in agent_session(60):
        history, raws = _grown(history, raws, [m for m in wire if m["role"] != "system"])
        if history.tokens <= threshold:
            continue
        prepared = prepare(history, raws, CODEC, compression, threshold)
        done = builtin(prepared, CODEC, threshold) if prepared is not None else None
        if prepared is None or done is None:
            continue
        k = len(prepared.head) - prepared.pinned
        before, after = history.forwarded(raws), done.history.forwarded(raws)
        assert prepared.pruned == 0  # the task and a first turn: within the tail's budget
        assert after[:k] == before[:k]
        sent = [msgspec.json.decode(raw) for raw in after]
        check_forwarded(sent)
        note = {"role": "system", "content": NOTE}
        # After the head (and the anchors pinned after it), unless the head holds it.
        assert sent[k + prepared.pinned] == note or note in sent[:k]
        assert sent.count(note) == 1
        heads.append(k)
        history = done.history
    # The first compaction protects the head; the later ones summarise it (Hermes
    # #11996): their prefix is what their cut keeps (the note, when they start with it).
    assert len(heads) > 3 and heads[0] >= protect_first_n


def test_a_head_over_the_tails_budget_is_pruned_up_to_its_first_long_result() -> None:
    # A first turn that read a large file: the window room is worth more than the cache
    # hit on it, so phase 1 prunes the head; the items before the result keep their bytes.
    wire: list[dict[str, Any]] = [
        user("Read the spec, then fix the build."),
        asst(None, call("spec", "read_file", '{"path": "SPEC.md"}')),
        tool("spec", "spec line\n" * 1_500)]
    for n in range(40):
        wire += [asst(None, call(f"c{n}", "terminal", '{"cmd": "make"}')),
                 tool(f"c{n}", f"step {n}\n" + "output line\n" * 60)]
        if n == 30:
            wire += [asst("The spec is read; the build fails in step 30."),
                     user("Go on.")]
    history, raws = governed(wire)
    prepared = prepare(history, raws, CODEC, CompressionConfig(), threshold=8_000)
    assert prepared is not None and prepared.pruned == 1 and len(prepared.head) == 3
    done = builtin(prepared, CODEC, 8_000)
    assert done is not None
    assert done.history.items[:2] == history.items[:2]
    assert done.history.items[2] != history.items[2]
    assert "[read_file] SPEC.md" in done.history.forwarded(raws)[2].decode()
