import math
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import API_MODES, ApiMode
from sessionwarden.domain.errors import DomainError, UsageRejected
from sessionwarden.domain.usage.canonical import (
    FLAG_CACHE_EXCEEDS_INPUT,
    FLAG_CACHE_SPLIT_MISMATCH,
    FLAG_INCOMPLETE,
    FLAG_ITERATIONS,
    FLAG_PROMPT_PARTS_MISMATCH,
    FLAG_REASONING_EXCEEDS_OUTPUT,
    MAX_ITERATIONS,
    MAX_REPORTED_COST,
    MAX_TOKENS_PER_FIELD,
    CanonicalUsage,
    estimate_tokens,
    estimate_usage,
    normalise_usage,
)
from sessionwarden.errors import SessionwardenError

# ------------------------------------------------------------------ the three shapes


def test_openai_chat_subtracts_cached_from_prompt() -> None:
    usage = normalise_usage(
        "chat_completions",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 200,
            "total_tokens": 1200,
            "prompt_tokens_details": {"cached_tokens": 800, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 50},
        },
    )
    assert usage == CanonicalUsage(
        source="provider",
        input_tokens=200,
        output_tokens=200,
        cache_read_tokens=800,
        reasoning_tokens=50,
    )
    assert usage.prompt_tokens == 1000
    assert usage.total_tokens == 1200


def test_anthropic_input_already_excludes_cache() -> None:
    usage = normalise_usage(
        "anthropic_messages",
        {
            "input_tokens": 200,
            "cache_read_input_tokens": 800,
            "cache_creation_input_tokens": 300,
            "output_tokens": 40,
        },
    )
    assert usage == CanonicalUsage(
        source="provider",
        input_tokens=200,
        output_tokens=40,
        cache_read_tokens=800,
        cache_write_tokens=300,
    )
    assert usage.prompt_tokens == 1300


def test_responses_shape() -> None:
    usage = normalise_usage(
        "codex_responses",
        {
            "input_tokens": 5000,
            "input_tokens_details": {"cached_tokens": 4096},
            "output_tokens": 900,
            "output_tokens_details": {"reasoning_tokens": 700},
            "total_tokens": 5900,
        },
    )
    assert (usage.input_tokens, usage.cache_read_tokens) == (904, 4096)
    assert (usage.output_tokens, usage.reasoning_tokens) == (900, 700)
    assert usage.source == "provider" and usage.flags == ()


def test_details_may_be_null_or_absent() -> None:
    usage = normalise_usage(
        "chat_completions",
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None},
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (10, 0, 2)


def test_integral_floats_are_accepted() -> None:
    usage = normalise_usage("chat_completions", {"prompt_tokens": 10.0, "completion_tokens": 2})
    assert usage.input_tokens == 10 and isinstance(usage.input_tokens, int)


# ------------------------------------------------------------------ missing and inconsistent


@pytest.mark.parametrize("mode", API_MODES)
@pytest.mark.parametrize("block", [None, {}, {"total_tokens": 5}, {"prompt_tokens": None}])
def test_missing_usage(mode: ApiMode, block: object) -> None:
    if mode != "chat_completions" and block == {"prompt_tokens": None}:
        block = {"input_tokens": None, "output_tokens": None}
    usage = normalise_usage(mode, block)
    assert usage == CanonicalUsage(source="missing")
    assert usage.total_tokens == 0


def test_cached_above_prompt_is_clamped_and_flagged() -> None:
    usage = normalise_usage(
        "chat_completions",
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 150},
        },
    )
    assert (usage.input_tokens, usage.cache_read_tokens) == (0, 100)
    assert usage.prompt_tokens == 100
    assert usage.flags == (FLAG_CACHE_EXCEEDS_INPUT,)


def test_reasoning_above_output_is_clamped_and_flagged() -> None:
    usage = normalise_usage(
        "codex_responses",
        {"input_tokens": 1, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 9}},
    )
    assert usage.reasoning_tokens == 5
    assert usage.flags == (FLAG_REASONING_EXCEEDS_OUTPUT,)


