"""Canonical usage: one token-count shape for every provider API, and a rough estimator.

Providers report usage in shapes that *disagree on what "input" means*
(reliability-and-security.md §6.1): OpenAI Chat Completions and Responses count cached
prompt tokens *inside* the input total, Anthropic Messages counts them *beside* it.
Mixing them up mis-bills by the cached fraction, often more than 80 %.

Rules:

The overview: docs/architecture/costs-and-caps.md, 'Prices'.

**The canonical convention** (used by pricing, the ledger and budgets): the three prompt
buckets are disjoint and each priced at its own rate::

    input_tokens           prompt tokens neither read from nor written to the cache
    cache_read_tokens      prompt tokens served from the cache
    cache_write_tokens     prompt tokens written to the cache (Anthropic cache creation)
    cache_write_1h_tokens  the part of cache_write with Anthropic's 1-hour lifetime (the
                           rest has the default 5-minute one; a 1-hour write costs more)
    prompt_tokens          = input + cache_read + cache_write     (property)
    output_tokens          every generated token, reasoning included
    reasoning_tokens       the part of output_tokens spent on reasoning (a subset, not extra)

**The shapes read** (hermes-behaviour.md §3.2, §3.6; the provider's own docs):

- ``chat_completions``: ``prompt_tokens`` (or ``input_tokens``) *includes* the cache;
  cache read from ``prompt_tokens_details.cached_tokens``, else OpenRouter's top-level
  ``cache_read_input_tokens``, else DeepSeek's ``prompt_cache_hit_tokens``, else Kimi's
  top-level ``cached_tokens``; cache write from ``prompt_tokens_details.cache_write_tokens``
  (OpenRouter) or ``…cache_creation_input_tokens``, else the top-level
  ``cache_creation_input_tokens`` or ``cache_write_tokens``. Each bucket is the first
  *non-zero* value along its paths (a nested 0 beside a flat figure is not trusted over
  it; the bug class of hermes #61871 / #65722 / #50295: provider-specific cache fields
  read as 0). DeepSeek's ``prompt_cache_miss_tokens`` completes a missing prompt total
  and is checked against a present one (``"prompt_parts_mismatch"``).
- ``codex_responses``: ``input_tokens`` includes the cache; ``input_tokens_details``
  ``cached_tokens`` (read), ``cache_write_tokens`` or ``cache_creation_tokens`` (write);
  reasoning in ``output_tokens_details.reasoning_tokens``.
- ``anthropic_messages``: ``input_tokens`` is *beside* ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``, never reduced; ``cache_creation``
  ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens`` split the write (a split
  that does not add up to the write total is flagged ``"cache_split_mismatch"``; the
  1-hour part is clamped to the total); reasoning is ``output_tokens_details``
  ``thinking_tokens``. The ``cache_creation`` split is read on the chat wire too
  (OpenRouter relays it).
- On the chat wire, a block with ``iterations[]`` and neither ``prompt_tokens`` nor
  ``completion_tokens`` is Anthropic's own usage object relayed by a gateway in front of
  Anthropic: it is read as ``anthropic_messages`` (so its iterations are billed). A chat
  block with ``prompt_tokens`` keeps the chat reading and its iterations are ignored
  (OpenRouter's top-level counts are what it bills).

**Iterations** (Anthropic server-side compaction, tool loops, advisor and fallback
models). ``usage.iterations[]`` reports each sampling iteration with its own counts,
``type`` (``compaction``, ``message``, ``advisor_message``, ``fallback_message``) and, for
some, ``model``. A compaction iteration's tokens are *not* in the top-level counts, yet
they are billed (Anthropic's compaction docs: sum across ``iterations`` to bill; price
libraries price them at $0, the bug this avoids). Decision: the top-level counts stay
the ones Anthropic reports (they describe the context; ``compression`` calibrates on
them), each iteration is normalised into its own :class:`CanonicalUsage` in
``iterations`` (with ``iteration_type`` and ``model``), and :attr:`CanonicalUsage.billed_parts`
says what to price: the iterations when there are any (each priced on its own, since a
long-context tier applies per sampling step and an advisor iteration names its own
model), else the usage itself. A usage with iterations carries the flag ``"iterations"``
so the caller keeps the raw block until the ledger records them.

**Server tool use** (fees per request, not per token). Anthropic's
``usage.server_tool_use`` counts the call's server tool requests: ``web_search_requests``
becomes ``web_searches`` (priced per search), ``web_fetch_requests`` costs nothing beyond
its tokens (Anthropic's pricing) and is not kept; any other positive count (a server tool
whose fee is not priced) and a ``server_tool_use`` or ``web_search_requests`` that is not a
non-negative integer (ignored) set :data:`FLAG_SERVER_TOOL_USE`. Read at the top level
only: a call's searches are counted once, never per iteration. The Responses shape reads
the same key, which its adapter adds (Responses bills each ``web_search_call`` output
item and reports none in ``usage``).

**A provider-reported cost** (OpenRouter ``usage.cost``, in credits = USD) becomes
``reported_cost``, an exact Decimal string (``repr`` of the JSON number, never float
arithmetic). For a BYOK request (``is_byok: true``) ``cost`` is only OpenRouter's fee, so
``cost_details.upstream_inference_cost`` (billed by the provider to the user's own key)
is added. Pricing treats it as the ``actual`` cost and cross-checks its own figure.

**Inconsistent blocks.** When an OpenAI-style block reports more cached tokens than
prompt tokens, the reported prompt total is trusted: ``cache_read`` is clamped down to it
(so ``input`` becomes 0, never negative), then ``cache_write`` to what remains, and the
flag ``"cache_exceeds_input"`` is set. Likewise reasoning above output is clamped to
output with ``"reasoning_exceeds_output"``. A block that reports only some of its main
counters gets ``"incomplete"``.

**Hostile blocks.** ``None``, a missing block or one with none of the expected counters
gives ``source="missing"`` with zeros; the caller then estimates with
:func:`estimate_usage`. A counter that is negative, fractional, NaN, a bool, a string or
above :data:`MAX_TOKENS_PER_FIELD` raises :class:`UsageRejected`, as do a cost that is
not a non-negative number up to :data:`MAX_REPORTED_COST`, more than
:data:`MAX_ITERATIONS` iterations, and an iteration ``type`` or ``model`` that is not a
short printable string: the caller records the rejection and estimates. Every candidate
path of a bucket is checked, not only the one used. Nothing else is ever raised for
JSON-like input.

Streams are folded into one block by :mod:`sessionwarden.domain.usage.stream`.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from sessionwarden.config import API_MODES, ApiMode
from sessionwarden.domain.errors import UsageRejected
from sessionwarden.domain.usage.estimate import estimate_tokens, text_chars, tokens_from_chars
from sessionwarden.domain.usage.fields import (
    MAX_ITERATIONS,
    MAX_REPORTED_COST,
    MAX_TOKENS_PER_FIELD,
    Block,
    cache_split,
    count,
    details,
    either,
    label,
    reported_cost,
)

__all__ = [
    "FLAG_CACHE_EXCEEDS_INPUT",
    "FLAG_CACHE_SPLIT_MISMATCH",
    "FLAG_INCOMPLETE",
    "FLAG_ITERATIONS",
    "FLAG_PROMPT_PARTS_MISMATCH",
    "FLAG_REASONING_EXCEEDS_OUTPUT",
    "FLAG_SERVER_TOOL_USE",
    "MAX_ITERATIONS",
    "MAX_REPORTED_COST",
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


FLAG_CACHE_EXCEEDS_INPUT = "cache_exceeds_input"
FLAG_REASONING_EXCEEDS_OUTPUT = "reasoning_exceeds_output"
FLAG_INCOMPLETE = "incomplete"
FLAG_CACHE_SPLIT_MISMATCH = "cache_split_mismatch"
FLAG_PROMPT_PARTS_MISMATCH = "prompt_parts_mismatch"
FLAG_ITERATIONS = "iterations"
#: Server tool use whose fee is not priced: a positive ``usage.server_tool_use`` count
#: other than web searches (priced, :attr:`CanonicalUsage.web_searches`) and web fetches
#: (free beyond tokens), or a count that is not a non-negative integer. The flag keeps the
#: provider's block as ``raw_usage`` in the log instead of dropping those counts.
FLAG_SERVER_TOOL_USE = "server_tool_use"

_Count = Annotated[int, msgspec.Meta(ge=0)]


class CanonicalUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The token counts of one request in the canonical convention (see the module doc).

    Attributes:
        source: ``"provider"`` (reported), ``"estimated"`` (by :func:`estimate_usage`) or
            ``"missing"`` (nothing reported; all counts are 0).
        cache_write_1h_tokens: the part of ``cache_write_tokens`` written with a 1-hour
            lifetime (Anthropic); the rest is the default 5-minute write.
        flags: anomalies found while normalising, e.g. ``("cache_exceeds_input",)``.
        iterations: Anthropic's sampling iterations, each normalised on its own (empty
            when none were reported); see :attr:`billed_parts`.
        iteration_type: for an iteration, its ``type`` (``"compaction"``, ``"message"``…).
        model: for an iteration, the model it names (advisor and fallback iterations may
            run on another model than the request's), else ``""``.
        reported_cost: the provider's own figure for the request's cost in USD, an exact
            Decimal string (OpenRouter ``usage.cost``), or None.
        web_searches: the call's server-side web searches, billed per search
            (``server_tool_use.web_search_requests``); counted once per call, so an
            iteration's is always 0.
    """

    source: UsageSource
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_tokens: _Count = 0
    cache_write_tokens: _Count = 0
    reasoning_tokens: _Count = 0
    flags: tuple[str, ...] = ()
    cache_write_1h_tokens: _Count = 0
    iterations: tuple["CanonicalUsage", ...] = ()
    iteration_type: str = ""
    model: str = ""
    reported_cost: str | None = None
    web_searches: _Count = 0

    def __post_init__(self) -> None:
        """Reject negative counts on direct construction too (decoding checks ``ge=0``)."""
        for name in _COUNT_FIELDS:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative")
        if self.cache_write_1h_tokens > self.cache_write_tokens:
            raise ValueError("cache_write_1h_tokens is a part of cache_write_tokens")

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token: ``input + cache_read + cache_write``."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens (reasoning is already inside output)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def billed_parts(self) -> tuple["CanonicalUsage", ...]:
        """What to price: the iterations when any were reported, else this usage alone.

        The top-level counts leave compaction iterations out, so pricing them alone
        under-bills a compacting request; pricing both would bill twice.
        """
        return self.iterations or (self,)


