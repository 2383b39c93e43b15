"""When to compress a session's history: the trigger, the token figure, anti-thrashing.

Only the *decision* lives here (the phases of compression are elsewhere). Three parts,
all pure (time comes in as an argument): the trigger, the token figure and the
anti-thrashing guard, each below.

Rules:

The overview: docs/architecture/context.md, 'The stage, per call'.

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
(never on estimates: Hermes #36718 judged twice per turn on two different measures). It
stops *ineffective* compressions, and only those:

- every compression is counted until a real reading fits under the threshold, which
  resets the count; after :data:`MAX_UNFIT_COMPRESSIONS` (2) the session is not
  compressed again until one does. A compression whose call reported no usage stays
  counted: a provider that stops reporting usage cannot make us compress forever;
- after a compression, none other until the next call has ended (its reading, or its
  lack of one, is the verdict).

Effective compressions are never rationed by frequency. Hermes's guard (3 in 10 minutes)
was dropped: a fast agent reading large files legitimately needs a compression every few
calls, and once rationed it forwarded ~133K-token prompts into a 128K window, each
answered with a context-length error (issue 20).

**The window comes first.** A prompt that with the output reserved for the answer would
not fit the window (:func:`prompt_room`) is compressed *whatever the guard says*
(reason ``"over_window"``): forwarding it can only fail. When no compression makes it
fit, the caller refuses it before sending, naming the sizes.

A model switch needs no reset: the next reading is judged against the new model's
threshold. Left to the wiring: feed :func:`record_reading` only readings of calls
admitted after the compression they judge; check ``[compression].enabled``.
"""

from typing import Literal, Protocol

import msgspec
from sessionwarden.config import CompressionConfig

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
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
    "prompt_room",
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

FigureSource = Literal["estimated", "calibrated"]
DecisionReason = Literal[
    "below_threshold", "over_threshold", "over_window", "ineffective", "awaiting_reading"
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


def prompt_room(model: ModelWindow | None, requested_output: int | None) -> tuple[int, int]:
    """``(window, reserve)``: the model's window and the output tokens kept free in it.

    The prompt fits when ``prompt + reserve <= window``. The reserve is the output limit
    the request states, no more than the model's ``max_output_tokens``; else the model's;
    else 0. A reserve as large as the window is not ours to judge (a provider may clamp
    it): it counts as 0, and the prompt alone must fit.
    """
    window = (model.context_length if model else None) or DEFAULT_CONTEXT_LENGTH
    model_max = model.max_output_tokens if model else None
    if requested_output is not None:
        reserve = min(requested_output, model_max) if model_max else requested_output
    else:
        reserve = model_max or 0
    return window, reserve if reserve < window else 0


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
    """

    unfit: int = 0
    awaiting_reading: bool = False

    @property
    def ineffective(self) -> int:
        """Compressions judged by a real reading that did not fit (for status)."""
        return self.unfit - int(self.awaiting_reading)


class Decision(msgspec.Struct, frozen=True):
    """Whether to compress now, and why.

    ``room`` is the most prompt tokens that fit the window with the answer's reserve
    (None: not checked).
    """

    compress: bool
    reason: DecisionReason
    tokens: int
    threshold: int
    source: FigureSource
    room: int | None = None


def should_compress(guard: CompressionGuard, figure: TokenFigure, threshold: int,
                    room: int | None = None) -> Decision:
    """Decide on ``figure`` against ``threshold`` (ties compress) under the guard.

    A figure over ``room`` (the prompt tokens that fit the window) is compressed whatever
    the guard says: forwarding it can only fail.
    """
    def decide(compress: bool, reason: DecisionReason) -> Decision:
        return Decision(compress, reason, figure.tokens, threshold, figure.source, room)

    if room is not None and figure.tokens > room:
        return decide(True, "over_window")
    if figure.tokens < threshold:
        return decide(False, "below_threshold")
    if guard.unfit >= MAX_UNFIT_COMPRESSIONS:
        return decide(False, "ineffective")
    if guard.awaiting_reading:
        return decide(False, "awaiting_reading")
    return decide(True, "over_threshold")


def record_compression(guard: CompressionGuard) -> CompressionGuard:
    """A compression was carried out: count it and await its verdict."""
    return CompressionGuard(unfit=guard.unfit + 1, awaiting_reading=True)


def record_reading(guard: CompressionGuard, real_tokens: int | None,
                   threshold: int) -> CompressionGuard:
    """A call ended: ``real_tokens`` is the provider's ``prompt_tokens``, None if absent.

    A positive reading under ``threshold`` clears the count; any other outcome keeps it
    (the compression it judged was counted when it happened) and ends the wait for a
    verdict. A zero reading is no reading (no real prompt is empty).
    """
    if real_tokens is not None and 0 < real_tokens < threshold:
        return CompressionGuard()
    if not guard.awaiting_reading:
        return guard
    return CompressionGuard(unfit=guard.unfit)
