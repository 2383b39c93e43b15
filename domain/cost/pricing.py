"""Prices and the cost of one call: exact Decimal arithmetic, an honest status, no float.

A :class:`Price` is USD per million tokens for each canonical usage bucket
(``domain/usage/canonical.py``), optional per-request and per-web-search fees and
optional long-context tiers; it comes from a config override or from genai-prices
(``domain/cost/library.py``), and a :class:`~sessionwarden.domain.cost.price_book.PriceBook`
answers a :class:`PriceLookup` for a call. :func:`cost` turns usage and a lookup into a
:class:`Cost`.

Rules:

The overview: docs/architecture/costs-and-caps.md, 'Prices'.

After hermes-behaviour §3.3, each with the bug it avoids:

- The prompt buckets are disjoint, each at its own rate: ``input`` at the input price,
  ``cache_read`` at the cache-read price, ``cache_write`` at the cache-write price, except
  its 1-hour part (``cache_write_1h_tokens``, Anthropic) at the ``cache_write_1h`` price.
  Reasoning tokens are part of ``output`` and priced with it, never added again.
- A cache bucket without its own price is billed at the *input* price, as genai-prices
  does (a model without a cache discount bills cached tokens as ordinary input), except
  a 1-hour cache write without its own price: it is billed at **twice** the input price,
  Anthropic's published rate (only Anthropic reports 1-hour writes; genai-prices lists
  ``cache_write_1h_mtok`` for its models, and a config override may set ``cache_write_1h``).
  An ``input`` or ``output`` bucket with tokens and no price makes the cost ``unknown``.
- Tiers are a cliff, as in genai-prices and Hermes: when the prompt (input + cache read
  + cache write) is *strictly* above a tier's ``above``, that tier's rates apply to every
  token of the request; a rate the tier leaves None falls back to the base rate.
- Iterations (Anthropic ``usage.iterations[]``, ``domain/usage/canonical.py``): what is priced is
  :attr:`~sessionwarden.domain.usage.canonical.CanonicalUsage.billed_parts`, each iteration on its
  own (its own tier, since a tier applies per sampling step) and summed; a compaction
  iteration is billed like any other (price libraries bill it $0, the bug this avoids).
  An iteration naming another model than the call's (an advisor or fallback iteration)
  is priced at that model's price, given by the caller (``models``); one with no price
  makes the whole cost ``unknown``.
- The per-request fee is added once per call, whatever the number of iterations.
- Web searches (``CanonicalUsage.web_searches``: Anthropic's server-side searches, the
  Responses ``web_search_call`` items) are added once per call, ``web_searches`` ×
  ``web_search`` (USD per search); searches with no ``web_search`` price make the cost
  ``unknown`` ("no web_search price in …"), never a silent $0. Web fetches cost only
  their tokens; another server tool's fee is not priced (the usage flags it).
- Status: ``included`` ($0) for a subscription route; ``unknown`` with **no amount** when
  there is no price or the usage is missing (never a silent $0, the bug of Hermes's
  missing-usage path); ``estimated`` when the usage is our estimate; ``actual``
  otherwise.
- A provider-reported cost (OpenRouter ``usage.cost``), when given, *is* the ``actual``
  amount (source ``provider-reported``); ours is kept as ``computed`` and a difference
  above 1 % of ours sets :data:`FLAG_COST_MISMATCH`. A negative or non-finite report is
  ignored with :data:`FLAG_REPORTED_REJECTED` (a hostile provider controls it).

Amounts are exact: products and sums are computed in a 200-digit context (far above any
token count times any configured price), and the division by a million is a decimal
shift. Amounts are never rounded here; views round for display. msgspec encodes Decimal
as a string, so a stored amount stays exact.

Cost is monotone in each token count provided no tier is cheaper than the one below it
(true of every tier in the bundled genai-prices data; a config override has no tiers).
"""

import decimal
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

import msgspec
from sessionwarden.domain.usage.canonical import CanonicalUsage

__all__ = [
    "FLAG_COST_MISMATCH",
    "FLAG_REPORTED_REJECTED",
    "FLAG_USAGE_MISSING",
    "SOURCE_INCLUDED",
    "SOURCE_OVERRIDE",
    "SOURCE_REPORTED",
    "Cost",
    "CostStatus",
    "Price",
    "PriceLookup",
    "PriceTier",
    "cost",
]

CostStatus = Literal["actual", "estimated", "included", "unknown"]