_COUNT_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
    "web_searches",
)


def _with_split(
    write: int | None, split: tuple[int | None, int | None], flags: list[str]
) -> tuple[int | None, int]:
    """The write total (from the split when absent) and its 1-hour part, checked."""
    five, hour = split
    if five is None and hour is None:
        return write, 0
    parts = (five or 0) + (hour or 0)
    if write is None:
        write = parts
    elif parts != write:
        flags.append(FLAG_CACHE_SPLIT_MISMATCH)
    return write, min(hour or 0, write)


def _settle(
    prompt: int | None,
    output: int | None,
    cached: int | None,
    write: int | None,
    reasoning: int | None,
    hour: int,
    flags: list[str],
) -> CanonicalUsage:
    """OpenAI-style counts (the prompt total includes the cache) into disjoint buckets."""
    if prompt is None or output is None:
        flags.insert(0, FLAG_INCOMPLETE)
    total, output, reasoning = prompt or 0, output or 0, reasoning or 0
    read, written = cached or 0, write or 0
    if read + written > total:
        # The reported total is trusted: the cache buckets are cut down to fit in it.
        flags.append(FLAG_CACHE_EXCEEDS_INPUT)
        read = min(read, total)
        written = min(written, total - read)
    if reasoning > output:
        flags.append(FLAG_REASONING_EXCEEDS_OUTPUT)
        reasoning = output
    return CanonicalUsage(
        source="provider",
        input_tokens=total - read - written,
        output_tokens=output,
        cache_read_tokens=read,
        cache_write_tokens=written,
        cache_write_1h_tokens=min(hour, written),
        reasoning_tokens=reasoning,
        flags=tuple(flags),
    )