@pytest.mark.parametrize(
    ("mode", "block"),
    [
        ("chat_completions", {"prompt_tokens": 10}),
        ("codex_responses", {"output_tokens": 3}),
        ("anthropic_messages", {"cache_read_input_tokens": 7}),
    ],
)
def test_partial_block_is_flagged_incomplete(mode: ApiMode, block: dict[str, int]) -> None:
    usage = normalise_usage(mode, block)
    assert usage.source == "provider"
    assert FLAG_INCOMPLETE in usage.flags


# ------------------------------------------------------------------ hostile values


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (-1, "negative"),
        (1.5, "fractional"),
        (math.nan, "non-finite"),
        (math.inf, "non-finite"),
        (True, "bool"),
        ("100", "got str"),
        ([1], "got list"),
        ({"n": 1}, "got dict"),
        (MAX_TOKENS_PER_FIELD + 1, "absurd"),
        (2**70, "absurd"),
        (1e300, "absurd"),
    ],
)
def test_bad_counters_are_rejected(value: object, reason: str) -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage("chat_completions", {"prompt_tokens": value, "completion_tokens": 1})
    assert info.value.field == "prompt_tokens"
    assert reason in info.value.reason
    assert isinstance(info.value, DomainError) and isinstance(info.value, SessionwardenError)


def test_rejection_names_nested_field_without_echoing_value() -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage(
            "chat_completions",
            {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "sk-secret-value"}},
        )
    assert info.value.field == "prompt_tokens_details.cached_tokens"
    assert "sk-secret" not in str(info.value)


def test_moonshot_style_negative_input_is_rejected() -> None:
    with pytest.raises(UsageRejected, match="negative"):
        normalise_usage("anthropic_messages", {"input_tokens": -300, "output_tokens": 10})


@pytest.mark.parametrize("block", [[1, 2], "usage", 42, 1.0, True])
def test_non_object_block_is_rejected(block: object) -> None:
    with pytest.raises(UsageRejected):
        normalise_usage("chat_completions", block)


def test_details_of_wrong_type_are_rejected() -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage("codex_responses", {"input_tokens": 1, "input_tokens_details": [3]})
    assert info.value.field == "input_tokens_details"


def test_unknown_api_mode_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="api_mode"):
        normalise_usage("grpc", {})  # type: ignore[arg-type]


def test_canonical_usage_rejects_negative_on_construction_and_decode() -> None:
    with pytest.raises(ValueError):
        CanonicalUsage(source="provider", input_tokens=-1)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"source":"provider","output_tokens":-3}', type=CanonicalUsage)
    usage = CanonicalUsage(source="estimated", input_tokens=3, flags=("x",))
    assert msgspec.json.decode(msgspec.json.encode(usage), type=CanonicalUsage) == usage


# ------------------------------------------------------------------ estimation


def test_estimate_strings_and_parts() -> None:
    messages = [
        {"role": "system", "content": "a" * 40},
        {"role": "user", "content": [{"type": "text", "text": "b" * 40}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "c" * 40}}],
        },
        {"role": "tool", "tool_call_id": "x", "content": "d" * 40},
    ]
    assert estimate_tokens(messages) == 40


def test_estimate_rounds_up_and_is_at_least_one() -> None:
    assert estimate_tokens([]) == 1
    assert estimate_tokens(None) == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens({"messages": [{"content": "x" * 8}], "system": "y" * 4}) == 3


def test_estimate_usage() -> None:
    usage = estimate_usage([{"role": "user", "content": "x" * 400}], "y" * 40)
    assert usage == CanonicalUsage(source="estimated", input_tokens=100, output_tokens=10)
    assert estimate_usage("hi").output_tokens == 0


def test_estimate_survives_deep_nesting() -> None:
    deep: Any = "x" * 4
    for _ in range(10_000):
        deep = [deep]
    assert estimate_tokens(deep) == 1


