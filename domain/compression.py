"""When to compress a session's history: the trigger, the token figure, anti-thrashing.

Only the *decision* lives here (the phases of compression are elsewhere). Three parts,
all pure (time comes in as an argument):

**The trigger** (:func:`trigger_tokens`), after hermes-behaviour.md §2.2, per model:

1. the fraction is the model's ``compression_threshold``, else ``[compression].threshold``;
2. it applies to the window left once the answer is reserved,
   ``context_length − max_output_tokens`` (a reservation that would leave nothing is
   ignored): a trigger on the whole window lets prompt + answer overflow it;
3. the result is never below :data:`MINIMUM_TRIGGER_TOKENS` (64K): a trigger under an
   agent's fixed overhead (system prompt, tool schemas) leaves every compression over it;
4. except when that floor reaches the usable window (a 64K model): then the trigger is
   85 % of it, so compression stays reachable (Hermes #14690: it never fired);
5. ``[compression].threshold_tokens`` caps the result and can only lower it.

Not adopted: Hermes's silent raise of the fraction to 0.75 below a 512K window. It
overrode explicit settings (Hermes #66177: a user's 0.3 became 0.75, the session never
compressed and hit its rate limits; #91024: nobody could see why). A fraction the user
wrote is taken as given; thrashing is the job of the guard below, judged on facts.
A model without a known ``context_length`` is taken as :data:`DEFAULT_CONTEXT_LENGTH`.

**The token figure.** The best figure is the provider's real ``prompt_tokens``. Before a
call we only have our estimate (:func:`estimate_tokens`: separate ratios for prose and
for JSON/tool content, since chars/4 errs +17 % on prose and −25 % on JSON), corrected
per (session, model) by the last real reading (:class:`Calibration`): after one reading,
the calibrated estimate of the same history *is* the real figure (unless the reading
was out of bounds, below), and of that history
plus new messages of the same mix within a few per cent. Under the append-only invariant
this equals "previous real reading + calibrated estimate of what was appended". The
correction factor is bounded to [0.5, 2] so one absurd reading cannot wreck it; the
caller's estimate must count everything the model reads (tool schemas as JSON) or the
factor absorbs the difference. A new model starts from a fresh ``Calibration()``.

**Anti-thrashing** (:class:`CompressionGuard`, after §2.3), judged on real readings only
(never on estimates: Hermes #36718 judged twice per turn on two different measures):

- every compression is counted until a real reading fits under the threshold, which
  resets the count; after :data:`MAX_UNFIT_COMPRESSIONS` (2) the session is not
  compressed again until one does. A compression whose call reported no usage stays
  counted: a provider that stops reporting usage cannot make us compress forever;
- after a compression, none other until the next call has ended (its reading, or its
  lack of one, is the verdict);
- frequency guard: at most :data:`FREQUENCY_LIMIT` compressions in any
  :data:`FREQUENCY_WINDOW`. Time, not calls, because what a compression costs is
  time-bound: it busts the provider's prompt cache (whose life is minutes) and a
  model summary takes seconds; "at least one call between two" is already enforced by the
  previous rule. A count over a window rather than a minimum gap lets a legitimate burst
  through (a huge tool result right after a compression) and stops a sustained loop.
  The constants (3 in 10 minutes) are those Hermes's own guard implies.

A model switch needs no reset: the next reading is judged against the new model's
threshold. Left to the wiring: feed :func:`record_reading` only readings of calls
admitted after the compression they judge; check ``[compression].enabled``; forward a
call the guard refused to compress as it is, or refuse it with a clear error if it
cannot fit the window at all.
"""

from datetime import datetime, timedelta
from typing import Literal, Protocol

import msgspec
from sessionwarden.config import CompressionConfig

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "FREQUENCY_LIMIT",
    "FREQUENCY_WINDOW",
    "JSON_CHARS_PER_TOKEN",
    "MAX_FACTOR",
    "MAX_UNFIT_COMPRESSIONS",
    "MINIMUM_TRIGGER_TOKENS",
    "MIN_FACTOR",
    "PROSE_CHARS_PER_TOKEN",
    "SMALL_WINDOW_RATIO",
    "Calibration",
    "CompressionGuard",
    "Decision",
    "DecisionReason",
    "FigureSource",
    "ModelWindow",
    "TokenFigure",
    "calibrate",
    "calibrated",
    "estimate_tokens",
    "record_compression",
    "record_reading",
    "should_compress",
    "token_figure",
    "trigger_tokens",
]