def _chat_shape(block: Block) -> CanonicalUsage | None:
    """Chat Completions and its provider variants (hermes-behaviour.md §3.2, §3.6)."""
    prompt = either(count(block, "prompt_tokens", ""), count(block, "input_tokens", ""))
    output = either(count(block, "completion_tokens", ""), count(block, "output_tokens", ""))
    p_details = details(block, "prompt_tokens_details")
    c_details = details(block, "completion_tokens_details")
    o_details = details(block, "output_tokens_details")
    where, c_where = "prompt_tokens_details.", "completion_tokens_details."
    cached = either(
        count(p_details, "cached_tokens", where),
        count(block, "cache_read_input_tokens", ""),  # Anthropic's name, via OpenRouter
        count(block, "prompt_cache_hit_tokens", ""),  # DeepSeek
        count(block, "cached_tokens", ""),  # Kimi (Moonshot)
    )
    missed = count(block, "prompt_cache_miss_tokens", "")  # DeepSeek
    write = either(
        count(p_details, "cache_write_tokens", where),  # OpenRouter
        count(p_details, "cache_creation_input_tokens", where),
        count(block, "cache_creation_input_tokens", ""),
        count(block, "cache_write_tokens", ""),
    )
    reasoning = either(
        count(c_details, "reasoning_tokens", c_where),
        count(o_details, "reasoning_tokens", "output_tokens_details."),
    )
    flags: list[str] = []
    write, hour = _with_split(write, cache_split(block, ""), flags)
    if all(v is None for v in (prompt, output, cached, missed, write, reasoning)):
        return None
    if missed is not None:
        parts = missed + (cached or 0) + (write or 0)
        if prompt is None:
            prompt = parts
        elif parts != prompt:
            flags.append(FLAG_PROMPT_PARTS_MISMATCH)
    return _settle(prompt, output, cached, write, reasoning, hour, flags)


