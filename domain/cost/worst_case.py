"""The worst-case cost of a call: what a spend cap must hold before the call is sent.

Issue 12, "Spend caps"; used by ``sessionwarden.domain.cost.caps``. The worst case is the
estimated input at the highest price an input token can be billed at, plus the output
bound at the output price, plus any per-request fee, in exact :class:`~decimal.Decimal`
(peers.md, "money is stored as floats": a float budget counter drifts).

- The caller passes :func:`worst_input_price` (a cache write is billed above a plain input
  token on Anthropic, 1.25x, a 1-hour write 2x) and, when the input estimate is above a
  long-context tier, the tier's prices (hermes-behaviour.md §3.3: above the tier the
  higher rates apply to the whole request; #109976 is the undercount of forgetting it).
- The input estimate is the caller's: before governance has counted the history, the
  UsageLedgerActor takes :func:`prompt_tokens` of the request as the client sent it (the
  text of its items and its tool schemas, which are billed as input too, at chars / 4,
  and :data:`MEDIA_PART_TOKENS` for each image, audio or file part: issue 21 §7, 200
  ``image_url`` parts reserved $0 of input and were billed ~765 tokens each).
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
from sessionwarden.domain.cost.pricing import PriceLookup
from sessionwarden.domain.usage.estimate import text_chars, tokens_from_chars

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "MEDIA_PART_TOKENS",
    "MEDIA_PART_TYPES",
    "call_worst_case",
    "media_parts",
    "media_tokens",
    "output_bound",
    "prompt_chars",
    "prompt_tokens",
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

#: The input tokens one image, audio or file part is reserved at (its bytes are no
#: text: chars / 4 counts none of them, and a URL says nothing of the picture's size).
#: At least each per-image maximum the providers document: OpenAI's tile models 1,445
#: (``detail: high``: 85 + 170 for each of at most 8 tiles of 512 px, a picture scaled to
#: 768 x 2,048), its patch models 3,779 (at most 1,536 patches of 32 px, times 2.46 for
#: gpt-4.1-nano, the largest multiplier), Anthropic's ~1,600 (an image is scaled to
#: ~1.15 megapixels, w x h / 750 tokens); Hermes estimates 1,600 (6,400 chars). A
#: ``detail: low`` image (85) is counted as high: the detail is a hint a server may not
#: follow. Not covered: gpt-4o-mini counts an image as up to ~48,000 tokens (2,833 +
#: 5,667 a tile, at its lower rate), and a PDF ``file`` part is billed its text and a
#: picture of each page: for those the reservation is low by the difference.
MEDIA_PART_TOKENS = 4_000
#: The content parts that are media, on every wire we read: chat-completions
#: (``image_url``, ``input_audio``, ``file``), Responses (``input_image``, ``input_file``,
#: ``input_audio``), Anthropic (``image``, ``document``) and chat's ``audio``.
MEDIA_PART_TYPES = frozenset({"image_url", "input_image", "image", "input_audio", "audio",
                              "file", "input_file", "document"})


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
    return total + _tool_chars(fields)


def _tool_chars(fields: Mapping[str, Any]) -> int:
    """The length of the tool schemas' JSON (``tools``, ``functions``): billed as input."""
    total = 0
    for key in ("tools", "functions"):
        if fields.get(key) is not None:
            total += len(msgspec.json.encode(fields[key]))
    return total


def media_parts(node: object) -> int:
    """How many media parts (:data:`MEDIA_PART_TYPES`) a decoded item holds, at any depth.

    An object whose ``type`` is a media type counts once (its data is not looked into);
    every other object and list is searched, however deep (iteratively: the walk is
    linear in the item), so a picture inside a tool result counts as one in a user
    message does, and nesting hides none.
    """
    count = 0
    stack: list[object] = [node]
    while stack:
        current = stack.pop()
        # Decoded JSON: dicts and lists only (an ABC check cost more than the walk).
        if isinstance(current, dict):
            kind = current.get("type")
            if isinstance(kind, str) and kind in MEDIA_PART_TYPES:
                count += 1
                continue
            for value in current.values():
                if isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(current, list):
            for value in current:
                if isinstance(value, dict | list):
                    stack.append(value)
    return count


def prompt_tokens(items: Sequence[bytes], fields: Mapping[str, Any]) -> int:
    """The input tokens a request as sent may bill, for its worst case.

    :func:`prompt_chars` at chars / 4, plus :data:`MEDIA_PART_TOKENS` for each media part
    of its items (:func:`media_parts`), each item decoded once. An item that does not
    decode counts its bytes as text and no part.
    """
    chars = parts = 0
    for item in items:
        try:
            decoded = msgspec.json.decode(item)
        except msgspec.DecodeError:
            chars += len(item)
            continue
        chars += text_chars(decoded)
        parts += media_parts(decoded)
    return tokens_from_chars(chars + _tool_chars(fields)) + parts * MEDIA_PART_TOKENS


def media_tokens(items: Sequence[bytes]) -> int:
    """:data:`MEDIA_PART_TOKENS` for each media part of ``items`` (raw JSON items).

    For an input estimate that counted the text only (governance's, chars / 4).
    """
    parts = 0
    for item in items:
        try:
            parts += media_parts(msgspec.json.decode(item))
        except msgspec.DecodeError:
            continue
    return parts * MEDIA_PART_TOKENS



def worst_input_price(input_price: Decimal, cache_write_price: Decimal | None = None,
                      cache_write_1h_price: Decimal | None = None) -> Decimal:
    """The most one input token can cost: a cache write is billed above a plain input.

    ``cache_write_1h_price`` is a price's 1-hour write rate (Anthropic, 2x input;
    :attr:`~sessionwarden.domain.cost.pricing.Price.cache_write_1h`), which is dearer still.
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
    non-positive value counts as none: the provider will reject it, and the default
    bound is safe. A boolean or non-integer one (``"100"``, ``100.0``) counts as none
    too, but the wire adapter refuses it first (issue 21 §7: a lenient server reads
    it as the number, which a default bound below it would not hold).
    """
    if not isinstance(body, Mapping):
        return None
    stated = [value for key in ("max_completion_tokens", "max_tokens", "max_output_tokens")
              if isinstance(value := body.get(key), int) and not isinstance(value, bool)
              and value > 0]
    return max(stated, default=None)


def requested_choices(body: Any) -> int:
    """How many answers a request asks for (chat's ``n``); 1 if it states none or no valid one.

    Each answer is billed its own output tokens, up to the limit each. A non-integer ``n``
    (``"100"``, ``100.0``) is refused by the wire adapter before this is asked: a lenient
    server bills the answers it reads there (issue 21 §7).
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
