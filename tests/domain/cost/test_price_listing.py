"""The provider price listing: parsing hostile bytes exactly, its version, the book's layer."""

import json
from datetime import UTC, datetime
from decimal import Decimal as D
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import Config, ModelConfig, PriceConfig, ProviderConfig
from sessionwarden.domain.cost.library import load_library
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.price_listing import (
    MAX_LISTING_BYTES,
    MAX_MODELS,
    MAX_PRICED_MODELS,
    MAX_RECORDED_BYTES,
    RECORD_BURST,
    RECORD_WINDOW_S,
    ParsedListing,
    PriceListing,
    listing_version,
    may_record,
    parse_listing,
)
from sessionwarden.domain.cost.pricing import Price, cost
from sessionwarden.domain.errors import ListingRejected
from sessionwarden.domain.usage.canonical import CanonicalUsage
from sessionwarden.events import ListedPrice

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
SONNET = {"id": "anthropic/claude-sonnet-4.5",
          "pricing": {"prompt": "0.000003", "completion": "0.000015",
                      "input_cache_read": "0.0000003", "input_cache_write": "0.00000375",
                      "request": "0", "image": "0.0048", "web_search": "0"}}


def listing(*entries: Any) -> bytes:
    return json.dumps({"data": list(entries)}).encode()


def entry(model: str, **pricing: Any) -> dict[str, Any]:
    return {"id": model, "name": model.upper(), "context_length": 8192, "pricing": pricing}


def test_per_token_strings_become_exact_per_million_strings() -> None:
    parsed = parse_listing(listing(SONNET))
    assert parsed.models == (ListedPrice(
        model="anthropic/claude-sonnet-4.5", input="3", output="15", cache_read="0.3",
        cache_write="3.75", request="0"),)
    assert parsed.skipped == 0


def test_tiny_and_odd_spellings_stay_exact() -> None:
    parsed = parse_listing(listing(
        entry("a", prompt="0.000000000123456789123", completion="1.5E-7"),
        entry("b", prompt="0.0000030", completion=0.000015),  # a JSON number, read as Decimal
        entry("c", prompt=0, completion="0")))
    by = {m.model: m for m in parsed.models}
    assert (by["a"].input, by["a"].output) == ("0.000123456789123", "0.15")
    assert (by["b"].input, by["b"].output) == ("3", "15")
    assert (by["c"].input, by["c"].output) == ("0", "0")


def test_cache_field_aliases() -> None:
    parsed = parse_listing(listing(
        entry("x", prompt="0.000001", completion="0.000002", cached_prompt="0.0000001",
              cache_creation="0.0000012")))
    assert (parsed.models[0].cache_read, parsed.models[0].cache_write) == ("0.1", "1.2")


@pytest.mark.parametrize("pricing", [
    {"prompt": "-1", "completion": "-1"},            # OpenRouter's variable-price router
    {"prompt": "0.000001", "completion": "NaN"},
    {"prompt": "Infinity", "completion": "0.000001"},
    {"prompt": "1e999", "completion": "0.000001"},
    {"prompt": "0.000001", "completion": "0.000001", "input_cache_read": "cheap"},
    {"prompt": True, "completion": "0.000001"},
    {"prompt": ["0.000001"], "completion": "0.000001"},
    {"prompt": "0.000001 ", "completion": "0.000001"},
    {"prompt": "1_000", "completion": "0.000001"},
    {"prompt": "0." + "0" * 60 + "1", "completion": "0.000001"},  # absurdly long
    {"prompt": "0.5", "completion": "0.000001"},     # $500,000 per million: not a price
    {"prompt": "0.000001", "completion": "0.000001", "request": "5000"},
    {"image": "0.001"},                              # nothing we price
    {},
])
def test_an_unusable_entry_is_skipped_and_the_rest_kept(pricing: dict[str, Any]) -> None:
    parsed = parse_listing(listing(SONNET, {"id": "bad", "pricing": pricing}))
    assert [m.model for m in parsed.models] == ["anthropic/claude-sonnet-4.5"]
    assert parsed.skipped == 1


