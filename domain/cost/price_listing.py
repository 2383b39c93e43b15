"""A provider's price listing: parsed from untrusted bytes, versioned, looked up.

A provider with ``pricing_url`` publishes an OpenRouter-style ``/models`` listing;
:func:`parse_listing` turns its bytes into :class:`ParsedListing` (prices per million
tokens as exact strings, and a version) and :class:`PriceListing` prices a model from a
published listing. Pure: no I/O.

Rules::

    {"data": [{"id": "anthropic/claude-sonnet-4.5",
               "pricing": {"prompt": "0.000003", "completion": "0.000015",
                           "input_cache_read": "0.0000003",
                           "input_cache_write": "0.00000375", "request": "0"}}]}

Token prices there are USD per **token**, as decimal strings; ``request`` is USD per
request. :func:`parse_listing` turns the bytes into :class:`ParsedListing` — the prices
per **million** tokens as exact canonical strings (a decimal shift: ``"0.000003"`` →
``"3"``, no float anywhere) and a version — and :class:`PriceListing` prices a model
from a published listing (``events.PriceListingPublished``). Pure: no I/O.

**Hostile input** (the listing's server controls every byte): a listing that is not
JSON, not ``{"data": [...]}``, larger than :data:`MAX_LISTING_BYTES`, with more than
:data:`MAX_MODELS` entries, or with no usable entry at all raises
:class:`~sessionwarden.domain.errors.ListingRejected` (the caller keeps the prices it
had). So does one whose *priced* models are more than :data:`MAX_PRICED_MODELS` or take
more than :data:`MAX_RECORDED_BYTES` normalised: a listing is recorded whole in one
event, and an event must stay small (OpenRouter's ~350 priced models take ~40 KiB).
An entry is *skipped* (counted, never fatal) when it is not an object, its ``id``
is not a string of 1-256 characters, its ``pricing`` is not an object, any price it gives
is not a plain non-negative decimal (a number or a string of at most 40 characters; a
negative price such as OpenRouter's ``"-1"`` for a router's variable price, ``NaN``,
``"1e999"``, a boolean), a token price is above $0.1 a token, or it gives neither a
prompt, a completion nor a request price; a repeated ``id`` keeps its first entry.

Field names (OpenRouter's, with the aliases hermes-behaviour §3.5 accepts): ``prompt``
→ input, ``completion`` → output, ``input_cache_read`` | ``cache_read`` |
``cached_prompt`` → cache read, ``input_cache_write`` | ``cache_write`` |
``cache_creation`` → cache write, ``request`` → the per-request fee. Others (images, web
search, a separate reasoning price) are not priced, as for the library.

**Version**: the first 16 hex digits of the SHA-256 of the normalised listing (its
priced models, sorted by id, encoded canonically): the same prices give the same version
whatever the order, spacing or spelling (``"0.0000030"``) of the listing, so an unchanged
listing is recognised and not recorded again.

**Recording rate** (:func:`may_record`): a listing whose prices change at every fetch
(hostile, or a server that reorders a duplicate id) would be one event per refresh; at
most :data:`RECORD_BURST` changed listings are recorded per provider within
:data:`RECORD_WINDOW_S` — a real price change is rare, and one held back is recorded at
the first refresh after the window, if it still differs.
"""

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import msgspec
from sessionwarden.domain.cost.pricing import Price
from sessionwarden.domain.errors import ListingRejected
from sessionwarden.events.prices import ListedPrice, PriceListingPublished

__all__ = [
    "MAX_LISTING_BYTES",
    "MAX_MODELS",
    "MAX_PRICED_MODELS",
    "MAX_RECORDED_BYTES",
    "RECORD_BURST",
    "RECORD_WINDOW_S",
    "SOURCE_LISTING",
    "ParsedListing",
    "PriceListing",
    "listing_version",
    "may_record",
    "parse_listing",
]

#: A listing larger than this is refused unread (OpenRouter's, with every model's
#: description, is about 1-2 MiB).
MAX_LISTING_BYTES = 16 << 20
#: A listing with more entries than this is refused (before any is parsed).
MAX_MODELS = 20_000
#: A listing pricing more models than this is refused: it is recorded whole, in one event.
MAX_PRICED_MODELS = 5_000
#: A listing whose normalised prices encode to more than this is refused, unrecorded.
MAX_RECORDED_BYTES = 256 << 10
#: At most this many changed listings are recorded per provider within
#: :data:`RECORD_WINDOW_S` (the first of a run, and one real change soon after, pass).
RECORD_BURST = 2
RECORD_WINDOW_S = 300.0
#: The ``cost_source`` prefix of a price from a listing: ``provider-listing@<version>``.
SOURCE_LISTING = "provider-listing"

_MAX_ID = 256
_MAX_PRICE_CHARS = 40
_MAX_TOKEN_PRICE = Decimal("0.1")  # USD a token: $100,000 per million, far above any model
_MAX_REQUEST_PRICE = Decimal(1000)
_EXACT = Context(prec=200, traps=[InvalidOperation])
# Digits with an optional fraction and a small exponent: no sign, no NaN/Infinity, no
# underscores or spaces (all of which Decimal() would accept).
_PLAIN = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]{1,2})?")

_FIELDS: dict[str, tuple[str, ...]] = {
    "input": ("prompt",),
    "output": ("completion",),
    "cache_read": ("input_cache_read", "cache_read", "cached_prompt"),
    "cache_write": ("input_cache_write", "cache_write", "cache_creation"),
    "request": ("request",),
}
_DECODER = msgspec.json.Decoder(float_hook=Decimal)
_ENCODER = msgspec.json.Encoder()


