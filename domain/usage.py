"""Canonical usage: one token-count shape for every provider API, and a rough estimator.

Providers report usage in three shapes that *disagree on what "input" means*
(reliability-and-security.md §6.1): OpenAI Chat Completions and Responses count cached
prompt tokens *inside* the input total, Anthropic Messages counts them *beside* it.
Mixing them up mis-bills by the cached fraction, often more than 80 %.

**The canonical convention** (used by pricing, the ledger and budgets): the three prompt
buckets are disjoint and each priced at its own rate::

    input_tokens        prompt tokens neither read from nor written to the cache
    cache_read_tokens   prompt tokens served from the cache
    cache_write_tokens  prompt tokens written to the cache (Anthropic cache creation)
    prompt_tokens       = input + cache_read + cache_write     (property)
    output_tokens       every generated token, reasoning included
    reasoning_tokens    the part of output_tokens spent on reasoning (a subset, not extra)

**Inconsistent blocks.** When an OpenAI-style block reports more cached tokens than
prompt tokens, the reported prompt total is trusted: ``cache_read`` is clamped down to it
(so ``input`` becomes 0, never negative) and the flag ``"cache_exceeds_input"`` is set.
Likewise reasoning above output is clamped to output with ``"reasoning_exceeds_output"``.
A block that reports only some of its main counters gets ``"incomplete"``.

**Hostile blocks.** ``None``, a missing block or one with none of the expected counters
gives ``source="missing"`` with zeros; the caller then estimates with
:func:`estimate_usage`. A counter that is negative, fractional, NaN, a bool, a string or
above :data:`MAX_TOKENS_PER_FIELD` raises :class:`UsageRejected`: the caller records the
rejection and estimates. Nothing else is ever raised for JSON-like input.
"""

import math
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from sessionwarden.config import API_MODES, ApiMode
from sessionwarden.domain.errors import UsageRejected

__all__ = [
    "FLAG_CACHE_EXCEEDS_INPUT",
    "FLAG_INCOMPLETE",
    "FLAG_REASONING_EXCEEDS_OUTPUT",
    "MAX_TOKENS_PER_FIELD",
    "CanonicalUsage",
    "UsageSource",
    "estimate_tokens",
    "estimate_usage",
    "normalise_usage",
    "text_chars",
    "tokens_from_chars",
]

#: Where the counts came from: the provider's report, our estimate, or nowhere.
UsageSource = Literal["provider", "estimated", "missing"]

#: No single request plausibly uses more tokens than this in one bucket.
MAX_TOKENS_PER_FIELD = 10_000_000

FLAG_CACHE_EXCEEDS_INPUT = "cache_exceeds_input"
FLAG_REASONING_EXCEEDS_OUTPUT = "reasoning_exceeds_output"
FLAG_INCOMPLETE = "incomplete"

_Count = Annotated[int, msgspec.Meta(ge=0)]


class CanonicalUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The token counts of one request in the canonical convention (see the module doc).

    Attributes:
        source: ``"provider"`` (reported), ``"estimated"`` (by :func:`estimate_usage`) or
            ``"missing"`` (nothing reported; all counts are 0).
        flags: anomalies found while normalising, e.g. ``("cache_exceeds_input",)``.
    """

    source: UsageSource
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_tokens: _Count = 0
    cache_write_tokens: _Count = 0
    reasoning_tokens: _Count = 0
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Reject negative counts on direct construction too (decoding checks ``ge=0``)."""
        for name in _COUNT_FIELDS:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative")

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token: ``input + cache_read + cache_write``."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens (reasoning is already inside output)."""
        return self.prompt_tokens + self.output_tokens


_COUNT_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def _count(block: Mapping[object, object], key: str, where: str) -> int | None:
    """Read one counter: None when absent or null, else a validated non-negative int."""
    value = block.get(key)
    path = f"{where}{key}"
    if value is None:
        return None
    if isinstance(value, bool):
        raise UsageRejected(path, "expected an integer, got bool")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise UsageRejected(path, "expected an integer, got a fractional or non-finite number")
        number = int(value)
    else:
        raise UsageRejected(path, f"expected an integer, got {type(value).__name__}")
    if number < 0:
        raise UsageRejected(path, "negative")
    if number > MAX_TOKENS_PER_FIELD:
        raise UsageRejected(path, f"absurd (above {MAX_TOKENS_PER_FIELD:,})")
    return number


def _details(block: Mapping[object, object], key: str) -> Mapping[object, object]:
    """Read a nested ``*_details`` object; absent or null reads as empty."""
    value = block.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageRejected(key, f"expected an object, got {type(value).__name__}")
    return value


