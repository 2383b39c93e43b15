"""Pricing Anthropic's iterations and its 1-hour cache writes (domain/cost/pricing.py's rules).

A compaction iteration's tokens are not in the top-level counts, yet they are billed:
each billed part (``CanonicalUsage.billed_parts``) is priced on its own and summed. A
1-hour cache write is billed at its own rate, else at twice the input rate.
"""

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import Config, ModelConfig, PriceConfig, ProviderConfig
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import Price, PriceLookup, PriceTier, cost
from sessionwarden.domain.usage.canonical import CanonicalUsage, normalise_usage

D = Decimal
NOW = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
SONNET = Price(source="test", version="1", input=D("3"), output=D("15"), cache_read=D("0.3"),
               cache_write=D("3.75"), cache_write_1h=D("6"))


def priced(price: Price) -> PriceLookup:
    return PriceLookup(kind="price", price=price)


def anthropic(block: dict[str, object]) -> CanonicalUsage:
    return normalise_usage("anthropic_messages", block)


COMPACTING = {
    # Anthropic's compaction docs: the top level describes the last (message) iteration.
    "input_tokens": 23000, "output_tokens": 1000,
    "iterations": [
        {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
        {"type": "message", "input_tokens": 23000, "output_tokens": 1000},
    ],
}


# ------------------------------------------------------------------ 1-hour cache writes


def test_one_hour_writes_at_their_own_rate() -> None:
    u = CanonicalUsage(source="provider", input_tokens=10, cache_write_tokens=1000,
                       cache_write_1h_tokens=400)
    # 10 x 3 + 600 x 3.75 + 400 x 6 = 4680 per million
    assert cost(u, priced(SONNET)).amount == D("0.00468")


def test_one_hour_writes_without_a_rate_cost_twice_the_input() -> None:
    price = msgspec.structs.replace(SONNET, cache_write_1h=None)
    u = CanonicalUsage(source="provider", cache_write_tokens=100, cache_write_1h_tokens=100)
    assert cost(u, priced(price)).amount == D("0.0006")  # 100 x 3 x 2


def test_a_tier_sets_the_one_hour_rate_too() -> None:
    price = msgspec.structs.replace(
        SONNET, tiers=(PriceTier(above=200_000, input=D("6"), cache_write_1h=D("12")),))
    u = CanonicalUsage(source="provider", input_tokens=200_000, cache_write_tokens=10,
                       cache_write_1h_tokens=10)
    # above the cliff: 200,000 x 6 + 10 x 12
    assert cost(u, priced(price)).amount == D("1.20012")


def test_the_library_lists_the_one_hour_rate_and_an_override_can_set_it() -> None:
    config = Config(
        providers=(ProviderConfig(name="anthropic", base_url="https://api.anthropic.com/v1",
                                  api_mode="anthropic_messages"),
                   ProviderConfig(name="house", base_url="http://localhost:9/v1")),
        models=(ModelConfig(name="claude-opus-4-5", provider="anthropic",
                            price=PriceConfig(cache_write_1h=D("9"))),
                ModelConfig(name="m", provider="house",
                            price=PriceConfig(input=D("1"), output=D("2"), cache_read=D("0.1"),
                                              cache_write=D("1.25")))),
    )
    book = PriceBook(config)
    sonnet = book.lookup("anthropic", "claude-sonnet-4-5", at=NOW).price
    assert sonnet is not None and sonnet.cache_write_1h == D("6")
    assert sonnet.tiers[0].cache_write_1h == D("12")
    opus = book.lookup("anthropic", "claude-opus-4-5", at=NOW).price
    assert opus is not None and opus.cache_write_1h == D("9") and opus.input == D("5")
    # a full override without a 1-hour rate keeps nothing of the library's: twice input
    house = book.lookup("house", "m", at=NOW)
    assert house.price is not None and house.price.version == "config"
    u = CanonicalUsage(source="provider", cache_write_tokens=10, cache_write_1h_tokens=10)
    assert cost(u, house).amount == D("0.00002")


# ------------------------------------------------------------------ iterations


def test_every_iteration_is_billed_the_compaction_included() -> None:
    result = cost(anthropic(COMPACTING), priced(SONNET))
    # (180,000 + 23,000) x 3 + (3,500 + 1,000) x 15 per million; the top level alone
    # (23,000 x 3 + 1,000 x 15 = $0.084) would leave the compaction out.
    assert result.amount == D("0.6765")
    assert result.status == "actual"


def test_each_iteration_takes_its_own_tier() -> None:
    tiered = msgspec.structs.replace(
        SONNET, tiers=(PriceTier(above=200_000, input=D("6"), output=D("22.5")),))
    block = {"input_tokens": 150_000, "output_tokens": 10, "iterations": [
        {"type": "compaction", "input_tokens": 150_000, "output_tokens": 10},
        {"type": "message", "input_tokens": 150_000, "output_tokens": 10}]}
    # 300,000 prompt tokens over the call, but no single step is above the cliff
    assert cost(anthropic(block), priced(tiered)).amount == D("0.9003")


def test_the_request_fee_is_charged_once() -> None:
    price = msgspec.structs.replace(SONNET, request=D("0.01"))
    assert cost(anthropic(COMPACTING), priced(price)).amount == D("0.6865")


def test_an_iteration_of_another_model_takes_that_models_price() -> None:
    opus = Price(source="test", version="1", input=D("5"), output=D("25"))
    block = {"input_tokens": 100, "output_tokens": 10, "iterations": [
        {"type": "message", "input_tokens": 100, "output_tokens": 10},
        {"type": "advisor_message", "model": "opus", "input_tokens": 1000,
         "output_tokens": 100}]}
    book = {"opus": priced(opus), "free": PriceLookup(kind="included")}

    def models(name: str) -> PriceLookup:
        return book.get(name, PriceLookup(kind="unknown", reason=f"no price for {name}"))

    # 100 x 3 + 10 x 15 at the call's price, 1,000 x 5 + 100 x 25 at opus's
    assert cost(anthropic(block), priced(SONNET), models=models).amount == D("0.00795")
    # without the book, every iteration is priced as the call
    assert cost(anthropic(block), priced(SONNET)).amount == D("0.00495")
    unpriced = {**block, "iterations": [{**block["iterations"][1], "model": "nope"}]}  # type: ignore[index]
    result = cost(anthropic(unpriced), priced(SONNET), models=models)
    assert (result.amount, result.status, result.reason) == (None, "unknown", "no price for nope")
    included = {**block, "iterations": [{**block["iterations"][1], "model": "free"}]}  # type: ignore[index]
    assert cost(anthropic(included), priced(SONNET), models=models).amount == D(0)


# ------------------------------------------------------------------ properties

rates = st.decimals(min_value=0, max_value=100, places=6, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=500_000)


@st.composite
def prices(draw: st.DrawFn) -> Price:
    kinds = ("cache_read", "cache_write", "cache_write_1h")
    base = {"input": draw(rates), "output": draw(rates)}
    base |= {k: draw(st.none() | rates) for k in kinds}
    tiers: list[PriceTier] = []
    above, current = 0, dict(base)
    for _ in range(draw(st.integers(0, 2))):
        above += draw(st.integers(1, 400_000))
        current = {k: None if v is None else v + draw(rates) for k, v in current.items()}
        tiers.append(PriceTier(above=above, **current))
    return Price(source="p", version="1", request=draw(st.none() | rates), tiers=tuple(tiers),
                 **base)


@st.composite
def parts(draw: st.DrawFn) -> CanonicalUsage:
    write = draw(counts)
    return CanonicalUsage(
        source="provider", input_tokens=draw(counts), output_tokens=draw(counts),
        cache_read_tokens=draw(counts), cache_write_tokens=write,
        cache_write_1h_tokens=draw(st.integers(0, write)),
        iteration_type=draw(st.sampled_from(["compaction", "message"])))


def exact(u: CanonicalUsage, price: Price) -> Fraction:
    """The cost of one part by hand, in Fractions (no Decimal anywhere)."""
    r = price.rates(u.prompt_tokens)
    assert r.input is not None and r.output is not None
    read = r.input if r.cache_read is None else r.cache_read
    write = r.input if r.cache_write is None else r.cache_write
    hour = 2 * Fraction(r.input) if r.cache_write_1h is None else Fraction(r.cache_write_1h)
    five = u.cache_write_tokens - u.cache_write_1h_tokens
    return (u.input_tokens * Fraction(r.input) + u.output_tokens * Fraction(r.output)
            + u.cache_read_tokens * Fraction(read) + five * Fraction(write)
            + u.cache_write_1h_tokens * hour) / 1_000_000


@settings(max_examples=150, deadline=None)
@given(st.lists(parts(), min_size=1, max_size=4), prices())
def test_a_call_costs_the_exact_sum_of_its_iterations(
    iterations: list[CanonicalUsage], price: Price
) -> None:
    last = iterations[-1]
    u = msgspec.structs.replace(last, iteration_type="", iterations=tuple(iterations))
    result = cost(u, priced(price))
    assert result.amount is not None and type(result.amount) is Decimal
    expected = sum((exact(p, price) for p in iterations), Fraction(0))
    assert Fraction(result.amount) == expected + Fraction(price.request or 0)
    # the compaction iterations are never free when their tokens have a price
    alone = msgspec.structs.replace(u, iterations=tuple(
        p for p in iterations if p.iteration_type == "message") or (last,))
    low = cost(alone, priced(price)).amount
    assert low is not None and result.amount >= low


@settings(max_examples=100, deadline=None)
@given(parts(), prices(), st.integers(1, 100_000))
def test_moving_writes_to_the_one_hour_lifetime_never_costs_less_when_it_is_dearer(
    u: CanonicalUsage, price: Price, more: int
) -> None:
    r = price.rates(u.prompt_tokens)
    assert r.input is not None
    five = r.input if r.cache_write is None else r.cache_write
    hour = 2 * r.input if r.cache_write_1h is None else r.cache_write_1h
    moved = min(more, u.cache_write_tokens - u.cache_write_1h_tokens)
    longer = msgspec.structs.replace(u, cache_write_1h_tokens=u.cache_write_1h_tokens + moved)
    low, high = cost(u, priced(price)).amount, cost(longer, priced(price)).amount
    assert low is not None and high is not None
    assert (high >= low) if hour >= five else (high <= low)


@pytest.mark.parametrize("kind", ["compaction", "message", "advisor_message"])
def test_no_iteration_kind_is_priced_at_zero(kind: str) -> None:
    block = {"input_tokens": 1, "output_tokens": 1,
             "iterations": [{"type": kind, "input_tokens": 1000, "output_tokens": 100}]}
    assert cost(anthropic(block), priced(SONNET)).amount == D("0.0045")
