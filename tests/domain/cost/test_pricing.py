from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import genai_prices
import msgspec
import pytest
from genai_prices import data_snapshot
from genai_prices.data import providers as library_providers
from genai_prices.types import ModelPrice
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import Config, ModelConfig, PriceConfig, ProviderConfig
from sessionwarden.domain.cost.library import load_library
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import (
    FLAG_COST_MISMATCH,
    FLAG_REPORTED_REJECTED,
    FLAG_USAGE_MISSING,
    Cost,
    Price,
    PriceLookup,
    PriceTier,
    cost,
)
from sessionwarden.domain.usage.canonical import CanonicalUsage

D = Decimal
NOW = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
LIB = f"genai-prices@{genai_prices.__version__}"

SONNET = Price(source="test", version="1", input=D("3"), output=D("15"),
               cache_read=D("0.3"), cache_write=D("3.75"))


def usage(source: str = "provider", **counts: int) -> CanonicalUsage:
    return CanonicalUsage(source=source, **counts)  # type: ignore[arg-type]


def priced(price: Price) -> PriceLookup:
    return PriceLookup(kind="price", price=price)


# ------------------------------------------------------------------ the arithmetic


def test_cached_tokens_at_the_cache_read_price() -> None:
    result = cost(usage(input_tokens=200, cache_read_tokens=800, output_tokens=100),
                  priced(SONNET))
    # 200 x 3 + 800 x 0.3 + 100 x 15 = 2340 per million
    assert result == Cost(amount=D("0.00234"), status="actual", source="test", version="1")
    assert type(result.amount) is Decimal


def test_cache_writes_at_the_cache_write_price() -> None:
    result = cost(usage(input_tokens=10, cache_write_tokens=1000), priced(SONNET))
    assert result.amount == D("0.00378")  # 10 x 3 + 1000 x 3.75 = 3780 per million


def test_reasoning_is_inside_output_and_not_priced_again() -> None:
    plain = cost(usage(input_tokens=100, output_tokens=500), priced(SONNET))
    reasoning = cost(usage(input_tokens=100, output_tokens=500, reasoning_tokens=400),
                     priced(SONNET))
    assert plain.amount == reasoning.amount == D("0.0078")


def test_a_cache_kind_without_a_price_bills_at_the_input_price() -> None:
    price = Price(source="t", version="1", input=D("2"), output=D("8"))
    result = cost(usage(input_tokens=100, cache_read_tokens=900, cache_write_tokens=50),
                  priced(price))
    assert result.amount == D("0.0021")  # 1050 x 2


def test_input_or_output_without_a_price_is_unknown_not_zero() -> None:
    price = Price(source="t", version="1", input=D("2"))
    result = cost(usage(input_tokens=100, output_tokens=1), priced(price))
    assert result.amount is None
    assert result.status == "unknown"
    assert result.reason == "no output price in t"
    # no output tokens: nothing unpriced was used
    assert cost(usage(input_tokens=100), priced(price)).amount == D("0.0002")


TIERED = Price(source="t", version="1", input=D("2"), output=D("12"), cache_read=D("0.2"),
               tiers=(PriceTier(above=200_000, input=D("4"), output=D("18")),))


def test_a_tier_applies_to_the_whole_request_strictly_above_its_threshold() -> None:
    # hermes-behaviour §3.6: Gemini 3.1 Pro, exactly 200K is still the lower tier
    at = cost(usage(input_tokens=200_000, output_tokens=10_000), priced(TIERED))
    above = cost(usage(input_tokens=200_001, output_tokens=10_000), priced(TIERED))
    assert at.amount == D("0.52")
    assert above.amount == D("0.980004")  # 200001 x 4 + 10000 x 18


def test_cache_tokens_count_towards_the_tier_and_a_missing_tier_rate_falls_back() -> None:
    result = cost(usage(input_tokens=1, cache_read_tokens=200_000, output_tokens=1),
                  priced(TIERED))
    # prompt 200001 > 200000: input 4, output 18, cache_read from the base (0.2)
    assert result.amount == D("0.040022")


def test_the_per_request_fee_is_added_once() -> None:
    price = Price(source="t", version="1", input=D("1"), output=D("1"), request=D("0.012"))
    assert cost(usage(input_tokens=1000, output_tokens=1000), priced(price)).amount == D("0.014")


def test_estimated_usage_is_estimated() -> None:
    result = cost(usage("estimated", input_tokens=1000), priced(SONNET))
    assert (result.amount, result.status) == (D("0.003"), "estimated")