#: The trigger is never below this many tokens (unless the window itself is smaller).
MINIMUM_TRIGGER_TOKENS = 64_000
#: The trigger, as a share of the usable window, when the floor would reach the window.
SMALL_WINDOW_RATIO = 0.85
#: The window assumed for a model whose ``context_length`` is not configured.
DEFAULT_CONTEXT_LENGTH = 128_000
#: Characters per token of prose (chars/4 overestimates prose by 17 %: 4 × 1.17).
PROSE_CHARS_PER_TOKEN = 4.68
#: Characters per token of JSON and tool content (chars/4 underestimates it by 25 %).
JSON_CHARS_PER_TOKEN = 3.0
#: Bounds of the calibration factor (real / estimated).
MIN_FACTOR = 0.5
MAX_FACTOR = 2.0
#: Compressions without a fitting real reading after which a session is left alone.
MAX_UNFIT_COMPRESSIONS = 2
#: The frequency guard: at most this many compressions within this window of time.
FREQUENCY_LIMIT = 3
FREQUENCY_WINDOW = timedelta(minutes=10)

FigureSource = Literal["estimated", "calibrated"]
DecisionReason = Literal[
    "below_threshold", "over_threshold", "ineffective", "awaiting_reading", "frequency"
]


class ModelWindow(Protocol):
    """What the trigger needs of a model (``sessionwarden.config.ModelConfig`` has it)."""

    @property
    def context_length(self) -> int | None: ...
    @property
    def max_output_tokens(self) -> int | None: ...
    @property
    def compression_threshold(self) -> float | None: ...


def trigger_tokens(model: ModelWindow | None, compression: CompressionConfig) -> int:
    """The prompt size, in tokens, at or above which ``model``'s sessions are compressed.

    ``model`` None (a ``provider/model`` name without a ``[[models]]`` entry) uses the
    defaults. The rules and the bug behind each are in the module docstring.
    """
    context = (model.context_length if model else None) or DEFAULT_CONTEXT_LENGTH
    reserve = (model.max_output_tokens if model else None) or 0
    fraction = (model.compression_threshold if model else None) or compression.threshold
    usable = context - reserve
    if usable <= 0:
        usable = context  # a reservation as large as the window is a misconfiguration
    floored = max(int(usable * fraction), MINIMUM_TRIGGER_TOKENS)
    trigger = floored if floored < usable else max(1, min(int(usable * SMALL_WINDOW_RATIO),
                                                          usable - 1))
    cap = compression.threshold_tokens
    return trigger if cap is None else min(trigger, cap, context)


def estimate_tokens(text_chars: int, json_chars: int) -> int:
    """Our estimate of the tokens of ``text_chars`` of prose and ``json_chars`` of JSON.

    JSON here is everything structured the model reads: tool calls' arguments, tool
    results that are JSON, tool schemas. Integer arithmetic, rounded up per part.
    """
    prose = (max(text_chars, 0) * 25 + 116) // 117  # chars / 4.68, rounded up
    return prose + (max(json_chars, 0) + 2) // 3


class Calibration(msgspec.Struct, frozen=True):
    """The correction of our estimate for one (session, model), from its last real reading.

    The factor is ``real / estimated``, kept as the two integers so the arithmetic is
    exact; ``estimated == 0`` means no reading yet (factor 1).
    """

    real: int = 0
    estimated: int = 0

    @property
    def factor(self) -> float:
        """The correction factor (1.0 before any reading)."""
        return self.real / self.estimated if self.estimated else 1.0


