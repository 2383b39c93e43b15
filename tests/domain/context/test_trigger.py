import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.config import CompressionConfig, ModelConfig
from sessionwarden.domain.context.trigger import (
    DEFAULT_CONTEXT_LENGTH,
    MAX_FACTOR,
    MAX_UNFIT_COMPRESSIONS,
    MIN_FACTOR,
    MINIMUM_TRIGGER_TOKENS,
    Calibration,
    CompressionGuard,
    TokenFigure,
    calibrate,
    calibrated,
    estimate_tokens,
    prompt_room,
    record_compression,
    record_reading,
    should_compress,
    token_figure,
    trigger_tokens,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEFAULTS = CompressionConfig()


def model(context: int | None = None, output: int | None = None,
          threshold: float | None = None) -> ModelConfig:
    return ModelConfig(name="m", provider="p", context_length=context,
                       max_output_tokens=output, compression_threshold=threshold)


# ------------------------------------------------------------------ the trigger, rule by rule


def test_per_model_threshold_overrides_the_global_one() -> None:
    """Rule 1. Bug prevented: one global fraction for every model, so a 1M-token model
    compressed at the same share as a 200K one; the override must win over
    ``[compression].threshold`` (and still pass through the other rules)."""
    assert trigger_tokens(model(1_000_000), DEFAULTS) == 500_000
    assert trigger_tokens(model(1_000_000, threshold=0.8), DEFAULTS) == 800_000
    # the override is floored like any fraction
    assert trigger_tokens(model(100_000, threshold=0.1), DEFAULTS) == MINIMUM_TRIGGER_TOKENS


def test_output_reservation_is_taken_out_of_the_window() -> None:
    """Rule 2. Bug prevented: a trigger computed on the whole window let a prompt just
    under it plus the reserved answer exceed the window, so the provider refused the
    call (context length exceeded) before compression ever fired."""
    trigger = trigger_tokens(model(200_000, output=32_000), DEFAULTS)
    assert trigger == 84_000  # 0.5 × (200,000 − 32,000), not 0.5 × 200,000


def test_a_reservation_as_large_as_the_window_is_ignored() -> None:
    """Rule 2, guard. Bug prevented: ``max_output_tokens ≥ context_length`` (some
    catalogues report them equal) left a zero or negative window, so the trigger fell to
    1 token and every call was compressed."""
    assert trigger_tokens(model(100_000, output=100_000), DEFAULTS) == MINIMUM_TRIGGER_TOKENS
    assert trigger_tokens(model(100_000, output=150_000), DEFAULTS) == MINIMUM_TRIGGER_TOKENS


def test_trigger_is_never_below_the_64k_floor() -> None:
    """Rule 3. Bug prevented: a trigger below an agent's fixed overhead (system prompt
    and tool schemas, tens of thousands of tokens) leaves every compressed history still
    over it, so the session is compressed call after call (thrashing)."""
    assert trigger_tokens(model(100_000), DEFAULTS) == 64_000  # not 50,000


def test_small_window_exception_keeps_compression_reachable() -> None:
    """Rule 4. Bug prevented (Hermes #14690): on a 64K window the floor made the trigger
    100 % of the window; the provider refused the call before the prompt could reach it,
    so auto-compression never fired. The trigger is 85 % of such a window instead."""
    assert trigger_tokens(model(64_000), DEFAULTS) == 54_400
    assert trigger_tokens(model(8_000), DEFAULTS) == 6_800
    assert trigger_tokens(model(70_000, output=8_000), DEFAULTS) == int(62_000 * 0.85)
    assert trigger_tokens(model(1), DEFAULTS) == 1


def test_absolute_cap_lowers_the_trigger() -> None:
    """Rule 5. Bug prevented (Hermes #31600): a 1M-token model whose answers degrade long
    before half its window could not be made to compress earlier; the cap may go below
    the 64K floor too, as the user asked."""
    assert trigger_tokens(model(1_000_000), CompressionConfig(threshold_tokens=90_000)) == 90_000
    assert trigger_tokens(model(1_000_000), CompressionConfig(threshold_tokens=30_000)) == 30_000


def test_absolute_cap_never_raises_the_trigger() -> None:
    """Rule 5, direction. Bug prevented: a cap read as "the trigger" would move it past a
    small model's window, so the session would overflow before it was ever compressed."""
    capped = CompressionConfig(threshold_tokens=500_000)
    assert trigger_tokens(model(128_000), capped) == trigger_tokens(model(128_000), DEFAULTS)
    assert trigger_tokens(model(128_000), capped) == 64_000


def test_explicit_low_fraction_is_not_silently_raised_on_sub_512k_windows() -> None:
    """Hermes's 0.75 raise below 512K, deliberately not adopted. Bug prevented (Hermes
    #66177): a user's 0.3 on a small-window model became 0.75; the session never
    compressed and every call ran into the provider's rate limit."""
    assert trigger_tokens(model(400_000), CompressionConfig(threshold=0.3)) == 120_000


def test_unknown_model_uses_the_default_window() -> None:
    """A ``provider/model`` name without ``[[models]]`` entry must still have a trigger."""
    expected = int(DEFAULT_CONTEXT_LENGTH * 0.5)
    assert trigger_tokens(None, DEFAULTS) == trigger_tokens(model(), DEFAULTS) == expected


windows = st.integers(min_value=1, max_value=4_000_000)
outputs = st.none() | st.integers(min_value=1, max_value=4_000_000)
fractions = st.floats(min_value=0.01, max_value=1.0)
caps = st.integers(min_value=1, max_value=5_000_000)


@given(windows, outputs, st.none() | fractions, fractions)
def test_trigger_is_positive_and_inside_the_usable_window(
        context: int, output: int | None, override: float | None, fraction: float) -> None:
    config = CompressionConfig(threshold=fraction)
    trigger = trigger_tokens(model(context, output, override), config)
    usable = context - (output or 0)
    usable = usable if usable > 0 else context
    assert 1 <= trigger <= context
    assert trigger < usable or usable == 1


@given(windows, outputs, st.none() | fractions, caps)
def test_cap_only_lowers(context: int, output: int | None, override: float | None,
                         cap: int) -> None:
    m = model(context, output, override)
    uncapped = trigger_tokens(m, DEFAULTS)
    assert trigger_tokens(m, CompressionConfig(threshold_tokens=cap)) == min(uncapped, cap)


# ------------------------------------------------------------------ estimate and calibration


def test_estimate_uses_separate_ratios_for_prose_and_json() -> None:
    # chars/4 would say 1,170 for this prose (+17 %) and 750 for this JSON (−25 %).
    assert estimate_tokens(4_680, 0) == 1_000
    assert estimate_tokens(0, 3_000) == 1_000
    assert estimate_tokens(4_680, 3_000) == 2_000
    assert estimate_tokens(1, 1) == 2  # rounded up per part
    assert estimate_tokens(0, 0) == estimate_tokens(-5, -5) == 0


def test_first_figure_is_the_estimate_then_calibrated() -> None:
    assert token_figure(Calibration(), 1_000) == TokenFigure(1_000, "estimated")
    cal = calibrate(Calibration(), 1_000, 1_200)
    assert token_figure(cal, 1_000) == TokenFigure(1_200, "calibrated")
    assert token_figure(cal, 2_000) == TokenFigure(2_400, "calibrated")


def test_absurd_reading_is_bounded() -> None:
    cal = calibrate(Calibration(), 1_000, 1_000_000)
    assert cal.factor == MAX_FACTOR
    assert calibrated(cal, 1_000) == 2_000
    assert calibrate(Calibration(), 1_000, 1).factor == MIN_FACTOR


def test_non_positive_readings_are_ignored() -> None:
    cal = calibrate(Calibration(), 1_000, 1_100)
    assert calibrate(cal, 0, 500) == cal
    assert calibrate(cal, 1_000, 0) == cal
    assert calibrate(cal, 1_000, -3) == cal


def test_the_last_reading_wins() -> None:
    cal = calibrate(calibrate(Calibration(), 1_000, 1_500), 2_000, 1_800)
    assert calibrated(cal, 2_000) == 1_800


@given(st.integers(min_value=1, max_value=10**7), st.integers(min_value=1, max_value=10**8),
       st.integers(min_value=0, max_value=10**7))
def test_factor_stays_within_bounds(estimated: int, real: int, later: int) -> None:
    cal = calibrate(Calibration(), estimated, real)
    assert MIN_FACTOR <= cal.factor <= MAX_FACTOR
    assert MIN_FACTOR * later - 1 <= calibrated(cal, later) <= MAX_FACTOR * later + 1


# The generator's "real tokenizer": a per-history count of characters per token for prose
# and for JSON, each rounded up. Assumption: what is appended after the reading has the
# same prose/JSON mix as the history read (to within a character), and the history is at
# least 2,000 characters.
true_prose_ratio = st.floats(min_value=3.5, max_value=6.0)
true_json_ratio = st.floats(min_value=2.2, max_value=4.0)


def real_tokens(text: int, json: int, prose_ratio: float, json_ratio: float) -> int:
    return math.ceil(text / prose_ratio) + math.ceil(json / json_ratio)


@given(st.integers(min_value=0, max_value=2_000_000), st.integers(min_value=0, max_value=2_000_000),
       true_prose_ratio, true_json_ratio, st.floats(min_value=0.0, max_value=0.25))
def test_calibration_converges_after_one_reading(text: int, json: int, prose_ratio: float,
                                                 json_ratio: float, growth: float) -> None:
    if text + json < 2_000:
        text += 2_000
    estimate = estimate_tokens(text, json)
    real = real_tokens(text, json, prose_ratio, json_ratio)
    cal = calibrate(Calibration(), estimate, real)
    # the same history: the real figure, to the token
    assert abs(calibrated(cal, estimate) - real) <= 1
    # the history plus a small addition of the same mix: within ±5 %
    more_text, more_json = text + round(text * growth), json + round(json * growth)
    truth = real_tokens(more_text, more_json, prose_ratio, json_ratio)
    assert abs(calibrated(cal, estimate_tokens(more_text, more_json)) - truth) <= 0.05 * truth


# ------------------------------------------------------------------ anti-thrashing

THRESHOLD = 100_000
OVER = TokenFigure(150_000, "calibrated")


def test_below_threshold_does_not_compress_and_ties_do() -> None:
    guard = CompressionGuard()
    assert should_compress(guard, TokenFigure(99_999, "estimated"), THRESHOLD).reason == (
        "below_threshold")
    decision = should_compress(guard, TokenFigure(THRESHOLD, "estimated"), THRESHOLD)
    assert decision.compress and decision.reason == "over_threshold"
    assert (decision.tokens, decision.threshold, decision.source) == (
        THRESHOLD, THRESHOLD, "estimated")


def test_two_ineffective_compressions_block_until_a_real_reading_fits() -> None:
    guard = CompressionGuard()
    for strike in (1, 2):
        assert should_compress(guard, OVER, THRESHOLD).compress
        guard = record_compression(guard)
        guard = record_reading(guard, 120_000, THRESHOLD)  # still over: ineffective
        assert guard.ineffective == strike
    blocked = should_compress(guard, OVER, THRESHOLD)
    assert not blocked.compress and blocked.reason == "ineffective"
    # an estimate below the threshold does not unblock: only a real reading does
    guard = record_reading(guard, 130_000, THRESHOLD)
    assert should_compress(guard, OVER, THRESHOLD).reason == "ineffective"
    guard = record_reading(guard, 90_000, THRESHOLD)
    assert guard == CompressionGuard()
    assert should_compress(guard, OVER, THRESHOLD).compress


def test_an_effective_compression_clears_the_count() -> None:
    guard = record_reading(record_compression(CompressionGuard()), 120_000, THRESHOLD)
    guard = record_compression(guard)
    guard = record_reading(guard, 40_000, THRESHOLD)
    assert (guard.unfit, guard.ineffective, guard.awaiting_reading) == (0, 0, False)


def test_no_second_compression_before_a_reading_judges_the_first() -> None:
    guard = record_compression(CompressionGuard())
    assert should_compress(guard, OVER, THRESHOLD).reason == "awaiting_reading"


def test_a_compression_without_usage_stays_counted() -> None:
    guard = CompressionGuard()
    for _ in range(MAX_UNFIT_COMPRESSIONS):
        assert should_compress(guard, OVER, THRESHOLD).compress
        guard = record_reading(record_compression(guard), None, THRESHOLD)
    assert should_compress(guard, OVER, THRESHOLD).reason == "ineffective"
    assert record_reading(guard, 0, THRESHOLD) == guard  # a zero reading is no reading


def test_effective_compressions_are_never_rationed() -> None:
    # A fast agent reading large files: over the threshold at every call, and every
    # compression brings it back under. Each call may compress (Hermes's 3 per 10 min
    # forwarded ~133K-token prompts into a 128K window).
    guard = CompressionGuard()
    for _ in range(50):
        decision = should_compress(guard, OVER, THRESHOLD)
        assert decision.compress and decision.reason == "over_threshold"
        guard = record_reading(record_compression(guard), 40_000, THRESHOLD)


@pytest.mark.parametrize("guard", [
    CompressionGuard(unfit=MAX_UNFIT_COMPRESSIONS),  # ineffective
    CompressionGuard(unfit=1, awaiting_reading=True),  # awaiting its reading
    CompressionGuard(unfit=5, awaiting_reading=True),
])
def test_a_prompt_over_the_window_is_compressed_whatever_the_guard_says(
    guard: CompressionGuard
) -> None:
    room = 128_000 - 4_000
    decision = should_compress(guard, TokenFigure(room + 1, "calibrated"), THRESHOLD, room)
    assert decision.compress and decision.reason == "over_window" and decision.room == room
    assert not should_compress(guard, TokenFigure(room, "calibrated"), THRESHOLD, room).compress


def test_the_room_keeps_the_answers_reserve() -> None:
    class Model:
        def __init__(self, window: int | None, most: int | None) -> None:
            self.context_length, self.max_output_tokens = window, most
            self.compression_threshold = None

    assert prompt_room(None, None) == (DEFAULT_CONTEXT_LENGTH, 0)
    assert prompt_room(None, 4_096) == (DEFAULT_CONTEXT_LENGTH, 4_096)
    assert prompt_room(Model(200_000, 8_192), None) == (200_000, 8_192)
    assert prompt_room(Model(200_000, 8_192), 64_000) == (200_000, 8_192)  # the model's max
    assert prompt_room(Model(200_000, None), 1_000) == (200_000, 1_000)
    assert prompt_room(Model(32_000, None), 32_000) == (32_000, 0)  # not ours to judge


# Each step: the figure before the call, and the call's real reading (None: the call
# reported no usage).
steps = st.lists(
    st.tuples(st.integers(min_value=0, max_value=200_000),
              st.none() | st.integers(min_value=0, max_value=200_000)),
    max_size=60,
)


@given(steps)
def test_guard_never_thrashes(script: list[tuple[int, int | None]]) -> None:
    guard = CompressionGuard()
    since_fit = 0
    for figure, reading in script:
        decision = should_compress(guard, TokenFigure(figure, "calibrated"), THRESHOLD)
        if decision.compress:
            guard = record_compression(guard)
            since_fit += 1
        elif figure >= THRESHOLD:
            # refused over the threshold: only for ineffective ones, or awaiting a verdict
            assert decision.reason in ("ineffective", "awaiting_reading")
            assert since_fit >= MAX_UNFIT_COMPRESSIONS or guard.awaiting_reading
        assert since_fit <= MAX_UNFIT_COMPRESSIONS
        guard = record_reading(guard, reading, THRESHOLD)
        if reading is not None and 0 < reading < THRESHOLD:
            since_fit = 0
        assert guard.unfit == since_fit