# ------------------------------------------------------------------ properties

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
counter = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
)
details = st.none() | st.fixed_dictionaries(
    {},
    optional={"cached_tokens": counter, "reasoning_tokens": counter},
)
usage_like = st.fixed_dictionaries(
    {},
    optional={
        key: counter
        for key in (
            "prompt_tokens",
            "completion_tokens",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    }
    | {
        key: details | json_values
        for key in (
            "prompt_tokens_details",
            "completion_tokens_details",
            "input_tokens_details",
            "output_tokens_details",
        )
    },
)


def check(usage: CanonicalUsage) -> None:
    for name in (
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    ):
        value = getattr(usage, name)
        assert type(value) is int
        assert 0 <= value <= MAX_TOKENS_PER_FIELD
    assert usage.reasoning_tokens <= usage.output_tokens
    assert usage.source in ("provider", "missing")
    if usage.source == "missing":
        assert usage.total_tokens == 0


@settings(max_examples=300)
@given(mode=st.sampled_from(API_MODES), block=json_values | usage_like)
def test_property_only_usage_rejected_or_valid(mode: ApiMode, block: object) -> None:
    try:
        usage = normalise_usage(mode, block)
    except UsageRejected as exc:
        assert exc.reason
        return
    check(usage)


@settings(max_examples=200)
@given(
    prompt=st.integers(0, MAX_TOKENS_PER_FIELD),
    cached=st.integers(0, MAX_TOKENS_PER_FIELD),
    completion=st.integers(0, MAX_TOKENS_PER_FIELD),
    reasoning=st.integers(0, MAX_TOKENS_PER_FIELD),
)
def test_property_openai_prompt_total_is_preserved(
    prompt: int, cached: int, completion: int, reasoning: int
) -> None:
    usage = normalise_usage(
        "chat_completions",
        {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    )
    check(usage)
    assert usage.prompt_tokens == prompt
    assert usage.output_tokens == completion
    assert (FLAG_CACHE_EXCEEDS_INPUT in usage.flags) == (cached > prompt)


@given(json_values)
def test_property_estimate_never_raises(value: object) -> None:
    tokens = estimate_tokens(value)
    assert isinstance(tokens, int) and tokens >= 1


# ------------------------------------------------------------------ every shape (issue 12)


def test_responses_cache_write_is_inside_input() -> None:
    usage = normalise_usage(
        "codex_responses",
        {
            "input_tokens": 5000,
            "input_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 1500},
            "output_tokens": 100,
            "total_tokens": 5100,
        },
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        500, 3000, 1500)
    assert usage.prompt_tokens == 5000 and usage.flags == ()
    older = normalise_usage(
        "codex_responses",
        {"input_tokens": 10, "output_tokens": 1,
         "input_tokens_details": {"cache_creation_tokens": 4}},
    )
    assert (older.input_tokens, older.cache_write_tokens) == (6, 4)


def test_anthropic_one_hour_cache_write_split() -> None:
    # As Anthropic returns it (a 1-hour write on a Claude Code session).
    block = {
        "input_tokens": 2,
        "cache_creation_input_tokens": 10408,
        "cache_read_input_tokens": 14265,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 10408},
        "output_tokens": 1,
        "service_tier": "standard",
        "inference_geo": "not_available",
    }
    usage = normalise_usage("anthropic_messages", block)
    assert usage == CanonicalUsage(
        source="provider", input_tokens=2, output_tokens=1, cache_read_tokens=14265,
        cache_write_tokens=10408, cache_write_1h_tokens=10408,
    )
    mixed = normalise_usage("anthropic_messages", {
        "input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 900,
        "cache_creation": {"ephemeral_5m_input_tokens": 600, "ephemeral_1h_input_tokens": 300},
    })
    assert (mixed.cache_write_tokens, mixed.cache_write_1h_tokens, mixed.flags) == (900, 300, ())


def test_anthropic_split_without_total_and_split_that_disagrees() -> None:
    only_split = normalise_usage("anthropic_messages", {
        "input_tokens": 1, "output_tokens": 1,
        "cache_creation": {"ephemeral_5m_input_tokens": 5, "ephemeral_1h_input_tokens": 7},
    })
    assert (only_split.cache_write_tokens, only_split.cache_write_1h_tokens) == (12, 7)
    wrong = normalise_usage("anthropic_messages", {
        "input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 100,
        "cache_creation": {"ephemeral_1h_input_tokens": 250},
    })
    assert (wrong.cache_write_tokens, wrong.cache_write_1h_tokens) == (100, 100)
    assert wrong.flags == (FLAG_CACHE_SPLIT_MISMATCH,)


def test_anthropic_thinking_tokens_are_reasoning_inside_output() -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 50, "output_tokens": 400,
        "output_tokens_details": {"thinking_tokens": 320},
    })
    assert (usage.output_tokens, usage.reasoning_tokens, usage.flags) == (400, 320, ())
    over = normalise_usage("anthropic_messages", {
        "input_tokens": 1, "output_tokens": 4, "output_tokens_details": {"thinking_tokens": 9},
    })
    assert over.reasoning_tokens == 4 and over.flags == (FLAG_REASONING_EXCEEDS_OUTPUT,)