@pytest.mark.parametrize("raw", [
    "a string", 42, None, {"pricing": {"prompt": "0.000001"}}, {"id": 7, "pricing": {}},
    {"id": "", "pricing": {"prompt": "0.000001"}}, {"id": "x" * 257, "pricing": {"prompt": "0"}},
    {"id": "m", "pricing": "free"},
])
def test_malformed_entries_are_skipped(raw: Any) -> None:
    parsed = parse_listing(listing(SONNET, raw))
    assert len(parsed.models) == 1 and parsed.skipped == 1


def test_a_repeated_id_keeps_its_first_entry() -> None:
    parsed = parse_listing(listing(entry("m", prompt="0.000001", completion="0.000002"),
                                   entry("m", prompt="0.000009", completion="0.000009")))
    assert [(m.input, m.output) for m in parsed.models] == [("1", "2")]
    assert parsed.skipped == 1


@pytest.mark.parametrize(("body", "reason"), [
    (b"<html>rate limited</html>", "not valid JSON"),
    (b"[" * 50_000 + b"]" * 50_000, "not valid JSON"),
    (b'{"data": {"id": "m"}}', "not a /models listing"),
    (b'["data"]', "not a /models listing"),
    (b'{"object": "list"}', "not a /models listing"),
    (b'{"data": []}', "prices no model"),
    (listing({"id": "m", "pricing": {"prompt": "-1", "completion": "-1"}}), "prices no model"),
    (b" " * (MAX_LISTING_BYTES + 1), "larger than 16 MiB"),
])
def test_an_unusable_listing_is_rejected_whole(body: bytes, reason: str) -> None:
    with pytest.raises(ListingRejected, match=reason) as caught:
        parse_listing(body)
    assert "rate limited" not in str(caught.value)  # never quotes what the server sent


def test_too_many_models_is_rejected() -> None:
    body = json.dumps({"data": [0] * (MAX_MODELS + 1)}).encode()
    with pytest.raises(ListingRejected, match="more than"):
        parse_listing(body)


def test_the_version_depends_on_the_prices_only() -> None:
    a = parse_listing(listing(SONNET, entry("b", prompt="0.000001", completion="0.000002")))
    reordered = parse_listing(json.dumps({"object": "list", "data": [
        entry("b", prompt="0.0000010", completion="2e-6"), SONNET, {"id": "junk"}]}).encode())
    assert a.version == reordered.version and a.models == reordered.models
    changed = parse_listing(listing(SONNET, entry("b", prompt="0.000001", completion="0.000003")))
    assert changed.version != a.version
    assert a.version == listing_version(reversed(a.models)) and len(a.version) == 16


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["data", "id", "pricing", "prompt", "completion",
                                       "request", "input_cache_read"]) | st.text(max_size=5),
                      children, max_size=4),
    max_leaves=30))
def test_any_json_parses_or_is_rejected_never_crashes(document: Any) -> None:
    body = json.dumps({"data": document} if isinstance(document, list) else document).encode()
    try:
        parsed = parse_listing(body)
    except ListingRejected:
        return
    for model in parsed.models:
        for text in (model.input, model.output, model.cache_read, model.cache_write):
            assert text is None or D(text) >= 0


# ------------------------------------------------------------------ the book's listing layer


def usage(**counts: int) -> CanonicalUsage:
    return CanonicalUsage(source="provider", **counts)  # type: ignore[arg-type]


CONFIG = Config(
    providers=(
        ProviderConfig(name="router", base_url="https://openrouter.ai/api/v1",
                       pricing_url="https://openrouter.ai/api/v1/models"),
        ProviderConfig(name="flat", base_url="https://api.openai.com/v1", billing="included",
                       pricing_url="https://example.com/models"),
    ),
    models=(
        ModelConfig(name="anthropic/claude-sonnet-4.5", provider="router",
                    price=PriceConfig(input=D("2"))),
        ModelConfig(name="openai/gpt-4.1", provider="router",
                    price=PriceConfig(input=D("1"), output=D("1"), cache_read=D("1"),
                                      cache_write=D("1"))),
    ),
)


@pytest.fixture(scope="module")
def parsed() -> ParsedListing:
    return parse_listing(listing(
        SONNET, entry("openai/gpt-4.1", prompt="0.000002", completion="0.000008"),
        entry("acme/house-7b", prompt="0.00000011", completion="0.00000022", request="0.001"),
        entry("openai/gpt-4.1-mini", prompt="0.00000041", completion="0.0000016")))