def test_missing_usage_is_unknown_never_zero() -> None:
    result = cost(usage("missing"), priced(SONNET))
    assert (result.amount, result.status, result.flags) == (None, "unknown", (FLAG_USAGE_MISSING,))


def test_included_is_zero_with_its_own_status() -> None:
    result = cost(usage(input_tokens=5000, output_tokens=10), PriceLookup(kind="included"))
    assert result == Cost(amount=D(0), status="included", source="included", version="config")


def test_no_price_is_unknown_with_the_reason() -> None:
    result = cost(usage(input_tokens=5), PriceLookup(kind="unknown", reason="no price for m"))
    assert result == Cost(amount=None, status="unknown", source="none", version="",
                          reason="no price for m")


def test_a_reported_cost_is_actual_and_cross_checked() -> None:
    u = usage("estimated", input_tokens=1_000_000)  # ours: exactly $3
    close = cost(u, priced(SONNET), reported=D("3.03"))
    assert close == Cost(amount=D("3.03"), status="actual", source="provider-reported",
                         version="1", computed=D("3"))
    far = cost(u, priced(SONNET), reported=D("3.0301"))
    assert far.flags == (FLAG_COST_MISMATCH,)
    assert cost(u, priced(SONNET), reported=D("-1")).flags == (FLAG_REPORTED_REJECTED,)
    assert cost(u, priced(SONNET), reported=D("NaN")).amount == D("3")
    unpriced = cost(u, PriceLookup(kind="unknown"), reported=D("0.5"))
    assert (unpriced.amount, unpriced.status, unpriced.computed) == (D("0.5"), "actual", None)


def test_amounts_are_stored_as_exact_strings() -> None:
    result = cost(usage(input_tokens=1, output_tokens=1), priced(SONNET))
    assert b'"amount":"0.000018"' in msgspec.json.encode(result)
    assert msgspec.json.decode(msgspec.json.encode(result), type=Cost) == result


# ------------------------------------------------------------------ the price book


def provider(name: str, base_url: str, **kw: object) -> ProviderConfig:
    return ProviderConfig(name=name, base_url=base_url, **kw)  # type: ignore[arg-type]


CONFIG = Config(
    providers=(
        provider("openai", "https://api.openai.com/v1"),
        provider("anthropic", "https://api.anthropic.com/v1", api_mode="anthropic_messages"),
        provider("work", "https://openrouter.ai/api/v1"),
        provider("gemini", "http://127.0.0.1:9/v1"),
        provider("openai-compatible", "http://localhost:8000/v1"),
        provider("team", "https://api.openai.com/v1", billing="included"),
    ),
    models=(
        ModelConfig(name="gpt-4o-mini", provider="openai",
                    price=PriceConfig(input=D("1"), output=D("2"), cache_read=D("0.5"),
                                      cache_write=D("1"))),
        ModelConfig(name="claude-sonnet-4-5", provider="anthropic",
                    price=PriceConfig(input=D("2.5"))),
        ModelConfig(name="house-model", provider="openai-compatible",
                    price=PriceConfig(input=D("0.1"), output=D("0.2"))),
    ),
)


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook(CONFIG)


def test_the_library_prices_a_known_model(book: PriceBook) -> None:
    lookup = book.lookup("anthropic", "claude-haiku-4-5", at=NOW)
    assert lookup.price == Price(source=LIB, version=genai_prices.__version__, input=D("1"),
                                 output=D("5"), cache_read=D("0.1"), cache_write=D("1.25"),
                                 cache_write_1h=D("2"), web_search=D("0.01"))
    result = cost(usage(input_tokens=100, cache_read_tokens=1000, cache_write_tokens=10,
                        output_tokens=20), lookup)
    assert result.amount == D("0.0003125")
    assert (result.status, result.source) == ("actual", LIB)


def test_library_tiers_become_price_tiers(book: PriceBook) -> None:
    price = book.lookup("anthropic", "claude-sonnet-4-5", at=NOW).price
    assert price is not None
    assert book.lookup("openai", "claude-sonnet-4-5", at=NOW).kind == "unknown"
    gemini = book.lookup("gemini", "gemini-3.1-pro-preview", at=NOW)
    # hermes-behaviour §3.6: 100K in + 10K out = $0.32, above 200K the higher tier
    assert cost(usage(input_tokens=100_000, output_tokens=10_000), gemini).amount == D("0.32")
    assert gemini.price is not None
    assert gemini.price.tiers == (PriceTier(above=200_000, input=D("4"), output=D("18"),
                                            cache_read=D("0.4")),)