COMPACTING_BLOCK: dict[str, Any] = {
    # Anthropic's compaction docs: the compaction iteration is not in the top level.
    "input_tokens": 23000,
    "output_tokens": 1000,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
    "iterations": [
        {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
        {"type": "message", "input_tokens": 23000, "output_tokens": 1000,
         "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
         "model": "claude-opus-4-6"},
    ],
}


def test_anthropic_iterations_are_normalised_each_and_billed_apart() -> None:
    usage = normalise_usage("anthropic_messages", COMPACTING_BLOCK)
    assert (usage.input_tokens, usage.output_tokens) == (23000, 1000)
    assert usage.flags == (FLAG_ITERATIONS,)
    compaction, message = usage.iterations
    assert compaction == CanonicalUsage(
        source="provider", input_tokens=180000, output_tokens=3500,
        iteration_type="compaction",
    )
    assert (message.iteration_type, message.model, message.flags) == (
        "message", "claude-opus-4-6", ())
    assert usage.billed_parts == usage.iterations
    assert sum(part.total_tokens for part in usage.billed_parts) == 207500
    plain = normalise_usage("anthropic_messages", {"input_tokens": 3, "output_tokens": 4})
    assert plain.billed_parts == (plain,) and plain.iterations == ()


def test_iterations_carry_their_own_cache_and_an_advisor_model() -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 40, "output_tokens": 10,
        "iterations": [
            {"type": "message", "input_tokens": 40, "output_tokens": 10,
             "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 300,
             "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                "ephemeral_1h_input_tokens": 300}},
            {"type": "advisor_message", "model": "claude-opus-4-8", "input_tokens": 7,
             "output_tokens": 2},
        ],
    })
    first, advisor = usage.iterations
    assert (first.cache_read_tokens, first.cache_write_tokens, first.cache_write_1h_tokens) == (
        2000, 300, 300)
    assert (advisor.iteration_type, advisor.model) == ("advisor_message", "claude-opus-4-8")


def test_iterations_alone_are_a_report_and_empty_ones_are_none() -> None:
    usage = normalise_usage("anthropic_messages", {"iterations": [
        {"type": "compaction", "input_tokens": 5, "output_tokens": 1}]})
    assert usage.source == "provider"
    assert usage.flags == (FLAG_INCOMPLETE, FLAG_ITERATIONS)
    assert usage.billed_parts[0].input_tokens == 5
    empty = normalise_usage("anthropic_messages", {"input_tokens": 1, "output_tokens": 1,
                                                   "iterations": []})
    assert empty.iterations == () and empty.flags == ()


@pytest.mark.parametrize(
    ("iterations", "field"),
    [
        ({"type": "message"}, "iterations"),
        ([{"input_tokens": 1}] * (MAX_ITERATIONS + 1), "iterations"),
        ([{"input_tokens": 1}, 3], "iterations[1]"),
        ([{"input_tokens": 1}, {"input_tokens": -4}], "iterations[1].input_tokens"),
        ([{"cache_creation": {"ephemeral_1h_input_tokens": "9"}}],
         "iterations[0].cache_creation.ephemeral_1h_input_tokens"),
        ([{"type": 7}], "iterations[0].type"),
        ([{"model": "x" * 500}], "iterations[0].model"),
        ([{"model": "claude\x1b[31m"}], "iterations[0].model"),
    ],
)
def test_hostile_iterations_are_rejected(iterations: object, field: str) -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage("anthropic_messages",
                        {"input_tokens": 1, "output_tokens": 1, "iterations": iterations})
    assert info.value.field == field


