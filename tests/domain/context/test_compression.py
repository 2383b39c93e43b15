"""One compression of a governed history: its phases put together (domain.context.compression)."""

from itertools import pairwise
from typing import Any

import msgspec
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
    assert out[0].role == "system" and out[0].parts == (Text(NOTE),)
    assert content_hash(out[1]) == content_hash(CODEC.read_item(raws[0]))  # type: ignore[arg-type]
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
