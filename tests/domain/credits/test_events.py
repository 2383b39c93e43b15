from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import parse_config
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import Price, PriceLookup, PriceTier
from sessionwarden.domain.credits.events import (
    model_is_free,
    notice_event,
    observed_event,
    state_of,
    track,
    worth_recording,
)
from sessionwarden.domain.credits.notices import RESTORED_TTL_MS, CreditState, observe
from sessionwarden.domain.credits.readings import CreditReading
from sessionwarden.events import CODEC, CreditNoticeCleared, CreditNoticeRaised, CreditsObserved

NOW = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
LIMIT = 20_000_000


def reading(used: Fraction | float, *, paid: bool = True, purchased: int = 0,
            as_of_ms: int = 0) -> CreditReading:
    sub = int(LIMIT - Fraction(used) * LIMIT)
    return CreditReading(
        remaining_micros=max(0, sub) + purchased, remaining_usd="1.00",
        subscription_micros=sub, subscription_usd="1.00", rollover_micros=0,
        purchased_micros=purchased, purchased_usd="0.50", as_of_ms=as_of_ms,
        subscription_limit_micros=LIMIT, subscription_limit_usd="20.00",
        denominator_kind="subscription_cap", paid_access=paid,
    )


def price(input: str, output: str, **extra: object) -> PriceLookup:
    return PriceLookup(kind="price", price=Price(source="override", version="config",
                                                 input=Decimal(input), output=Decimal(output),
                                                 **extra))  # type: ignore[arg-type]


# ------------------------------------------------------------------ the free-model test (§6)


def test_a_free_suffix_or_a_stealth_prefix_is_free_whatever_the_price() -> None:
    assert model_is_free("meta-llama/llama-3.3-70b-instruct:free", None)
    assert model_is_free("stealth/some-model", price("3", "15"))


def test_a_zero_price_is_free() -> None:
    assert model_is_free("gpt-x", price("0", "0"))


def test_a_price_a_fee_or_a_tier_is_not_free() -> None:
    assert not model_is_free("gpt-x", price("0", "0.01"))
    assert not model_is_free("gpt-x", price("0", "0", request=Decimal("0.001")))
    tier = PriceTier(above=1000, input=Decimal(1))
    assert not model_is_free("gpt-x", price("0", "0", tiers=(tier,)))


def test_a_miss_means_not_free() -> None:
    assert not model_is_free("gpt-x", None)
    assert not model_is_free("gpt-x", PriceLookup(kind="unknown", reason="no price"))
    # a subscription route is paid for: its depletion is news
    assert not model_is_free("gpt-x", PriceLookup(kind="included"))
    assert not model_is_free("free-model", None)  # only the suffix counts, not the word
    assert not model_is_free("x:free-ish", None)


# ------------------------------------------------------------------ what is recorded


def test_the_first_reading_of_a_key_is_recorded_then_only_changes() -> None:
    state, _, events = track(CreditState(), "fp:1", reading(0.1), model_is_free=False, now=NOW)
    assert [type(e) for e in events] == [CreditsObserved]  # the latch armed
    # counting down inside the same state: nothing to write
    state, _, events = track(state, "fp:1", reading(0.2), model_is_free=False, now=NOW)
    assert events == ()
    state, _, events = track(state, "fp:1", reading(0.5), model_is_free=False, now=NOW)
    assert [type(e) for e in events] == [CreditsObserved, CreditNoticeRaised]
    observed, raised = events
    assert isinstance(observed, CreditsObserved) and observed.band == 50
    assert isinstance(raised, CreditNoticeRaised)
    assert (raised.credential, raised.key, raised.level, raised.band, raised.ttl_ms) == (
        "fp:1", "credits.usage", "info", 50, 0)