def test_deepseek_hit_and_miss() -> None:
    # hermes-behaviour.md §3.6: 2000 prompt, 1500 hit → 500 input.
    block = {"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050,
             "prompt_cache_hit_tokens": 1500, "prompt_cache_miss_tokens": 500}
    usage = normalise_usage("chat_completions", block)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.flags) == (500, 1500, ())
    without_total = {k: v for k, v in block.items() if k != "prompt_tokens"}
    assert normalise_usage("chat_completions", without_total).prompt_tokens == 2000
    disagreeing = normalise_usage("chat_completions", {**block, "prompt_cache_miss_tokens": 9})
    assert disagreeing.flags == (FLAG_PROMPT_PARTS_MISMATCH,)
    assert disagreeing.prompt_tokens == 2000  # the reported total is still trusted


def test_openrouter_top_level_anthropic_cache_fields() -> None:
    # hermes-behaviour.md §3.6: 1000 prompt, 500 read, 300 written → 200 input.
    usage = normalise_usage("chat_completions", {
        "prompt_tokens": 1000, "completion_tokens": 10,
        "cache_read_input_tokens": 500, "cache_creation_input_tokens": 300,
    })
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        200, 500, 300)


def test_openrouter_relays_anthropic_one_hour_split_on_the_chat_wire() -> None:
    usage = normalise_usage("chat_completions", {
        "prompt_tokens": 5000, "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 1000},
        "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 600},
        "iterations": [{"type": "message", "input_tokens": 1000, "output_tokens": 20}],
    })
    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        1000, 1000, 600)
    assert usage.flags == () and usage.iterations == ()  # the chat reading, not Anthropic's


def test_anthropics_own_block_relayed_on_the_chat_wire_keeps_its_iterations() -> None:
    # No prompt_tokens: a gateway relaying Anthropic's usage object as it is.
    usage = normalise_usage("chat_completions", {
        "input_tokens": 40, "cache_read_input_tokens": 900, "output_tokens": 20,
        "iterations": [{"type": "compaction", "input_tokens": 5000, "output_tokens": 300},
                       {"type": "message", "input_tokens": 40, "output_tokens": 20}],
    })
    assert (usage.input_tokens, usage.cache_read_tokens) == (40, 900)  # beside, not inside
    assert [p.iteration_type for p in usage.billed_parts] == ["compaction", "message"]
    junk = normalise_usage("chat_completions", {"input_tokens": 40, "iterations": 3})
    assert junk.iterations == () and junk.input_tokens == 40


def test_kimi_flat_cached_tokens_and_precedence() -> None:
    # hermes-behaviour.md §3.6: Kimi 3000 / 1800 → 1200; nested beats flat; DeepSeek
    # beats Kimi.
    kimi = normalise_usage("chat_completions",
                           {"prompt_tokens": 3000, "completion_tokens": 5, "cached_tokens": 1800})
    assert (kimi.input_tokens, kimi.cache_read_tokens) == (1200, 1800)
    nested = normalise_usage("chat_completions", {
        "prompt_tokens": 3000, "completion_tokens": 5, "cached_tokens": 1800,
        "prompt_tokens_details": {"cached_tokens": 1000},
    })
    assert nested.cache_read_tokens == 1000
    both = normalise_usage("chat_completions", {
        "prompt_tokens": 3000, "completion_tokens": 5, "cached_tokens": 1800,
        "prompt_cache_hit_tokens": 1200,
    })
    assert both.cache_read_tokens == 1200


def test_a_nested_zero_does_not_hide_a_flat_figure() -> None:
    usage = normalise_usage("chat_completions", {
        "prompt_tokens": 3000, "completion_tokens": 5, "cached_tokens": 1800,
        "prompt_tokens_details": {"cached_tokens": 0},
    })
    assert usage.cache_read_tokens == 1800
    zero = normalise_usage("chat_completions", {
        "prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0},
    })
    assert (zero.input_tokens, zero.cache_read_tokens) == (30, 0)


def test_a_bad_value_on_an_unused_path_is_still_rejected() -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage("chat_completions", {
            "prompt_tokens": 30, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 10}, "cached_tokens": -1,
        })
    assert info.value.field == "cached_tokens"


def test_chat_accepts_input_output_names() -> None:
    usage = normalise_usage("chat_completions", {"input_tokens": 12, "output_tokens": 3})
    assert (usage.input_tokens, usage.output_tokens, usage.flags) == (12, 3, ())