def _responses_shape(block: Block) -> CanonicalUsage | None:
    """OpenAI Responses: ``input_tokens`` includes the cache (read and written)."""
    prompt = count(block, "input_tokens", "")
    output = count(block, "output_tokens", "")
    in_details = details(block, "input_tokens_details")
    out_details = details(block, "output_tokens_details")
    where = "input_tokens_details."
    cached = count(in_details, "cached_tokens", where)
    write = either(
        count(in_details, "cache_write_tokens", where),
        count(in_details, "cache_creation_tokens", where),
    )
    reasoning = count(out_details, "reasoning_tokens", "output_tokens_details.")
    if all(v is None for v in (prompt, output, cached, write, reasoning)):
        return None
    flags: list[str] = []
    searches = _server_tool_use(block.get("server_tool_use"), flags)
    usage = _settle(prompt, output, cached, write, reasoning, 0, flags)
    return msgspec.structs.replace(usage, web_searches=searches) if searches else usage


def _anthropic_counts(block: Block, where: str) -> tuple[CanonicalUsage, bool]:
    """One Anthropic usage object (top level or iteration), and whether it had a counter.

    ``input_tokens`` already excludes both cache buckets.
    """
    uncached = count(block, "input_tokens", where)
    output = count(block, "output_tokens", where)
    cache_read = count(block, "cache_read_input_tokens", where)
    cache_write = count(block, "cache_creation_input_tokens", where)
    out_details = details(block, "output_tokens_details", where)
    thinking = count(out_details, "thinking_tokens", f"{where}output_tokens_details.")
    flags: list[str] = [FLAG_INCOMPLETE] if uncached is None or output is None else []
    cache_write, hour = _with_split(cache_write, cache_split(block, where), flags)
    reported = any(v is not None for v in (uncached, output, cache_read, cache_write, thinking))
    output, reasoning = output or 0, thinking or 0
    if reasoning > output:
        flags.append(FLAG_REASONING_EXCEEDS_OUTPUT)
        reasoning = output
    usage = CanonicalUsage(
        source="provider",
        input_tokens=uncached or 0,
        output_tokens=output,
        cache_read_tokens=cache_read or 0,
        cache_write_tokens=cache_write or 0,
        cache_write_1h_tokens=hour,
        reasoning_tokens=reasoning,
        flags=tuple(flags),
    )
    return usage, reported


def _iterations(block: Block) -> tuple[CanonicalUsage, ...]:
    """Anthropic's ``usage.iterations[]``, each normalised (one level: no recursion)."""
    entries = block.get("iterations")
    if entries is None:
        return ()
    if not isinstance(entries, list | tuple):
        raise UsageRejected("iterations", f"expected a list, got {type(entries).__name__}")
    if len(entries) > MAX_ITERATIONS:
        raise UsageRejected("iterations", f"absurd (more than {MAX_ITERATIONS})")
    parsed = []
    for index, entry in enumerate(entries):
        where = f"iterations[{index}]."
        if not isinstance(entry, Mapping):
            raise UsageRejected(where[:-1], f"expected an object, got {type(entry).__name__}")
        usage, _ = _anthropic_counts(entry, where)
        parsed.append(msgspec.structs.replace(
            usage, iteration_type=label(entry, "type", where), model=label(entry, "model", where)
        ))
    return tuple(parsed)