SOURCE_OVERRIDE = "override"
SOURCE_INCLUDED = "included"
SOURCE_REPORTED = "provider-reported"

FLAG_COST_MISMATCH = "reported_cost_differs"
FLAG_REPORTED_REJECTED = "reported_cost_rejected"
FLAG_USAGE_MISSING = "usage_missing"

_MILLION_EXP = -6
_TWO = Decimal(2)
_EXACT = decimal.Context(prec=200, traps=[decimal.InvalidOperation, decimal.Overflow])


class PriceTier(msgspec.Struct, frozen=True, kw_only=True):
    """The rates of a request whose prompt is strictly above ``above`` tokens.

    Rates are USD per million tokens; None falls back to the base rate of the price.
    """

    above: int
    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """One model's price: USD per million tokens per bucket, where it came from.

    Attributes:
        input, output, cache_read, cache_write: base rates; None = not priced for that
            kind (a cache kind then bills at ``input``, see the module doc).
        cache_write_1h: the rate of a 1-hour cache write (Anthropic); None = twice
            ``input`` (see the module doc).
        request: a fee per request in USD, or None.
        web_search: the fee of one server-side web search in USD, or None (not priced:
            a call that made searches is then ``unknown``).
        tiers: higher rates for long prompts, by ascending ``above``.
        source: ``"override"``, ``"genai-prices@<version>"``, ``"provider-listing@<version>"``.
        version: the version of the price data: the library version, a listing's hash,
            ``"config"`` for a full override, ``"config+<source>"`` for a partial one.
        variant: the price variant the request context selected, e.g.
            ``"service_tier=flex"``; empty for the standard prices.
    """

    source: str
    version: str
    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    request: Decimal | None = None
    tiers: tuple[PriceTier, ...] = ()
    variant: str = ""
    cache_write_1h: Decimal | None = None
    web_search: Decimal | None = None

    def rates(self, prompt_tokens: int) -> PriceTier:
        """The rates that apply to a request of ``prompt_tokens`` prompt tokens."""
        tier: PriceTier | None = None
        for candidate in self.tiers:
            if prompt_tokens > candidate.above:
                tier = candidate
        if tier is None:
            return PriceTier(above=-1, input=self.input, output=self.output,
                             cache_read=self.cache_read, cache_write=self.cache_write,
                             cache_write_1h=self.cache_write_1h)
        return PriceTier(
            above=tier.above,
            input=self.input if tier.input is None else tier.input,
            output=self.output if tier.output is None else tier.output,
            cache_read=self.cache_read if tier.cache_read is None else tier.cache_read,
            cache_write=self.cache_write if tier.cache_write is None else tier.cache_write,
            cache_write_1h=(self.cache_write_1h if tier.cache_write_1h is None
                            else tier.cache_write_1h),
        )


class PriceLookup(msgspec.Struct, frozen=True, kw_only=True):
    """What the price book knows of one (provider, model).

    Attributes:
        kind: ``"price"`` (then ``price`` is set), ``"included"`` (billing included in a
            subscription) or ``"unknown"`` (no price; ``reason`` says why).
        reason: for ``unknown``, a short line for views (``"no price for model m at openai
            in genai-prices@0.2.3"``); empty otherwise.
    """

    kind: Literal["price", "included", "unknown"]
    price: Price | None = None
    reason: str = ""


class Cost(msgspec.Struct, frozen=True, kw_only=True):
    """The cost of one call.

    Attributes:
        amount: exact USD, None when ``unknown`` (never a made-up $0).
        status: ``actual`` / ``estimated`` / ``included`` / ``unknown``.
        source: the price's source, ``"provider-reported"``, ``"included"``, or ``"none"``.
        version: the price data's version (``""`` when none).
        computed: our own amount when a provider-reported cost was given (the cross-check).
        flags: e.g. ``("reported_cost_differs",)``; see the ``FLAG_*`` constants.
        reason: why the cost is unknown, for views; empty otherwise.
    """

    amount: Decimal | None
    status: CostStatus
    source: str
    version: str
    computed: Decimal | None = None
    flags: tuple[str, ...] = ()
    reason: str = ""


def _hour_rate(rates: PriceTier) -> Decimal | None:
    """The 1-hour cache-write rate: its own, else twice the input rate (Anthropic's)."""
    if rates.cache_write_1h is not None:
        return rates.cache_write_1h
    return None if rates.input is None else _EXACT.multiply(rates.input, _TWO)


