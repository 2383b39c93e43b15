"""The providers' price listings: recovered from the log at start, fetched and refreshed.

A provider with ``pricing_url`` publishes its prices as an OpenRouter-style ``/models``
listing (parsed by the pure ``domain/cost/price_listing.py``). :class:`PriceListings`:

* **at start** (:meth:`PriceListings.recover`, before the first call) adopts into the
  daemon's :class:`~sessionwarden.domain.cost.price_book.PriceBook` the latest listing the log
  holds for each such provider (stream ``prices-<provider>``), so a daemon restarted
  without network prices as it did before it stopped;
* **on the event loop** (:meth:`PriceListings.start`, from the server's start-up) fetches
  each listing at once, then every ``pricing_refresh_s`` seconds (an hour by default;
  after a failure, again within 5 minutes at most). A listing whose version (a hash of
  its prices) differs from the one in effect is appended as
  ``prices.listing_published.v1`` and adopted by the book once that append is durable:
  every call completed from then on is priced with it. The same prices again append
  nothing, and a listing that changes at every fetch is recorded at most
  ``RECORD_BURST`` times per ``RECORD_WINDOW_S`` (``domain/price_listing.may_record``):
  a change held back keeps the prices in effect until a refresh after the window.

The fetch is bounded: 30 s in all (10 s to connect), at most ``MAX_LISTING_BYTES`` of
body after decompression (read in chunks, so a bigger body is dropped before it is
held), and the listing is parsed in a worker thread, off the loop; what is recorded is
bounded too (``MAX_PRICED_MODELS``, ``MAX_RECORDED_BYTES``: a bigger listing is refused).
**No key is sent**:
a price listing is public (OpenRouter's ``/models`` needs no authentication), and the
``pricing_url`` may name another host than the provider's, which must never see its key.
A failed fetch, an HTTP error or an unusable listing keeps the prices in effect and logs
one warning naming the provider and the reason, never the URL (it could carry a token).
"""

import asyncio
import contextlib
from collections.abc import Collection

import aiohttp
from loguru import logger
from sessionwarden import __version__
from sessionwarden.actors.messages import new_event
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.config import Config, ProviderConfig
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.price_listing import (
    MAX_LISTING_BYTES,
    RECORD_BURST,
    RECORD_WINDOW_S,
    PriceListing,
    may_record,
    parse_listing,
)
from sessionwarden.domain.errors import ListingRejected
from sessionwarden.events import CODEC, PriceListingPublished
from sessionwarden.store import EventLog
from sessionwarden.store.errors import StoreError

__all__ = ["PriceListings", "latest_listing", "listing_stream", "recorded_listings"]

_TIMEOUT = aiohttp.ClientTimeout(total=30.0, connect=10.0)
_RETRY_AFTER_FAILURE_S = 300.0
_CHUNK = 64 << 10


class _FetchFailed(Exception):
    """A listing could not be fetched; the message is safe to log."""


def listing_stream(provider: str) -> str:
    """The stream of ``provider``'s published price listings."""
    return f"prices-{provider}"


def latest_listing(log: EventLog, provider: str) -> tuple[int, PriceListingPublished | None]:
    """The head version of ``provider``'s listing stream and its latest listing, if any."""
    stream = listing_stream(provider)
    head = log.stream_version(stream)
    latest: PriceListingPublished | None = None
    for recorded in log.read_stream(stream, max(head - 1, 0)):
        event = CODEC.decode(recorded.type, recorded.data)
        if isinstance(event, PriceListingPublished):
            latest = event
    return head, latest


def recorded_listings(log: EventLog, config: Config) -> dict[str, PriceListing]:
    """The latest recorded listing of each configured provider that has a ``pricing_url``.

    A provider whose ``pricing_url`` was removed from the configuration is not priced
    from its old listing any more.
    """
    found: dict[str, PriceListing] = {}
    for provider in config.providers:
        if provider.pricing_url:
            event = latest_listing(log, provider.name)[1]
            if event is not None:
                found[provider.name] = PriceListing.from_event(event)
    return found


def _reason(exc: BaseException) -> str:
    """A short reason for a failed fetch that quotes neither the URL nor the body."""
    if isinstance(exc, _FetchFailed | ListingRejected):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"no complete answer within {_TIMEOUT.total:g} s"
    if isinstance(exc, aiohttp.ClientConnectionError):
        return f"cannot connect ({type(exc).__name__})"
    return type(exc).__name__


async def _fetch(session: aiohttp.ClientSession, url: str) -> bytes:
    """The listing's body, bounded in time (the session's) and in size."""
    async with session.get(url, max_redirects=3) as response:
        if response.status != 200:
            raise _FetchFailed(f"HTTP {response.status}")
        if (response.content_length or 0) > MAX_LISTING_BYTES:
            raise _FetchFailed(f"declared more than {MAX_LISTING_BYTES >> 20} MiB; not read")
        body = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            body += chunk
            if len(body) > MAX_LISTING_BYTES:
                raise _FetchFailed(
                    f"sent more than {MAX_LISTING_BYTES >> 20} MiB; stopped reading")
        return bytes(body)