def test_a_clear_comes_before_the_show_in_the_events() -> None:
    state, _, _ = track(CreditState(), "k", reading(0.1), model_is_free=False, now=NOW)
    state, _, _ = track(state, "k", reading(0.6), model_is_free=False, now=NOW)
    _, _, events = track(state, "k", reading(0.95), model_is_free=False, now=NOW)
    assert [type(e).__name__ for e in events] == [
        "CreditsObserved", "CreditNoticeCleared", "CreditNoticeRaised"]


def test_restored_is_recorded_with_its_lifetime() -> None:
    state, _, _ = track(CreditState(), "k", reading(0.1, paid=False), model_is_free=False,
                        now=NOW)
    _, notices, events = track(state, "k", reading(0.1), model_is_free=False, now=NOW)
    restored = [e for e in events if isinstance(e, CreditNoticeRaised)]
    assert [(e.key, e.level, e.ttl_ms) for e in restored] == [
        ("credits.restored", "success", RESTORED_TTL_MS)]
    assert [e.key for e in events if isinstance(e, CreditNoticeCleared)] == ["credits.depleted"]
    assert notice_event("k", notices[-1], NOW + timedelta(seconds=20)) == CreditNoticeRaised(
        credential="k", key="credits.restored", level="success",
        message="paid credit access restored", ttl_ms=1)  # never 0: that means sticky


def test_a_stale_reading_records_nothing() -> None:
    state, _, _ = track(CreditState(), "k", reading(0.1, as_of_ms=5), model_is_free=False,
                        now=NOW)
    again, notices, events = track(state, "k", reading(0.9, as_of_ms=4), model_is_free=False,
                                   now=NOW)
    assert (again, notices, events) == (state, (), ())


def test_worth_recording_ignores_a_state_without_a_reading() -> None:
    assert not worth_recording(CreditState(), CreditState())


# ------------------------------------------------------------------ recovery


_step = st.tuples(st.fractions(min_value=0, max_value=1, max_denominator=100),
                  st.booleans(), st.sampled_from([0, 0, 3_000_000]), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(_step, min_size=1, max_size=10), _step)
def test_a_tracker_recovered_from_its_last_record_decides_the_same(
    steps: list[tuple[Fraction, bool, int, bool]], last: tuple[Fraction, bool, int, bool],
) -> None:
    """What a restart relies on: the last recorded state, through the codec, is as good as
    the live one for every later reading."""
    live, recorded = CreditState(), None
    for used, paid, purchased, free in steps:
        live, _, events = track(live, "k", reading(used, paid=paid, purchased=purchased),
                                model_is_free=free, now=NOW)
        for e in events:
            if isinstance(e, CreditsObserved):
                encoded = CODEC.encode(e)
                recorded = CODEC.decode(encoded.type, encoded.data)
    assert isinstance(recorded, CreditsObserved)
    restored = state_of(recorded, NOW)
    used, paid, purchased, free = last
    nxt = reading(used, paid=paid, purchased=purchased)
    _, want = observe(live, nxt, model_is_free=free, now=NOW)
    _, got = observe(restored, nxt, model_is_free=free, now=NOW)
    assert got == want


def test_observed_event_and_state_of_round_trip() -> None:
    state, _ = observe(CreditState(), reading(0.3, purchased=1_000_000), model_is_free=False,
                       now=NOW)
    assert state_of(observed_event("k", state), NOW) == state


@pytest.mark.parametrize("base_url", [
    "https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1/", "https://openrouter.ai/api",
])
def test_a_zero_price_is_found_whatever_the_form_of_the_base_url(base_url: str) -> None:
    # §6: Hermes normalises its pricing cache's key (/v1, a trailing slash); the price
    # book matches the provider by its base URL the same way.
    model = "agentica-org/deepcoder-14b-preview:free"
    lookup = PriceBook(parse_config("")).lookup("openrouter", model, at=NOW, base_url=base_url)
    assert lookup.price is not None and (lookup.price.input, lookup.price.output) == (0, 0)
    assert model_is_free(model.removesuffix(":free"), lookup)