def test_cache_read_and_write_above_prompt_are_cut_to_fit() -> None:
    # hermes-behaviour.md §3.2's inconsistent case (100 / 80 / 50); we trust the total.
    usage = normalise_usage("chat_completions", {
        "prompt_tokens": 100, "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 80, "cache_write_tokens": 50},
    })
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (0, 80, 20)
    assert usage.prompt_tokens == 100 and usage.flags == (FLAG_CACHE_EXCEEDS_INPUT,)


OPENROUTER_BLOCK: dict[str, Any] = {
    # OpenRouter's usage-accounting docs (the last SSE chunk of a stream).
    "completion_tokens": 2,
    "completion_tokens_details": {"reasoning_tokens": 0},
    "cost": 0.95,
    "cost_details": {"upstream_inference_cost": 19},
    "prompt_tokens": 194,
    "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 100, "audio_tokens": 0},
    "total_tokens": 196,
}


def test_openrouter_usage_and_reported_cost() -> None:
    usage = normalise_usage("chat_completions", OPENROUTER_BLOCK)
    assert (usage.input_tokens, usage.cache_write_tokens, usage.output_tokens) == (94, 100, 2)
    assert usage.reported_cost == "0.95"
    byok = normalise_usage("chat_completions", {**OPENROUTER_BLOCK, "is_byok": True})
    assert byok.reported_cost == "19.95"


@pytest.mark.parametrize(
    ("cost", "text"),
    [(0.00014, "0.00014"), (1e-07, "0.0000001"), (0, "0"), (-0.0, "0.0"), (3, "3"),
     (0.1 + 0.2, "0.30000000000000004")],
)
def test_reported_cost_is_the_json_number_exactly(cost: float, text: str) -> None:
    for mode in API_MODES:
        block = {"input_tokens": 1, "output_tokens": 1, "prompt_tokens": 1,
                 "completion_tokens": 1, "cost": cost}
        usage = normalise_usage(mode, block)
        assert usage.reported_cost == text
        assert Decimal(text) >= 0


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"cost": -0.01}, "cost"),
        ({"cost": "0.01"}, "cost"),
        ({"cost": True}, "cost"),
        ({"cost": math.nan}, "cost"),
        ({"cost": math.inf}, "cost"),
        ({"cost": 1e9}, "cost"),
        ({"cost": 1, "is_byok": True, "cost_details": {"upstream_inference_cost": "x"}},
         "cost_details.upstream_inference_cost"),
        ({"cost": 1, "is_byok": True, "cost_details": 5}, "cost_details"),
    ],
)
def test_bad_costs_are_rejected(block: dict[str, Any], field: str) -> None:
    with pytest.raises(UsageRejected) as info:
        normalise_usage("chat_completions", {"prompt_tokens": 1, "completion_tokens": 1, **block})
    assert info.value.field == field


def test_a_cost_alone_is_a_report() -> None:
    usage = normalise_usage("chat_completions", {"cost": 0.5})
    assert usage.source == "provider" and usage.reported_cost == "0.5"
    assert usage.flags == (FLAG_INCOMPLETE,)


def test_new_fields_default_and_round_trip() -> None:
    with pytest.raises(ValueError, match="part of cache_write"):
        CanonicalUsage(source="provider", cache_write_tokens=1, cache_write_1h_tokens=2)
    usage = normalise_usage("anthropic_messages", {**COMPACTING_BLOCK, "cost": 0.25})
    assert msgspec.json.decode(msgspec.json.encode(usage), type=CanonicalUsage) == usage
    assert CanonicalUsage(source="missing").reported_cost is None


# ------------------------------------------------------------------ properties, every shape