def test_an_override_wins_over_the_library(book: PriceBook) -> None:
    full = book.lookup("openai", "gpt-4o-mini", at=NOW)
    assert full.price == Price(source="override", version="config", input=D("1"),
                               output=D("2"), cache_read=D("0.5"), cache_write=D("1"))
    result = cost(usage(input_tokens=300, cache_read_tokens=700, output_tokens=50), full)
    assert (result.amount, result.source) == (D("0.00075"), "override")


def test_a_partial_override_keeps_the_library_for_the_other_kinds(book: PriceBook) -> None:
    price = book.lookup("anthropic", "claude-sonnet-4-5", at=NOW).price
    assert price == Price(
        source="override", version=f"config+{LIB}", input=D("2.5"), output=D("15"),
        cache_read=D("0.3"), cache_write=D("3.75"), cache_write_1h=D("6"),
        web_search=D("0.01"),
        tiers=(PriceTier(above=200_000, output=D("22.5"), cache_read=D("0.6"),
                         cache_write=D("7.5"), cache_write_1h=D("12")),))
    # above the tier the overridden input stays flat, the rest take the library's tier
    big = cost(usage(input_tokens=300_000, output_tokens=1), priced(price))
    assert big.amount == D("0.7500225")


def test_an_override_prices_a_model_the_library_does_not_know(book: PriceBook) -> None:
    lookup = book.lookup("openai-compatible", "house-model", at=NOW)
    assert cost(usage(input_tokens=10, output_tokens=10), lookup).amount == D("0.000003")


def test_included_billing(book: PriceBook) -> None:
    assert book.lookup("team", "gpt-4o-mini", at=NOW).kind == "included"
    assert book.lookup("sim", "anything", at=NOW).kind == "included"  # built-in provider


def test_the_builtin_sims_priced_models_cost_their_documented_price(book: PriceBook) -> None:
    for model in ("priced", "priced-agent-3"):
        lookup = book.lookup("sim", model, at=NOW)
        assert lookup.price == Price(source="builtin", version="sim", input=D("2.00"),
                                     output=D("8.00"))
    assert cost(usage(input_tokens=1_000_000, output_tokens=1_000_000),
                book.lookup("sim", "priced", at=NOW)).amount == D("10")
    # a provider called sim in the config is the user's own: its billing decides
    own = PriceBook(Config(providers=(provider("sim", "http://127.0.0.1:9/v1",
                                               billing="included"),)),
                    library=book.library)
    assert own.lookup("sim", "priced", at=NOW).kind == "included"


def test_unknown_providers_and_models(book: PriceBook) -> None:
    # a local server with "openai" in its name is not OpenAI, and gpt-4o there is not priced
    local = book.lookup("openai-compatible", "gpt-4o", at=NOW)
    assert local == PriceLookup(kind="unknown", reason=(
        f"provider 'openai-compatible' is not in {LIB} and has no override"))
    model = book.lookup("openai", "no-such-model", at=NOW)
    assert model.reason == (
        f"no price for model 'no-such-model' at 'openai' in {LIB}, and no override")
    assert cost(usage(input_tokens=1), model).status == "unknown"


def test_provider_by_base_url_then_by_name(book: PriceBook) -> None:
    # "work" bills through OpenRouter (its URL); "gemini" at a local URL is Google by name
    routed = book.lookup("work", "anthropic/claude-sonnet-4.5", at=NOW)
    assert routed.price is not None and routed.price.input == D("3")
    assert book.lookup("work", "claude-sonnet-4-5", base_url="https://api.anthropic.com",
                       at=NOW).price is not None
    assert book.lookup("gemini", "gemini-2.5-flash", at=NOW).kind == "price"
    assert book.lookup("xai", "grok-4", at=NOW).kind == "price"  # not configured: by name


def test_prices_by_time_of_day(book: PriceBook) -> None:
    day = book.lookup("deepseek", "deepseek-chat", at=datetime(2026, 12, 1, 12, tzinfo=UTC))
    night = book.lookup("deepseek", "deepseek-chat", at=datetime(2026, 12, 1, 20, tzinfo=UTC))
    assert day.price is not None and night.price is not None
    assert (day.price.input, night.price.input) == (D("0.27"), D("0.135"))


