"""The price book: which price applies to a call, from the config and genai-prices.

Built once from the :class:`~sessionwarden.config.Config` (and, by default, the bundled
genai-prices data, see ``domain/cost/library.py``); :meth:`PriceBook.lookup` answers
a :class:`~sessionwarden.domain.cost.pricing.PriceLookup` for (provider, model, time), pure
and without I/O: the library's data is imported once and only read.

Rules:

The overview: docs/architecture/costs-and-caps.md, 'Prices'.

**Order** (hermes-behaviour §3.4-3.5, issue 12 "Prices"):

1. ``[[providers]] billing = "included"`` → ``included`` (a subscription route: $0, with
   its own status so it is never mistaken for a free model or a missing price) — except
   the built-in ``sim``'s priced models (``sim/priced``, ``Config.builtin_price``): their
   documented price, source ``builtin``, version ``sim``, so caps can be tried offline.
2. A ``[[models]]`` entry of that provider with a ``price`` override → its prices win,
   kind by kind: a kind the override leaves empty keeps the library's rate, if any. The
   override is exact and flat, so the library's tiers are dropped for the overridden
   kinds (a tier row keeps only the library's rates of the other kinds). The kinds are
   ``input``, ``output``, ``cache_read``, ``cache_write``, ``cache_write_1h`` and
   ``web_search`` (USD per search); an override of the first four is full and keeps
   nothing of the library's (an unset 1-hour write then bills at twice its ``input``,
   unset web searches are unpriced). Source ``override``, version ``config``
   (``config+genai-prices@<v>`` when the library filled a kind in).
3. The provider's own price listing (``pricing_url``, ``domain/cost/price_listing.py``), the
   latest one published, when it lists the model: source ``provider-listing@<version>``.
   An override of that model is laid over it as over the library (version
   ``config+provider-listing@<version>`` when the listing filled a kind in).
4. The library: provider by base URL, then by name (rules in ``pricing_library``), the
   model by the library's matching, its price at the request time (some prices change on
   a date or by time of day).
5. Otherwise ``unknown`` with a reason (``no price for model 'x' at provider 'p'...``).

So: an override > the provider's listing > the library. The listing comes before the
library because it is what the provider itself bills today, and newer than a pinned
snapshot; the override comes first because it is the user's own, exact word.

**The one mutation**: :meth:`PriceBook.adopt` makes a newly published listing the
provider's listing layer. It replaces the mapping of listings (copy on write, one
attribute assignment), never changes one in place, so a lookup on another thread sees
either the old listing or the new one, whole; the daemon adopts a listing once its event
is durable, and every lookup from then on prices with it.

A provider that is not in the config is looked up by its name alone. The model is the id
sent upstream, without a ``provider/`` routing prefix of ours (OpenRouter ids such as
``anthropic/claude-sonnet-4.5`` keep theirs).
"""

from collections.abc import Mapping
from datetime import datetime

import msgspec
from sessionwarden.config import Config, PriceConfig
from sessionwarden.domain.cost.library import Library, load_library
from sessionwarden.domain.cost.price_listing import PriceListing
from sessionwarden.domain.cost.pricing import SOURCE_OVERRIDE, Price, PriceLookup

__all__ = ["PriceBook"]

_KINDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
#: An override that sets these is *full*: nothing of the library's is kept (a 1-hour
#: write it leaves unset is then billed at twice its input rate, as ``pricing`` says).
_FULL = frozenset(_KINDS[:4])
_INCLUDED = PriceLookup(kind="included")