class PriceListings:
    """Keeps the price book's provider listings current (see the module doc)."""

    def __init__(self, config: Config, log: EventLog, book: PriceBook,
                 clock: Clock | None = None) -> None:
        """Serve the providers of ``config`` that have a ``pricing_url``."""
        self._providers = [p for p in config.providers if p.pricing_url]
        self._log = log
        self._book = book
        self._clock = clock or SystemClock()
        self._heads: dict[str, int] = {}
        #: When (``clock.monotonic()``) each provider's listings were recorded this run.
        self._recorded: dict[str, list[float]] = {}
        #: The version of a change held back, so it is reported once, not every refresh.
        self._held: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None

    def recover(self) -> int:
        """Adopt the latest recorded listing of each provider; return how many there were."""
        adopted = 0
        for provider in self._providers:
            head, event = latest_listing(self._log, provider.name)
            self._heads[provider.name] = head
            if event is not None:
                self._book.adopt(provider.name, PriceListing.from_event(event))
                adopted += 1
        return adopted

    async def start(self, skip: Collection[str] = ()) -> None:
        """Start refreshing every listing (the first fetch at once) on the running loop.

        Providers named in ``skip`` (those without a usable key) are not fetched: nothing
        goes to the network for a provider nobody can call (the zero config names
        OpenRouter's listing; a daemon without an OpenRouter key never reads it).
        """
        providers = [p for p in self._providers if p.name not in skip]
        if not providers or self._tasks:
            return
        self._session = aiohttp.ClientSession(
            timeout=_TIMEOUT, headers={"User-Agent": f"sessionwarden/{__version__}",
                                       "Accept": "application/json"})
        self._tasks = [asyncio.create_task(self._loop(p), name=f"prices-{p.name}")
                       for p in providers]

    async def _loop(self, provider: ProviderConfig) -> None:
        while True:
            try:
                ok = await self.refresh(provider)
            except Exception as exc:  # a bug must not end the refreshes for good
                logger.error("price listing of provider {}: refresh failed ({})",
                             provider.name, type(exc).__name__)
                ok = False
            delay = provider.pricing_refresh_s
            await asyncio.sleep(delay if ok else min(delay, _RETRY_AFTER_FAILURE_S))

    async def refresh(self, provider: ProviderConfig) -> bool:
        """Fetch ``provider``'s listing once; record and adopt it if its prices changed.

        Returns False when the fetch or the listing failed (the prices in effect stay).
        """
        assert self._session is not None, "start() first"
        name = provider.name
        current = self._book.listings.get(name)
        try:
            body = await _fetch(self._session, provider.pricing_url)
            parsed = await asyncio.to_thread(parse_listing, body)
        except Exception as exc:  # any failure keeps the prices in effect
            kept = f"listing {current.version}" if current else "the library's prices"
            logger.warning("price listing of provider {} not refreshed: {}; keeping {}",
                           name, _reason(exc), kept)
            return False
        if current is not None and current.version == parsed.version:
            logger.debug("price listing of provider {} unchanged ({})", name, parsed.version)
            return True
        now = self._clock.monotonic()
        recorded = [t for t in self._recorded.get(name, ()) if now - t < RECORD_WINDOW_S]
        self._recorded[name] = recorded
        if not may_record(recorded, now):
            # Prices that change at every fetch would be an event per refresh: held back.
            if name not in self._held:
                logger.warning(
                    "price listing of provider {} changed again ({}); not recorded: at most "
                    "{} listings per {:g} s; keeping {}", name, parsed.version, RECORD_BURST,
                    RECORD_WINDOW_S, f"listing {current.version}" if current else
                    "the library's prices")
            self._held[name] = parsed.version
            return True
        head = self._heads.get(name, 0)
        try:
            result = await self._log.append_async(
                listing_stream(name), [new_event(parsed.event())], head)
        except StoreError as exc:
            # Not recorded, so not adopted: a price must be explainable from the log.
            logger.warning("price listing of provider {} not recorded: {}; keeping {}", name,
                           type(exc).__name__, current.version if current else "the library's")
            self._heads[name] = self._log.stream_version(listing_stream(name))
            return False
        self._heads[name] = result.version
        recorded.append(now)
        self._held.pop(name, None)
        self._book.adopt(name, PriceListing.from_event(parsed.event()))
        logger.info("prices of provider {}: listing {} in effect ({} models, {} skipped)",
                    name, parsed.version, len(parsed.models), parsed.skipped)
        return True

    async def aclose(self) -> None:
        """Stop refreshing and close the HTTP session (idempotent)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None