def test_a_service_tier_selects_the_librarys_variant(book: PriceBook) -> None:
    standard = book.lookup("openai", "gpt-5", at=NOW).price
    flex = book.lookup("openai", "gpt-5", at=NOW, context={"service_tier": "flex"}).price
    assert standard is not None and flex is not None
    assert (standard.input, standard.output, standard.variant) == (D("1.25"), D("10"), "")
    assert (flex.input, flex.output, flex.variant) == (D("0.625"), D("5"), "service_tier=flex")
    assert book.lookup("openai", "gpt-5", at=NOW, context={}).price == standard


def test_a_free_model_listed_without_prices_costs_zero(book: PriceBook) -> None:
    free = book.lookup("azure", "mai-ds-r1:free", at=NOW)
    assert cost(usage(input_tokens=10, output_tokens=10), free).amount == D(0)


def test_the_libraries_global_snapshot_is_never_used(book: PriceBook) -> None:
    # UpdatePrices (a download) replaces the library's global snapshot; we read the
    # bundled data directly, so an empty global changes nothing.
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot([], from_auto_update=True))
    try:
        assert PriceBook(CONFIG).lookup("openai", "gpt-4o", at=NOW).kind == "price"
    finally:
        data_snapshot.set_custom_snapshot(None)


def test_every_bundled_price_converts_with_non_decreasing_tiers() -> None:
    library = load_library()
    count = 0
    for lib_provider in library_providers:
        for info in lib_provider.models:
            for conditional in ([info.prices] if isinstance(info.prices, ModelPrice)
                                else [c.prices for c in info.prices]):
                price = library.convert(conditional)
                if price is None:
                    continue
                count += 1
                previous = price.rates(0)
                for tier in price.tiers:
                    rates = price.rates(tier.above + 1)
                    for kind in ("input", "output", "cache_read", "cache_write",
                                 "cache_write_1h"):
                        low, high = getattr(previous, kind), getattr(rates, kind)
                        assert low is None or (high is not None and high >= low >= 0)
                    previous = rates
    assert count > 2000


# ------------------------------------------------------------------ properties

rates = st.decimals(min_value=0, max_value=100, places=6, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=2_000_000)


@st.composite
def prices(draw: st.DrawFn) -> Price:
    base = {k: draw(rates) for k in ("input", "output")}
    base |= {k: draw(st.none() | rates) for k in ("cache_read", "cache_write")}
    tiers: list[PriceTier] = []
    above, current = 0, dict(base)
    for _ in range(draw(st.integers(0, 3))):
        above += draw(st.integers(1, 500_000))
        current = {k: None if v is None else v + draw(rates) for k, v in current.items()}
        tiers.append(PriceTier(above=above, **current))
    return Price(source="p", version="1", request=draw(st.none() | rates), tiers=tuple(tiers),
                 **base)


@st.composite
def usages(draw: st.DrawFn) -> CanonicalUsage:
    output = draw(counts)
    return CanonicalUsage(source=draw(st.sampled_from(["provider", "estimated"])),
                          input_tokens=draw(counts), output_tokens=output,
                          cache_read_tokens=draw(counts), cache_write_tokens=draw(counts),
                          reasoning_tokens=draw(st.integers(0, output)))


def exact(u: CanonicalUsage, price: Price) -> Fraction:
    r = price.rates(u.prompt_tokens)
    read = r.input if r.cache_read is None else r.cache_read
    write = r.input if r.cache_write is None else r.cache_write
    assert r.input is not None and r.output is not None and read is not None and write is not None
    total = (u.input_tokens * Fraction(r.input) + u.output_tokens * Fraction(r.output)
             + u.cache_read_tokens * Fraction(read) + u.cache_write_tokens * Fraction(write))
    return total / 1_000_000 + Fraction(price.request or 0)


@settings(max_examples=100, deadline=None)
@given(usages(), prices())
def test_cost_is_exact_and_never_negative(u: CanonicalUsage, price: Price) -> None:
    result = cost(u, priced(price))
    assert type(result.amount) is Decimal
    assert result.amount >= 0
    assert Fraction(result.amount) == exact(u, price)
    assert result.status == ("estimated" if u.source == "estimated" else "actual")


@settings(max_examples=100, deadline=None)
@given(usages(), prices(), st.sampled_from(["input_tokens", "output_tokens",
                                            "cache_read_tokens", "cache_write_tokens"]),
       st.integers(1, 500_000))
def test_cost_is_monotone_in_each_count(u: CanonicalUsage, price: Price, kind: str,
                                        more: int) -> None:
    bigger = msgspec.structs.replace(u, **{kind: getattr(u, kind) + more})
    low, high = cost(u, priced(price)).amount, cost(bigger, priced(price)).amount
    assert low is not None and high is not None
    assert high >= low