def _override(config: PriceConfig, library: Price | None) -> Price:
    """The override ``config`` laid over ``library``: the listing's or library's price."""
    overridden = {kind for kind in _KINDS if getattr(config, kind) is not None}
    if library is None or overridden >= _FULL:
        return Price(source=SOURCE_OVERRIDE, version="config", input=config.input,
                     output=config.output, cache_read=config.cache_read,
                     cache_write=config.cache_write, cache_write_1h=config.cache_write_1h,
                     web_search=config.web_search)
    tiers = tuple(
        msgspec.structs.replace(tier, **{kind: None for kind in overridden})
        for tier in library.tiers
    )
    return Price(
        source=SOURCE_OVERRIDE,
        version=f"config+{library.source}",
        input=library.input if config.input is None else config.input,
        output=library.output if config.output is None else config.output,
        cache_read=library.cache_read if config.cache_read is None else config.cache_read,
        cache_write=library.cache_write if config.cache_write is None else config.cache_write,
        cache_write_1h=(library.cache_write_1h if config.cache_write_1h is None
                        else config.cache_write_1h),
        request=library.request,
        web_search=library.web_search if config.web_search is None else config.web_search,
        tiers=tuple(t for t in tiers if any(getattr(t, k) is not None for k in _KINDS)),
    )


class PriceBook:
    """Answers which price applies to a call (the order is in the module doc)."""

    def __init__(self, config: Config, library: Library | None = None) -> None:
        """Index ``config``'s providers and overrides; ``library`` defaults to the bundled one.

        Args:
            config: the daemon's configuration (providers' ``billing`` and ``base_url``,
                models' ``price`` overrides).
            library: the genai-prices data to use; None loads the bundled snapshot (about
                1.5 s, once per process).
        """
        self.library = load_library() if library is None else library
        self._included = frozenset(p.name for p in config.usable_providers
                                   if p.billing == "included")
        self._base_urls: Mapping[str, str] = {p.name: p.base_url for p in config.usable_providers}
        self._overrides: Mapping[tuple[str, str], PriceConfig] = {
            (m.provider, m.name): m.price for m in config.models if m.price is not None
        }
        self._listings: Mapping[str, PriceListing] = {}
        self._builtin = config.builtin_price

    @property
    def listings(self) -> Mapping[str, PriceListing]:
        """The price listing in effect for each provider that has one."""
        return self._listings

    def adopt(self, provider: str, listing: PriceListing) -> None:
        """Price ``provider``'s models from ``listing`` from now on (see the module doc)."""
        self._listings = {**self._listings, provider: listing}

    def lookup(self, provider: str, model: str, *, at: datetime,
               base_url: str | None = None,
               context: Mapping[str, str] | None = None) -> PriceLookup:
        """The price of ``model`` served by ``provider`` for a request made at ``at``.

        Args:
            provider: our provider name (``[[providers]] name``).
            model: the model id sent upstream.
            at: the request time (timezone-aware; library prices may depend on it).
            base_url: the provider's base URL; None takes it from the config.
            context: selects the library's price variants, e.g. ``{"service_tier":
                "flex"}`` from the ``service_tier`` an OpenAI response reports (keys and
                values as genai-prices spells them: ``service_tier``, ``processing``,
                ``speed``); None or empty for the standard prices.
        """
        if provider in self._included:
            builtin = self._builtin(provider, model)
            if builtin is None:
                return _INCLUDED
            return PriceLookup(kind="price", price=msgspec.structs.replace(
                _override(builtin, None), source="builtin", version="sim"))
        override = self._overrides.get((provider, model))
        listing = self._listings.get(provider)
        listed = None if listing is None else listing.price(model)
        if listed is not None:
            return PriceLookup(kind="price", price=listed if override is None
                               else _override(override, listed))
        url = base_url if base_url is not None else self._base_urls.get(provider)
        library_provider = self.library.provider_for(provider, url)
        library_price = (None if library_provider is None
                         else self.library.price(library_provider, model, at, context))
        if override is not None:
            return PriceLookup(kind="price", price=_override(override, library_price))
        if library_price is not None:
            return PriceLookup(kind="price", price=library_price)
        if library_provider is None:
            reason = f"provider {provider!r} is not in {self.library.source} and has no override"
        else:
            reason = (f"no price for model {model!r} at {library_provider.id!r} in "
                      f"{self.library.source}, and no override")
        if listing is not None:
            reason += f"; not in its price listing {listing.version}"
        return PriceLookup(kind="unknown", reason=reason)
