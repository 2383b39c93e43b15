import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import API_MODES, ApiMode
from sessionwarden.domain.errors import DomainError, UsageRejected
from sessionwarden.domain.usage import (
    FLAG_CACHE_EXCEEDS_INPUT,
    FLAG_INCOMPLETE,
    FLAG_REASONING_EXCEEDS_OUTPUT,
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
