"""The genai-prices adapter: our provider names to its providers, its prices to :class:`Price`.

Read-only use of the price data bundled in the ``genai-prices`` wheel
(``genai_prices.data.providers``). The library's own ``calc_price`` reads a *global*
snapshot that its ``UpdatePrices`` can replace with one downloaded from GitHub; we never
call either, and read the bundled list directly, so a lookup cannot fetch anything and
its answer depends only on the installed version (recorded as ``genai-prices@<version>``).

Rules:

The overview: docs/architecture/costs-and-caps.md, 'Prices'.

Importing the data takes 0.5-1.5 s, so it happens once, on the first
:func:`load_library` call, not when this module is imported.

**Which library provider prices a call** (hermes-behaviour §3.4, with its guesswork
removed), first match wins:

1. the provider's ``base_url`` matches a library provider's ``api_pattern`` (the bill
   comes from whoever serves the URL: a provider named ``anthropic`` whose base URL is
   ``openrouter.ai`` is billed by OpenRouter);
2. the provider's *name*, lower-cased, is a library provider id (``openai``,
   ``anthropic``, ``openrouter``, ``google``, ``deepseek``, ``x-ai``...) or one of
   :data:`NAME_ALIASES` (``gemini`` and ``vertex`` → ``google``, ``bedrock`` → ``aws``,
   ``xai``/``grok`` → ``x-ai``, ``kimi``/``moonshot`` → ``moonshotai``...);
3. otherwise none: the call's price is unknown. The library's own fuzzy matches are not
   used: its provider match "contains ``openai``" would price a local
   ``openai-compatible`` server as OpenAI, and its guess of the provider from the model
   name would price a local ``gpt-oss`` or ``llama`` as a cloud model.

The model is then found by the library's own matching (case-insensitive, its aliases,
dated ids, and its one-step fallbacks such as Azure → OpenAI).

**Conversion** (mirrors the library's ``ModelPrice`` for the units we count):
``input_mtok``, ``output_mtok``, ``cache_read_mtok``, ``cache_write_mtok`` (else the
5-minute ``cache_write_5m_mtok``), ``cache_write_1h_mtok`` (Anthropic's 1-hour cache
write, 2x input where listed), ``requests_kcount`` / 1000 as a per-request fee and
``web_searches_kcount`` / 1000 as a per-search fee (``Price.web_search``).
Its per-kind ``TieredPrices`` (a cliff: above ``start`` prompt tokens the higher price
applies to every token of the request) become :class:`PriceTier` rows, one per distinct
start. Prices by date (a ``ConditionalPrice`` with a start date or time of day) are
resolved at the request time given by the caller; service tiers, batch processing and
the like (the library's ``price_variants``) by a context the caller passes. A model
listed with no price at all (``:free`` models) costs $0, as in the library; one priced
only in units we do not count (audio hours, pages) is unknown. Other units (audio,
image, other tool calls, a separate reasoning price) are not priced here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec
from sessionwarden.domain.cost.pricing import Price, PriceTier

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, ModelPrice, Provider, TieredPrices

__all__ = ["NAME_ALIASES", "Library", "load_library"]

#: Our provider names that are not a genai-prices id, and the id they mean.
NAME_ALIASES: dict[str, str] = {
    "gemini": "google",
    "google-gemini": "google",
    "google-ai-studio": "google",
    "vertex": "google",
    "vertex-ai": "google",
    "google-vertex": "google",
    "bedrock": "aws",
    "aws-bedrock": "aws",
    "xai": "x-ai",
    "grok": "x-ai",
    "kimi": "moonshotai",
    "moonshot": "moonshotai",
    "openai-api": "openai",
    "mistralai": "mistral",
    "azure-openai": "azure",
}



class Library:
    """The bundled price data of one genai-prices version, looked up without I/O."""

    def __init__(self, providers: Sequence[Provider], version: str) -> None:
        """Index ``providers`` (the library's bundled list) published as ``version``."""
        self.version = version
        self.source = f"genai-prices@{version}"
        self._providers = list(providers)
        self._by_id = {p.id: p for p in self._providers}
        self._prices: dict[int, Price | None] = {}
        # Both searches scan every provider or model with regexes; a daemon asks about
        # the same few pairs again and again (pricing must stay well under 50 us a call).
        self._provider_cache: dict[tuple[str, str | None], Provider | None] = {}
        self._model_cache: dict[tuple[str, str], ModelInfo | None] = {}

    def provider_for(self, name: str, base_url: str | None) -> Provider | None:
        """The library provider that bills ``name`` at ``base_url`` (rules in the module doc)."""
        key = (name, base_url)
        if key not in self._provider_cache:
            self._provider_cache[key] = self._find_provider(name, base_url)
        return self._provider_cache[key]

    def _find_provider(self, name: str, base_url: str | None) -> Provider | None:
        if base_url and urlsplit(base_url).scheme in ("http", "https"):
            for provider in self._providers:
                if re.match(provider.api_pattern, base_url):
                    return provider
        lowered = name.strip().lower()
        return self._by_id.get(NAME_ALIASES.get(lowered, lowered))

    def price(self, provider: Provider, model: str, at: datetime,
              context: Mapping[str, str] | None = None) -> Price | None:
        """The price of ``model`` at ``provider`` at time ``at``; None when not listed.

        ``context`` selects the library's price variants, e.g. ``{"service_tier":
        "flex"}`` or ``{"processing": "batch"}``; as in the library, it applies only to a
        model of the provider itself, not to one found through a fallback provider.
        """
        pair = (provider.id, model)
        if pair not in self._model_cache:
            self._model_cache[pair] = provider.find_model(model, all_providers=self._providers)
        info = self._model_cache[pair]
        if info is None:
            return None
        if context and any(info is own for own in provider.models):
            # a variant is a fresh copy each time (and may depend on the date): no cache
            price = self.convert(info.get_prices(at, context))
            variant = ",".join(f"{k}={v}" for k, v in sorted(context.items()))
            return None if price is None else msgspec.structs.replace(price, variant=variant)
        model_price = info.get_prices(at)
        # get_prices returns the library's own object when no price context is given:
        # its id is stable for the process, so the conversion is done once.
        key = id(model_price)
        if key not in self._prices:
            self._prices[key] = self.convert(model_price)
        return self._prices[key]

    def convert(self, model_price: ModelPrice) -> Price | None:
        """Our :class:`Price` for one library price set; None when it prices no token."""
        return _convert(model_price, self.source, self.version)


def _field(model_price: ModelPrice, *names: str) -> Decimal | TieredPrices | None:
    for name in names:
        value: Decimal | TieredPrices | None = model_price.__dict__.get(name)
        if value is not None:
            return value
    return None


def _at(value: Decimal | TieredPrices | None, above: int) -> Decimal | None:
    """The rate that applies to a request of more than ``above`` prompt tokens."""
    if value is None or isinstance(value, Decimal):
        return value
    rate = value.base
    for tier in value.tiers:
        if tier.start <= above:
            rate = tier.price
    return rate


def _convert(model_price: ModelPrice, source: str, version: str) -> Price | None:
    """Our :class:`Price` for the library's ``ModelPrice``; None when it prices no token."""
    values = {
        "input": _field(model_price, "input_mtok"),
        "output": _field(model_price, "output_mtok"),
        "cache_read": _field(model_price, "cache_read_mtok"),
        "cache_write": _field(model_price, "cache_write_mtok", "cache_write_5m_mtok"),
        "cache_write_1h": _field(model_price, "cache_write_1h_mtok"),
    }
    requests = _field(model_price, "requests_kcount")
    per_request = _at(requests, 0)
    fee = None if per_request is None else per_request.scaleb(-3)  # per 1000 requests
    searches = _at(_field(model_price, "web_searches_kcount"), 0)
    per_search = None if searches is None else searches.scaleb(-3)  # per 1000 searches
    if all(v is None for v in values.values()) and fee is None and per_search is None:
        if any(v is not None for v in model_price.__dict__.values()):
            return None  # priced only in units we do not count
        zero = Decimal(0)
        return Price(input=zero, output=zero, cache_read=zero, cache_write=zero,
                     source=source, version=version)
    starts = sorted({tier.start for value in values.values() if value is not None
                     and not isinstance(value, Decimal) for tier in value.tiers})
    tiers = tuple(
        PriceTier(above=start, input=_at(values["input"], start),
                  output=_at(values["output"], start),
                  cache_read=_at(values["cache_read"], start),
                  cache_write=_at(values["cache_write"], start),
                  cache_write_1h=_at(values["cache_write_1h"], start))
        for start in starts
    )
    return Price(
        source=source,
        version=version,
        input=_at(values["input"], -1),
        output=_at(values["output"], -1),
        cache_read=_at(values["cache_read"], -1),
        cache_write=_at(values["cache_write"], -1),
        request=fee,
        tiers=tiers,
        cache_write_1h=_at(values["cache_write_1h"], -1),
        web_search=per_search,
    )


@functools.cache
def load_library() -> Library:
    """The bundled genai-prices data (imported on the first call, ~1.5 s; then cached)."""
    import genai_prices
    from genai_prices.data import providers

    return Library(providers, genai_prices.__version__)
