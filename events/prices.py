"""Events of the provider price listings: the prices a provider published, as they took effect.

Stream ``prices-<provider>``. A provider with a ``pricing_url`` (an OpenRouter-style
``/models`` listing) is read at start and refreshed; each listing that *changes* the
prices is one :class:`PriceListingPublished`, so a past cost priced from a listing
(``cost_source`` ``provider-listing@<version>``) can always be explained by the event of
that version. A refresh that finds the same prices appends nothing.
"""

from typing import ClassVar

import msgspec
from sessionwarden.events.base import Event

__all__ = ["ListedPrice", "PriceListingPublished"]


class ListedPrice(msgspec.Struct, frozen=True, omit_defaults=True):
    """One model's prices in a listing (a field, not an event).

    Token prices are USD per **million** tokens and ``request`` is USD per request, all
    exact decimal strings in canonical form (``"3"``, ``"0.3"``, never ``"3.000"`` or an
    exponent); None when the listing gives no price for that kind.
    """

    model: str
    input: str | None = None
    output: str | None = None
    cache_read: str | None = None
    cache_write: str | None = None
    request: str | None = None


class PriceListingPublished(Event, frozen=True):
    """A provider's price listing took effect (stream ``prices-<provider>``).

    ``version`` is the content hash of ``models`` (``domain/cost/price_listing.py``), which are
    sorted by model; ``skipped`` counts the listing's entries that were left out as
    unusable (no price, a negative or malformed one, a duplicate id).
    """

    TAG: ClassVar[str] = "prices.listing_published.v1"

    version: str
    models: tuple[ListedPrice, ...] = ()
    skipped: int = 0
