from functools import reduce
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.errors import UsageRejected
from sessionwarden.domain.usage.canonical import CanonicalUsage, normalise_usage
from sessionwarden.domain.usage.stream import (
    RESPONSES_TERMINAL_EVENTS,
    AnthropicStreamUsage,
    chat_chunk_usage,
    responses_event_usage,
)


def fold(events: list[Any]) -> AnthropicStreamUsage:
    return reduce(AnthropicStreamUsage.fold, events, AnthropicStreamUsage())


# Anthropic's streaming docs: the events of a short answer, in order.
ANTHROPIC_STREAM: list[dict[str, Any]] = [
    {"type": "message_start", "message": {
        "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message",
        "role": "assistant", "content": [], "model": "claude-opus-4-6",
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 472, "output_tokens": 2,
                  "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 30000,
                  "cache_creation": {"ephemeral_5m_input_tokens": 1200,
                                     "ephemeral_1h_input_tokens": 0}}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 89, "input_tokens": None, "cache_read_input_tokens": None}},
    {"type": "message_stop"},
]


def test_anthropic_stream_folds_start_and_delta_into_one_block() -> None:
    usage = normalise_usage("anthropic_messages", fold(ANTHROPIC_STREAM).block)
    assert usage == CanonicalUsage(
        source="provider", input_tokens=472, output_tokens=89, cache_read_tokens=30000,
        cache_write_tokens=1200,
    )


def test_later_cumulative_counts_replace_earlier_ones() -> None:
    # With server tools, message_delta restates input and cache counts, cumulatively.
    events = [
        *ANTHROPIC_STREAM[:1],
        {"type": "message_delta", "usage": {"output_tokens": 40, "input_tokens": 900,
                                            "server_tool_use": {"web_search_requests": 1}}},
        {"type": "message_delta", "usage": {
            "output_tokens": 120, "input_tokens": 1500,
            "iterations": [{"type": "compaction", "input_tokens": 160000, "output_tokens": 900},
                           {"type": "message", "input_tokens": 1500, "output_tokens": 120}]}},
    ]
    usage = normalise_usage("anthropic_messages", fold(events).block)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (1500, 120, 30000)
    assert [part.iteration_type for part in usage.billed_parts] == ["compaction", "message"]


def test_folding_is_pure() -> None:
    start = fold(ANTHROPIC_STREAM[:1])
    before = dict(start.block)
    later = start.fold(ANTHROPIC_STREAM[5])
    assert start.block == before and later.block["output_tokens"] == 89
    assert later.block is not start.block
    assert start.fold({"type": "ping"}) is start


def test_no_usage_event_leaves_nothing_and_stays_missing() -> None:
    empty = fold([{"type": "ping"}, "junk", 3, None, {"type": "message_stop"},
                  {"type": "message_start", "message": "x"}, {"type": "message_delta"}])
    assert empty.block is None
    assert normalise_usage("anthropic_messages", empty.block).source == "missing"


def test_a_hostile_usage_piece_stays_and_is_rejected() -> None:
    poisoned = fold([*ANTHROPIC_STREAM[:1], {"type": "message_delta", "usage": [1, 2]},
                     ANTHROPIC_STREAM[5]])
    assert poisoned.block == [1, 2]
    with pytest.raises(UsageRejected):
        normalise_usage("anthropic_messages", poisoned.block)
    negative = fold([*ANTHROPIC_STREAM[:1],
                     {"type": "message_delta", "usage": {"output_tokens": -5}}])
    with pytest.raises(UsageRejected, match="negative"):
        normalise_usage("anthropic_messages", negative.block)


RESPONSES_USAGE = {
    "input_tokens": 139, "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 438, "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 577,
}


@pytest.mark.parametrize("kind", RESPONSES_TERMINAL_EVENTS)
def test_responses_terminal_events_carry_the_usage(kind: str) -> None:
    event = {"type": kind, "sequence_number": 12,
             "response": {"id": "resp_1", "object": "response", "status": "completed",
                          "usage": RESPONSES_USAGE}}
    usage = normalise_usage("codex_responses", responses_event_usage(event))
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (139, 438, 64)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.created", "response": {"usage": None}},
        {"type": "response.in_progress", "response": {"usage": RESPONSES_USAGE}},
        {"type": "response.output_text.delta", "delta": "Hi"},
        {"type": "response.completed", "response": "x"},
        {"type": "response.completed"},
        [1], None, "response.completed",
    ],
)
def test_other_responses_events_carry_none(event: object) -> None:
    assert responses_event_usage(event) is None


def test_chat_chunk_usage() -> None:
    assert chat_chunk_usage({"choices": [], "usage": {"prompt_tokens": 1}}) == {
        "prompt_tokens": 1}
    assert chat_chunk_usage({"choices": [{"delta": {}}], "usage": None}) is None
    assert chat_chunk_usage("data") is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
events = st.one_of(
    json_values,
    st.fixed_dictionaries({"type": st.just("message_start"),
                           "message": st.fixed_dictionaries({"usage": json_values})}),
    st.fixed_dictionaries({"type": st.just("message_delta"), "usage": json_values}),
    st.fixed_dictionaries({"type": st.sampled_from(RESPONSES_TERMINAL_EVENTS),
                           "response": json_values}),
)


@settings(max_examples=80)
@given(st.lists(events, max_size=5))
def test_property_folding_never_raises_and_normalising_only_rejects(seen: list[Any]) -> None:
    folded = fold(seen)
    for event in seen:
        responses_event_usage(event)
        chat_chunk_usage(event)
    try:
        usage = normalise_usage("anthropic_messages", folded.block)
    except UsageRejected:
        return
    assert usage.source in ("provider", "missing")


counts = st.integers(0, 10**6)


@settings(max_examples=60)
@given(start=st.tuples(counts, counts, counts, counts), deltas=st.lists(counts, max_size=4))
def test_property_the_last_cumulative_output_wins(
    start: tuple[int, int, int, int], deltas: list[int]
) -> None:
    uncached, read, written, first = start
    events: list[Any] = [{"type": "message_start", "message": {"usage": {
        "input_tokens": uncached, "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written, "output_tokens": first}}}]
    events += [{"type": "message_delta", "usage": {"output_tokens": n, "input_tokens": None}}
               for n in deltas]
    usage = normalise_usage("anthropic_messages", fold(events).block)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        uncached, read, written)
    assert usage.output_tokens == (deltas[-1] if deltas else first)