def test_a_listing_prices_before_the_library(parsed: ParsedListing) -> None:
    book = PriceBook(CONFIG, load_library())
    before = book.lookup("router", "acme/house-7b", at=NOW)
    assert before.kind == "unknown"
    library = book.lookup("router", "openai/gpt-4.1-mini", at=NOW).price
    assert library is not None and library.source.startswith("genai-prices@")
    book.adopt("router", PriceListing.from_event(parsed.event()))
    lookup = book.lookup("router", "acme/house-7b", at=NOW)
    source = f"provider-listing@{parsed.version}"
    assert lookup.price == Price(source=source, version=parsed.version, input=D("0.11"),
                                 output=D("0.22"), request=D("0.001"))
    result = cost(usage(input_tokens=1000, output_tokens=500), lookup)
    assert (result.amount, result.status, result.source, result.version) == (
        D("0.00122"), "actual", source, parsed.version)
    assert book.lookup("router", "Acme/House-7B", at=NOW).price == lookup.price
    # the library knows this OpenRouter model, but the provider's own listing comes first
    mini = book.lookup("router", "openai/gpt-4.1-mini", at=NOW).price
    assert mini is not None and (mini.source, mini.input) == (source, D("0.41"))
    missing = book.lookup("router", "acme/other", at=NOW)
    assert missing.kind == "unknown" and parsed.version in missing.reason


def test_an_override_wins_over_the_listing(parsed: ParsedListing) -> None:
    book = PriceBook(CONFIG, load_library())
    book.adopt("router", PriceListing.from_event(parsed.event()))
    full = book.lookup("router", "openai/gpt-4.1", at=NOW).price
    assert full is not None and (full.source, full.version, full.input) == (
        "override", "config", D("1"))
    partial = book.lookup("router", "anthropic/claude-sonnet-4.5", at=NOW).price
    assert partial == Price(source="override",
                            version=f"config+provider-listing@{parsed.version}",
                            input=D("2"), output=D("15"), cache_read=D("0.3"),
                            cache_write=D("3.75"), request=D("0"))
    assert book.lookup("flat", "acme/house-7b", at=NOW).kind == "included"


def test_adopting_replaces_the_layer_whole(parsed: ParsedListing) -> None:
    book = PriceBook(CONFIG, load_library())
    book.adopt("router", PriceListing.from_event(parsed.event()))
    held = book.listings
    newer = parse_listing(listing(entry("acme/house-7b", prompt="0.000001", completion="0")))
    book.adopt("router", PriceListing.from_event(newer.event()))
    assert held["router"].version == parsed.version  # the old mapping was not changed
    price = book.lookup("router", "acme/house-7b", at=NOW).price
    assert price is not None and (price.input, price.version) == (D("1"), newer.version)
    library = book.lookup("router", "openai/gpt-4.1-mini", at=NOW).price
    assert library is not None and library.source.startswith("genai-prices@")  # not listed now


def test_the_event_round_trips(parsed: ParsedListing) -> None:
    event = parsed.event()
    again = msgspec.json.decode(msgspec.json.encode(event), type=type(event))
    assert PriceListing.from_event(again).prices == PriceListing.from_event(event).prices


def test_a_listing_too_big_to_record_is_rejected() -> None:
    # Issue 21, item 13: a listing is recorded whole, in one event; that event is bounded.
    many = [entry(f"m{i}", prompt="0.000001", completion="0.000002")
            for i in range(MAX_PRICED_MODELS + 1)]
    with pytest.raises(ListingRejected, match=f"more than {MAX_PRICED_MODELS} models"):
        parse_listing(listing(*many))
    wide = [entry("acme/" + "x" * 200 + str(i), prompt="0.000001", completion="0.000002")
            for i in range(MAX_RECORDED_BYTES // 200)]
    with pytest.raises(ListingRejected, match="prices take more than"):
        parse_listing(listing(*wide))
    fits = parse_listing(listing(*wide[: len(wide) // 2]))
    assert fits.version == listing_version(fits.models)


def test_at_most_a_burst_of_listings_is_recorded_per_window() -> None:
    assert may_record([], 0.0)
    assert may_record([0.0] * (RECORD_BURST - 1), 1.0)
    assert not may_record([0.0] * RECORD_BURST, 1.0)
    assert may_record([0.0] * RECORD_BURST, RECORD_WINDOW_S)  # the window has passed