label = st.text(max_size=12) | st.integers() | st.none()
iteration = st.fixed_dictionaries(
    {},
    optional={
        "type": label,
        "model": label,
        "input_tokens": counter,
        "output_tokens": counter,
        "cache_read_input_tokens": counter,
        "cache_creation_input_tokens": counter,
        "cache_creation": json_values,
    },
)
money = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**6), st.none(),
    st.booleans(), st.text(max_size=4),
)
every_key = st.fixed_dictionaries(
    {},
    optional={
        key: counter
        for key in (
            "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
            "cache_read_input_tokens", "cache_creation_input_tokens",
            "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "cached_tokens",
            "cache_write_tokens",
        )
    }
    | {
        "prompt_tokens_details": st.none() | st.fixed_dictionaries({}, optional={
            "cached_tokens": counter, "cache_write_tokens": counter,
            "cache_creation_input_tokens": counter}),
        "input_tokens_details": st.none() | st.fixed_dictionaries({}, optional={
            "cached_tokens": counter, "cache_write_tokens": counter,
            "cache_creation_tokens": counter}),
        "output_tokens_details": st.none() | st.fixed_dictionaries({}, optional={
            "reasoning_tokens": counter, "thinking_tokens": counter}),
        "cache_creation": st.none() | st.fixed_dictionaries({}, optional={
            "ephemeral_5m_input_tokens": counter, "ephemeral_1h_input_tokens": counter}),
        "iterations": st.none() | st.lists(iteration, max_size=3) | json_values,
        "cost": money,
        "is_byok": st.booleans() | st.none(),
        "cost_details": st.none() | st.fixed_dictionaries(
            {}, optional={"upstream_inference_cost": money}) | json_values,
    },
)


def check_all(usage: CanonicalUsage) -> None:
    check(usage)
    assert 0 <= usage.cache_write_1h_tokens <= usage.cache_write_tokens
    if usage.reported_cost is not None:
        assert 0 <= Decimal(usage.reported_cost) <= MAX_REPORTED_COST
    for part in usage.iterations:
        check_all(part)
        assert part.iterations == () and part.source == "provider"
    assert usage.billed_parts == (usage.iterations or (usage,))


@settings(max_examples=100)
@given(mode=st.sampled_from(API_MODES), block=every_key)
def test_property_every_shape_only_rejects_or_is_valid(mode: ApiMode, block: object) -> None:
    try:
        usage = normalise_usage(mode, block)
    except UsageRejected as exc:
        assert exc.reason
        return
    check_all(usage)


@settings(max_examples=80)
@given(
    prompt=st.integers(0, MAX_TOKENS_PER_FIELD),
    data=st.data(),
    path=st.sampled_from(["details", "deepseek", "kimi", "openrouter"]),
)
def test_property_chat_variants_preserve_the_prompt_total(
    prompt: int, data: st.DataObject, path: str
) -> None:
    hit = data.draw(st.integers(0, prompt))
    write = data.draw(st.integers(0, prompt - hit))
    block: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 1}
    if path == "details":
        block["prompt_tokens_details"] = {"cached_tokens": hit, "cache_write_tokens": write}
    elif path == "deepseek":
        block |= {"prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit}
        write = 0
    elif path == "kimi":
        block["cached_tokens"] = hit
        write = 0
    else:
        block |= {"cache_read_input_tokens": hit, "cache_creation_input_tokens": write}
    usage = normalise_usage("chat_completions", block)
    check_all(usage)
    assert usage.prompt_tokens == prompt
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (hit, write)
    assert usage.flags == ()


@settings(max_examples=80)
@given(
    prompt=st.integers(0, MAX_TOKENS_PER_FIELD),
    cached=st.integers(0, MAX_TOKENS_PER_FIELD),
    write=st.integers(0, MAX_TOKENS_PER_FIELD),
)
def test_property_responses_buckets_add_up_to_input(prompt: int, cached: int, write: int) -> None:
    usage = normalise_usage("codex_responses", {
        "input_tokens": prompt, "output_tokens": 0,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": write},
    })
    check_all(usage)
    assert usage.prompt_tokens == prompt
    assert (FLAG_CACHE_EXCEEDS_INPUT in usage.flags) == (cached + write > prompt)


@settings(max_examples=60)
@given(
    parts=st.lists(st.tuples(*[st.integers(0, MAX_TOKENS_PER_FIELD)] * 4), max_size=4),
)
def test_property_anthropic_buckets_are_the_reported_ones(
    parts: list[tuple[int, int, int, int]]
) -> None:
    entries = [
        {"type": "message", "input_tokens": a, "cache_read_input_tokens": b,
         "cache_creation_input_tokens": c, "output_tokens": d}
        for a, b, c, d in parts
    ]
    usage = normalise_usage("anthropic_messages", {"input_tokens": 1, "output_tokens": 1,
                                                   "iterations": entries})
    check_all(usage)
    assert [(p.input_tokens, p.cache_read_tokens, p.cache_write_tokens, p.output_tokens)
            for p in usage.billed_parts] == (parts or [(1, 0, 0, 1)])
