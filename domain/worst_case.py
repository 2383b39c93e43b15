"""The worst-case cost of a call: what a spend cap must hold before the call is sent.

Issue 12, "Spend caps"; used by ``sessionwarden.domain.budgets``. The worst case is the
estimated input at the highest price an input token can be billed at, plus the output
bound at the output price, plus any per-request fee, in exact :class:`~decimal.Decimal`
(peers.md, "money is stored as floats": a float budget counter drifts).

- The caller passes :func:`worst_input_price` (a cache write is billed above a plain input
  token on Anthropic, 1.25x, a 1-hour write 2x) and, when the input estimate is above a
  long-context tier, the tier's prices (hermes-behaviour.md §3.3: above the tier the
  higher rates apply to the whole request; #109976 is the undercount of forgetting it).
- The input estimate is the caller's: before governance has counted the history, the
  UsageLedgerActor takes :func:`prompt_chars` of the request as the client sent it (the
  text of its items, and its tool schemas, which are billed as input too).
- The output bound (:func:`output_bound`) is the request's limit
  (:func:`requested_max_tokens`), no more than the model's ``max_output_tokens`` (the
  provider cannot produce more), else the model's, else :data:`DEFAULT_MAX_OUTPUT_TOKENS`,
  times the answers asked for (:func:`requested_choices`, chat's ``n``: each is billed).
  Reasoning tokens are output tokens inside that same limit on every wire.
"""

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import msgspec
from sessionwarden.domain.pricing import PriceLookup
from sessionwarden.domain.usage_estimate import text_chars

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "call_worst_case",
    "output_bound",
    "prompt_chars",
    "requested_choices",
    "requested_max_tokens",
    "worst_case",
    "worst_input_price",
]

#: The output bound when neither the request nor the model states one. 32,768 covers the
#: default output limits of the common chat models (gpt-4o 16,384, gpt-4.1 32,768, Claude
#: Sonnet's 8,192 default) so a cap holds for them; a model that may write more (reasoning
#: models, 64k-128k) should state ``max_output_tokens`` in ``[[models]]``, or the client
#: ``max_tokens``. Higher would refuse calls that fit; the settled cost is exact anyway.
#: A model that writes past it can overshoot a cap by the difference: the one gap a
#: reservation cannot close without putting a limit on the forwarded request.
DEFAULT_MAX_OUTPUT_TOKENS = 32_768
_MILLION = Decimal(1_000_000)
_ZERO = Decimal(0)


def prompt_chars(items: Sequence[bytes], fields: Mapping[str, Any]) -> int:
    """The characters of text a request's model reads: its items' text and its tools.

    ``items`` are the conversation's raw JSON items; one that does not decode counts its
    bytes (the provider will likely refuse it, and an estimate must never be low).
    Tool schemas (``tools``, ``functions``) are counted as their JSON's length.
    """
    total = 0
    for item in items:
        try:
            total += text_chars(msgspec.json.decode(item))
        except msgspec.DecodeError:
            total += len(item)
    for key in ("tools", "functions"):
        if fields.get(key) is not None:
            total += len(msgspec.json.encode(fields[key]))
    return total


def worst_input_price(input_price: Decimal, cache_write_price: Decimal | None = None,
                      cache_write_1h_price: Decimal | None = None) -> Decimal:
    """The most one input token can cost: a cache write is billed above a plain input.

    ``cache_write_1h_price`` is a price's 1-hour write rate (Anthropic, 2x input;
    :attr:`~sessionwarden.domain.pricing.Price.cache_write_1h`), which is dearer still.
    """
    rates = [r for r in (cache_write_price, cache_write_1h_price) if r is not None]
    return max([input_price, *rates])


def worst_case(input_tokens_estimate: int, max_output_tokens: int,
               input_price_per_mtok: Decimal, output_price_per_mtok: Decimal,
               request_fee: Decimal = _ZERO) -> Decimal:
    """The most a call can cost in USD: prices are per million tokens.

    Exact: Decimal's 28 significant digits hold any token count times any real price.
    Negative token counts count as 0.
    """
    tokens = (Decimal(max(input_tokens_estimate, 0)) * input_price_per_mtok
              + Decimal(max(max_output_tokens, 0)) * output_price_per_mtok)
    return tokens / _MILLION + request_fee


def requested_max_tokens(body: Any) -> int | None:
    """The output limit a request body states, any wire shape; None if none or invalid.

    ``max_completion_tokens`` (chat, newer), ``max_tokens`` (chat, Anthropic) and
    ``max_output_tokens`` (the Responses API): when a body states several, the largest
    counts, since which one a provider honours is the provider's (one that reads
    ``max_tokens`` past a tiny ``max_completion_tokens`` would overshoot the cap). A
    non-positive, boolean or non-integer value counts as none: the provider will
    reject it, and the default bound is safe.
    """
    if not isinstance(body, Mapping):
        return None
    stated = [value for key in ("max_completion_tokens", "max_tokens", "max_output_tokens")
              if isinstance(value := body.get(key), int) and not isinstance(value, bool)
              and value > 0]
    return max(stated, default=None)


def requested_choices(body: Any) -> int:
    """How many answers a request asks for (chat's ``n``); 1 if it states none or no valid one.

    Each answer is billed its own output tokens, up to the limit each.
    """
    value = body.get("n") if isinstance(body, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        return value
    return 1


def output_bound(requested: int | None, model_max: int | None, choices: int = 1) -> int:
    """The output tokens to reserve for a call.

    The request's limit, no more than the model's ``max_output_tokens``; else the model's;
    else :data:`DEFAULT_MAX_OUTPUT_TOKENS`; times ``choices``, the answers asked for.
    """
    if requested is not None and model_max is not None:
        each = min(requested, model_max)
    elif requested is not None:
        each = requested
    else:
        each = model_max if model_max is not None else DEFAULT_MAX_OUTPUT_TOKENS
    return each * max(choices, 1)


def call_worst_case(lookup: PriceLookup, input_tokens_estimate: int,
                    max_output_tokens: int) -> Decimal | None:
    """The worst case of a call under ``lookup``: None when it has no price.

    An ``included`` route costs $0. The rates are the tier the input estimate falls in
    (a cliff: the tier's rates apply to the whole request); an input or output without
    a rate is no price at all.
    """
    if lookup.kind == "included":
        return _ZERO
    price = lookup.price
    if lookup.kind != "price" or price is None:
        return None
    rates = price.rates(input_tokens_estimate)
    if rates.input is None or rates.output is None:
        return None
    return worst_case(input_tokens_estimate, max_output_tokens,
                      worst_input_price(rates.input, rates.cache_write, rates.cache_write_1h),
                      rates.output,
                      price.request or _ZERO)