def _anthropic_shape(block: Block) -> CanonicalUsage | None:
    """Anthropic Messages, with its cache-write split and its iterations."""
    usage, reported = _anthropic_counts(block, "")
    iterations = _iterations(block)
    if not reported and not iterations:
        return None
    added: list[str] = [FLAG_ITERATIONS] if iterations else []
    searches = _server_tool_use(block.get("server_tool_use"), added)
    if not added and not searches:
        return usage
    return msgspec.structs.replace(usage, iterations=iterations, web_searches=searches,
                                   flags=(*usage.flags, *added))


#: Server tools billed by their tokens alone (Anthropic's pricing): not flagged.
_FREE_SERVER_TOOLS = frozenset({"web_fetch_requests"})


def _server_tool_use(counts: Any, flags: list[str]) -> int:
    """The web searches a ``server_tool_use`` object counts (module doc, 'Server tool use').

    Appends :data:`FLAG_SERVER_TOOL_USE` to ``flags`` for an unpriced tool's positive
    count or junk; never raises (a junk count is ignored, not trusted).
    """
    if counts is None:
        return 0
    if not isinstance(counts, Mapping):
        flags.append(FLAG_SERVER_TOOL_USE)
        return 0
    searches, unpriced = 0, False
    for key, value in counts.items():
        if key == "web_search_requests":
            try:
                searches = count(counts, key, "server_tool_use.") or 0
            except UsageRejected:
                unpriced = True
        elif key not in _FREE_SERVER_TOOLS and isinstance(value, int) \
                and not isinstance(value, bool) and value > 0:
            unpriced = True
    if unpriced:
        flags.append(FLAG_SERVER_TOOL_USE)
    return searches


def _relayed_anthropic(block: Block) -> bool:
    """A chat-wire block that is Anthropic's usage object, iterations included (module doc)."""
    return (isinstance(block.get("iterations"), list | tuple)
            and "prompt_tokens" not in block and "completion_tokens" not in block)


def normalise_usage(api_mode: ApiMode, usage_block: object) -> CanonicalUsage:
    """Turn a provider's ``usage`` object into :class:`CanonicalUsage`.

    Args:
        api_mode: the wire protocol the block came from.
        usage_block: the decoded ``usage`` JSON value (a mapping), or None when absent.
            For a stream, the last usage-bearing chunk's block (chat), the
            ``response.completed`` event's ``response.usage`` (Responses) or the folded
            :class:`~sessionwarden.domain.usage.stream.AnthropicStreamUsage` block.

    Returns:
        The canonical counts; ``source="missing"`` (all zero) when nothing was reported.
        A block with only a ``cost`` is ``"provider"`` and ``"incomplete"``.

    Raises:
        UsageRejected: a counter, cost or nested object cannot be trusted (module doc).
        ValueError: ``api_mode`` is not one of :data:`API_MODES` (a programming error).
    """
    if api_mode not in API_MODES:
        raise ValueError(f"unknown api_mode {api_mode!r}")
    if usage_block is None:
        return CanonicalUsage(source="missing")
    if not isinstance(usage_block, Mapping):
        raise UsageRejected("", f"expected an object, got {type(usage_block).__name__}")
    if api_mode == "anthropic_messages":
        usage = _anthropic_shape(usage_block)
    elif api_mode == "codex_responses":
        usage = _responses_shape(usage_block)
    elif _relayed_anthropic(usage_block):
        usage = _anthropic_shape(usage_block)
    else:
        usage = _chat_shape(usage_block)
    cost = reported_cost(usage_block)
    if usage is None:
        if cost is None:
            return CanonicalUsage(source="missing")
        usage = CanonicalUsage(source="provider", flags=(FLAG_INCOMPLETE,))
    return usage if cost is None else msgspec.structs.replace(usage, reported_cost=cost)


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