def _part(usage: CanonicalUsage, price: Price) -> tuple[Decimal | None, str]:
    """The amount of one billed part, in USD per million tokens (not yet shifted)."""
    rates = price.rates(usage.prompt_tokens)
    hour = usage.cache_write_1h_tokens
    buckets = (
        ("input", usage.input_tokens, rates.input),
        ("output", usage.output_tokens, rates.output),
        ("cache_read", usage.cache_read_tokens,
         rates.input if rates.cache_read is None else rates.cache_read),
        ("cache_write", usage.cache_write_tokens - hour,
         rates.input if rates.cache_write is None else rates.cache_write),
        ("cache_write_1h", hour, _hour_rate(rates)),
    )
    total = Decimal(0)
    for kind, tokens, rate in buckets:
        if tokens == 0:
            continue
        if rate is None:
            return None, f"no {kind} price in {price.source}"
        total = _EXACT.add(total, _EXACT.multiply(Decimal(tokens), rate))
    return total, ""


def _priced(usage: CanonicalUsage, price: Price,
            models: Callable[[str], PriceLookup] | None = None) -> tuple[Decimal | None, str]:
    """Our amount for ``usage`` at ``price``, or None and the reason it cannot be priced.

    Each billed part (an iteration, or the usage itself) at its own rates; a part naming
    another model at that model's price from ``models``.
    """
    total = Decimal(0)
    for part in usage.billed_parts:
        part_price = price
        if part.model and models is not None:
            lookup = models(part.model)
            if lookup.kind == "included":
                continue
            if lookup.price is None:
                return None, lookup.reason or f"no price for the iteration's model {part.model!r}"
            part_price = lookup.price
        amount, reason = _part(part, part_price)
        if amount is None:
            return None, reason
        total = _EXACT.add(total, amount)
    total = total.scaleb(_MILLION_EXP, _EXACT)
    if price.request is not None:
        total = _EXACT.add(total, price.request)
    if usage.web_searches:
        if price.web_search is None:
            return None, f"no web_search price in {price.source}"
        total = _EXACT.add(total, _EXACT.multiply(Decimal(usage.web_searches),
                                                  price.web_search))
    return total, ""


def _differs(reported: Decimal, ours: Decimal) -> bool:
    """True when ``reported`` is more than 1 % away from ``ours`` (any difference from 0)."""
    gap = abs(_EXACT.subtract(reported, ours))
    return _EXACT.multiply(gap, Decimal(100)) > ours if ours > 0 else gap != 0


def cost(usage: CanonicalUsage, lookup: PriceLookup, *,
         reported: Decimal | None = None,
         models: Callable[[str], PriceLookup] | None = None) -> Cost:
    """The cost of a call with ``usage`` priced by ``lookup`` (rules in the module doc).

    Args:
        usage: the call's canonical usage (``source`` decides ``estimated``).
        lookup: the price book's answer for the call's provider and model.
        reported: the cost the provider reported for this call, if any.
        models: the price book's answer for another model of the same provider, for an
            iteration that names its own model; None prices every iteration by ``lookup``.
    """
    if lookup.kind == "included":
        return Cost(amount=Decimal(0), status="included", source=SOURCE_INCLUDED,
                    version="config")
    price = lookup.price if lookup.kind == "price" else None
    source = "none" if price is None else price.source
    version = "" if price is None else price.version
    ours: Decimal | None = None
    reason = lookup.reason or "no price"
    flags: list[str] = []
    if usage.source == "missing":
        flags.append(FLAG_USAGE_MISSING)
        reason = "the provider reported no usage"
    elif price is not None:
        ours, reason = _priced(usage, price, models)
    if reported is not None and (not reported.is_finite() or reported < 0):
        flags.append(FLAG_REPORTED_REJECTED)
        reported = None
    if reported is not None:
        if ours is not None and _differs(reported, ours):
            flags.append(FLAG_COST_MISMATCH)
        return Cost(amount=reported, status="actual", source=SOURCE_REPORTED,
                    version=version, computed=ours, flags=tuple(flags))
    if ours is None:
        return Cost(amount=None, status="unknown", source=source, version=version,
                    flags=tuple(flags), reason=reason)
    status: CostStatus = "estimated" if usage.source == "estimated" else "actual"
    return Cost(amount=ours, status=status, source=source, version=version,
                flags=tuple(flags))