class ParsedListing(msgspec.Struct, frozen=True):
    """A listing as parsed: its priced models (sorted by id), how many were skipped."""

    version: str
    models: tuple[ListedPrice, ...]
    skipped: int = 0

    def event(self) -> PriceListingPublished:
        """The event that records this listing taking effect."""
        return PriceListingPublished(version=self.version, models=self.models,
                                     skipped=self.skipped)


def _decimal(value: object) -> Decimal | None:
    """``value`` as a plain non-negative Decimal, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, Decimal):
        value = format(value, "f") if value.is_finite() else "nan"
    if not isinstance(value, str) or len(value) > _MAX_PRICE_CHARS:
        return None
    if not _PLAIN.fullmatch(value):
        return None
    return Decimal(value)


def _canonical(value: Decimal) -> str:
    """The one spelling of an amount: no exponent, no trailing zeros (``"3"``, ``"0.3"``)."""
    return format(value.normalize(_EXACT), "f")


def _entry(raw: object) -> ListedPrice | None:
    """One entry's prices per million tokens, or None when the entry is unusable."""
    if not isinstance(raw, dict):
        return None
    model, pricing = raw.get("id"), raw.get("pricing")
    if not isinstance(model, str) or not 0 < len(model) <= _MAX_ID:
        return None
    if not isinstance(pricing, dict):
        return None
    prices: dict[str, str] = {}
    for kind, names in _FIELDS.items():
        value = next((pricing[n] for n in names if pricing.get(n) is not None), None)
        if value is None:
            continue
        amount = _decimal(value)
        if amount is None:
            return None  # one hostile price and the whole entry is not trusted
        if kind == "request":
            if amount > _MAX_REQUEST_PRICE:
                return None
            prices[kind] = _canonical(amount)
        else:
            if amount > _MAX_TOKEN_PRICE:
                return None
            prices[kind] = _canonical(amount.scaleb(6, _EXACT))
    if not prices.keys() & {"input", "output", "request"}:
        return None
    return ListedPrice(model=model, **prices)


def listing_version(models: Iterable[ListedPrice]) -> str:
    """The version of a normalised listing: a hash of its models sorted by id."""
    ordered = tuple(sorted(models, key=lambda m: m.model))
    return _version(_ENCODER.encode(ordered))


def _version(encoded: bytes) -> str:
    return hashlib.sha256(encoded).hexdigest()[:16]


def may_record(recorded: Sequence[float], now: float) -> bool:
    """Whether a changed listing may be recorded at ``now`` (module doc, recording rate).

    ``recorded`` are the monotonic times this provider's listings were recorded at.
    """
    recent = [t for t in recorded if now - t < RECORD_WINDOW_S]
    return len(recent) < RECORD_BURST


def parse_listing(body: bytes) -> ParsedListing:
    """Parse an OpenRouter-style ``/models`` listing (rules in the module doc).

    Raises:
        ListingRejected: the listing as a whole is unusable (the reason never quotes it).
    """
    if len(body) > MAX_LISTING_BYTES:
        raise ListingRejected(f"the listing is larger than {MAX_LISTING_BYTES >> 20} MiB")
    try:
        document: Any = _DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError, ValueError):
        raise ListingRejected("the listing is not valid JSON") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise ListingRejected('not a /models listing (expected {"data": [...]})')
    if len(data) > MAX_MODELS:
        raise ListingRejected(f"the listing has more than {MAX_MODELS} models")
    models: dict[str, ListedPrice] = {}
    skipped = 0
    for raw in data:
        entry = _entry(raw)
        if entry is None or entry.model in models:
            skipped += 1
            continue
        models[entry.model] = entry
    if not models:
        raise ListingRejected(f"the listing prices no model ({skipped} entries unusable)")
    if len(models) > MAX_PRICED_MODELS:
        raise ListingRejected(f"the listing prices more than {MAX_PRICED_MODELS} models")
    ordered = tuple(models[m] for m in sorted(models))
    encoded = _ENCODER.encode(ordered)  # what the version hashes: the event's bulk
    if len(encoded) > MAX_RECORDED_BYTES:
        raise ListingRejected(
            f"the listing's prices take more than {MAX_RECORDED_BYTES >> 10} KiB")
    return ParsedListing(_version(encoded), ordered, skipped)


def _amount(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def _price(entry: ListedPrice, source: str, version: str) -> Price | None:
    """``entry`` as a :class:`Price`; None if a recorded amount does not parse."""
    try:
        return Price(source=source, version=version, input=_amount(entry.input),
                     output=_amount(entry.output), cache_read=_amount(entry.cache_read),
                     cache_write=_amount(entry.cache_write), request=_amount(entry.request))
    except InvalidOperation:
        return None


class PriceListing:
    """A published listing's prices by model, as the price book looks them up."""

    def __init__(self, version: str, models: Iterable[ListedPrice]) -> None:
        """Index ``models`` (a recorded listing's) under ``version``."""
        self.version = version
        self.source = f"{SOURCE_LISTING}@{version}"
        self._prices: dict[str, Price] = {}
        self._folded: dict[str, Price] = {}
        for entry in models:
            price = _price(entry, self.source, version)
            if price is not None and entry.model not in self._prices:
                self._prices[entry.model] = price
                self._folded.setdefault(entry.model.lower(), price)

    @classmethod
    def from_event(cls, event: PriceListingPublished) -> "PriceListing":
        """The listing a :class:`PriceListingPublished` recorded."""
        return cls(event.version, event.models)

    @property
    def prices(self) -> Mapping[str, Price]:
        """Every model's price, by the listing's id."""
        return self._prices

    def price(self, model: str) -> Price | None:
        """The price of ``model`` (its exact id, else case-insensitively); None if unlisted."""
        found = self._prices.get(model)
        return found if found is not None else self._folded.get(model.lower())