def _openai_shape(
    block: Mapping[object, object], prompt_key: str, output_key: str
) -> CanonicalUsage:
    """Chat Completions (``prompt_/completion_``) and Responses (``input_/output_``)."""
    prompt = _count(block, prompt_key, "")
    output = _count(block, output_key, "")
    in_details = _details(block, f"{prompt_key}_details")
    out_details = _details(block, f"{output_key}_details")
    cached = _count(in_details, "cached_tokens", f"{prompt_key}_details.")
    reasoning = _count(out_details, "reasoning_tokens", f"{output_key}_details.")
    if prompt is None and output is None and cached is None and reasoning is None:
        return CanonicalUsage(source="missing")
    flags: list[str] = []
    if prompt is None or output is None:
        flags.append(FLAG_INCOMPLETE)
    prompt, output, cached, reasoning = prompt or 0, output or 0, cached or 0, reasoning or 0
    if cached > prompt:
        flags.append(FLAG_CACHE_EXCEEDS_INPUT)
        cached = prompt
    if reasoning > output:
        flags.append(FLAG_REASONING_EXCEEDS_OUTPUT)
        reasoning = output
    return CanonicalUsage(
        source="provider",
        input_tokens=prompt - cached,
        output_tokens=output,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
        flags=tuple(flags),
    )


def _anthropic_shape(block: Mapping[object, object]) -> CanonicalUsage:
    """Anthropic Messages: ``input_tokens`` already excludes both cache buckets."""
    uncached = _count(block, "input_tokens", "")
    output = _count(block, "output_tokens", "")
    cache_read = _count(block, "cache_read_input_tokens", "")
    cache_write = _count(block, "cache_creation_input_tokens", "")
    if uncached is None and output is None and cache_read is None and cache_write is None:
        return CanonicalUsage(source="missing")
    flags = (FLAG_INCOMPLETE,) if uncached is None or output is None else ()
    return CanonicalUsage(
        source="provider",
        input_tokens=uncached or 0,
        output_tokens=output or 0,
        cache_read_tokens=cache_read or 0,
        cache_write_tokens=cache_write or 0,
        flags=flags,
    )


def normalise_usage(api_mode: ApiMode, usage_block: object) -> CanonicalUsage:
    """Turn a provider's ``usage`` object into :class:`CanonicalUsage`.

    Args:
        api_mode: the wire protocol the block came from.
        usage_block: the decoded ``usage`` JSON value (a mapping), or None when absent.

    Returns:
        The canonical counts; ``source="missing"`` (all zero) when nothing was reported.

    Raises:
        UsageRejected: a counter or nested object cannot be trusted (see the module doc).
        ValueError: ``api_mode`` is not one of :data:`API_MODES` (a programming error).
    """
    if api_mode not in API_MODES:
        raise ValueError(f"unknown api_mode {api_mode!r}")
    if usage_block is None:
        return CanonicalUsage(source="missing")
    if not isinstance(usage_block, Mapping):
        raise UsageRejected("", f"expected an object, got {type(usage_block).__name__}")
    if api_mode == "anthropic_messages":
        return _anthropic_shape(usage_block)
    if api_mode == "codex_responses":
        return _openai_shape(usage_block, "input_tokens", "output_tokens")
    return _openai_shape(usage_block, "prompt_tokens", "completion_tokens")


# Keys whose values carry text a model reads or writes: message and part ``content`` /
# ``text``, tool-call ``arguments``, Responses ``input`` / ``output`` / ``instructions``,
# Anthropic ``system`` / ``thinking``, and whole request bodies (``messages``).
_TEXT_KEYS = (
    "messages",
    "input",
    "instructions",
    "system",
    "content",
    "text",
    "thinking",
    "refusal",
    "reasoning_content",
    "tool_calls",
    "function",
    "arguments",
    "output",
)
_MAX_DEPTH = 32


def text_chars(messages: object) -> int:
    """Count the characters of every text value reachable through :data:`_TEXT_KEYS`."""
    total = 0
    stack: list[tuple[object, int]] = [(messages, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            total += len(node)
        elif depth >= _MAX_DEPTH:
            continue
        elif isinstance(node, list | tuple):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, Mapping):
            for key in _TEXT_KEYS:
                value = node.get(key)
                if value is not None:
                    stack.append((value, depth + 1))
    return total


def tokens_from_chars(chars: int) -> int:
    """Our estimate of the tokens in ``chars`` characters of text: chars / 4, rounded up."""
    return (max(chars, 0) + 3) // 4


def estimate_tokens(messages: object) -> int:
    """Estimate the tokens of ``messages`` as characters / 4, rounded up, at least 1.

    Accepts a string, a list of chat messages (``content`` as a string or a list of
    content parts), Responses ``input`` items, or a whole request body. Images, tool
    schemas and unknown keys are not counted. Never raises.
    """
    return max(1, (text_chars(messages) + 3) // 4)


def estimate_usage(messages: object, output: object = None) -> CanonicalUsage:
    """Estimated usage for a request whose provider reported none (or was rejected).

    Args:
        messages: the request's messages (anything :func:`estimate_tokens` accepts).
        output: the generated text or message, if any was seen; None counts as 0 tokens.
    """
    output_tokens = 0 if output is None else estimate_tokens(output)
    return CanonicalUsage(
        source="estimated",
        input_tokens=estimate_tokens(messages),
        output_tokens=output_tokens,
    )