def calibrate(cal: Calibration, estimated: int, real_prompt_tokens: int) -> Calibration:
    """Fold a real reading: our estimate of the prompt sent, and the provider's figure.

    The last reading wins (the history's mix of prose and JSON drifts, an average would
    lag). A reading that is not positive is ignored; the factor is clamped to
    [:data:`MIN_FACTOR`, :data:`MAX_FACTOR`].
    """
    if estimated <= 0 or real_prompt_tokens <= 0:
        return cal
    low = -(-estimated // 2)  # ceil(estimated × 0.5)
    high = estimated * 2
    return Calibration(real=min(max(real_prompt_tokens, low), high), estimated=estimated)


def calibrated(cal: Calibration, estimate: int) -> int:
    """``estimate`` corrected by ``cal``, rounded to the nearest token."""
    if not cal.estimated:
        return estimate
    return (estimate * cal.real * 2 + cal.estimated) // (cal.estimated * 2)


class TokenFigure(msgspec.Struct, frozen=True):
    """The token figure a decision is made on, and where it came from."""

    tokens: int
    source: FigureSource


def token_figure(cal: Calibration, estimate: int) -> TokenFigure:
    """The best figure before a call: the calibrated estimate once a reading exists."""
    if not cal.estimated:
        return TokenFigure(estimate, "estimated")
    return TokenFigure(calibrated(cal, estimate), "calibrated")


class CompressionGuard(msgspec.Struct, frozen=True):
    """One session's anti-thrashing state.

    Attributes:
        unfit: compressions since the last real reading that fit under the threshold.
        awaiting_reading: a compression happened and no real reading has judged it yet.
        recent: when the compressions of the last :data:`FREQUENCY_WINDOW` happened.
    """

    unfit: int = 0
    awaiting_reading: bool = False
    recent: tuple[datetime, ...] = ()

    @property
    def ineffective(self) -> int:
        """Compressions judged by a real reading that did not fit (for status)."""
        return self.unfit - int(self.awaiting_reading)


class Decision(msgspec.Struct, frozen=True):
    """Whether to compress now, and why.

    ``retry_after_s`` is set for a ``"frequency"`` refusal: when the guard lets go.
    """

    compress: bool
    reason: DecisionReason
    tokens: int
    threshold: int
    source: FigureSource
    retry_after_s: float | None = None


def _in_window(recent: tuple[datetime, ...], now: datetime) -> tuple[datetime, ...]:
    # A time after ``now`` (a clock stepped back) stays counted: the guard errs on safety.
    return tuple(t for t in recent if now - t < FREQUENCY_WINDOW)


def should_compress(guard: CompressionGuard, figure: TokenFigure, now: datetime,
                    threshold: int) -> Decision:
    """Decide on ``figure`` against ``threshold`` (ties compress) under the guard."""
    def decide(compress: bool, reason: DecisionReason, after: float | None = None) -> Decision:
        return Decision(compress, reason, figure.tokens, threshold, figure.source, after)

    if figure.tokens < threshold:
        return decide(False, "below_threshold")
    if guard.unfit >= MAX_UNFIT_COMPRESSIONS:
        return decide(False, "ineffective")
    if guard.awaiting_reading:
        return decide(False, "awaiting_reading")
    recent = _in_window(guard.recent, now)
    if len(recent) >= FREQUENCY_LIMIT:
        oldest = sorted(recent)[-FREQUENCY_LIMIT]
        wait = max((oldest + FREQUENCY_WINDOW - now).total_seconds(), 0.0)
        return decide(False, "frequency", wait)
    return decide(True, "over_threshold")


def record_compression(guard: CompressionGuard, now: datetime) -> CompressionGuard:
    """A compression was carried out at ``now``: count it and await its verdict."""
    recent = (*_in_window(guard.recent, now), now)
    return CompressionGuard(unfit=guard.unfit + 1, awaiting_reading=True,
                            recent=recent[-FREQUENCY_LIMIT:])


def record_reading(guard: CompressionGuard, real_tokens: int | None,
                   threshold: int) -> CompressionGuard:
    """A call ended: ``real_tokens`` is the provider's ``prompt_tokens``, None if absent.

    A positive reading under ``threshold`` clears the count; any other outcome keeps it
    (the compression it judged was counted when it happened) and ends the wait for a
    verdict. A zero reading is no reading (no real prompt is empty).
    """
    if real_tokens is not None and 0 < real_tokens < threshold:
        return CompressionGuard(recent=guard.recent)
    if not guard.awaiting_reading:
        return guard
    return CompressionGuard(unfit=guard.unfit, recent=guard.recent)
