from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.credits.readings import (
    CreditReading,
    parse_balance,
    parse_credit_headers,
    unsupported_credit_version,
)

C = "x-nous-credits-"


def headers(**overrides: str | None) -> dict[str, str]:
    """A complete, valid header set; an override of None removes the field."""
    base: dict[str, str | None] = {
        "version": "1",
        "remaining-micros": "30340000",
        "remaining-usd": "30.34",
        "subscription-micros": "18000000",
        "subscription-usd": "18.00",
        "rollover-micros": "0",
        "purchased-micros": "12340000",
        "purchased-usd": "12.34",
        "as-of-ms": "1764636000000",
        "subscription-limit-micros": "20000000",
        "subscription-limit-usd": "20.00",
        "denominator-kind": "subscription_cap",
    }
    tool = {}
    for name, value in overrides.items():
        name = name.replace("_", "-")
        if name.startswith("tool-pool"):
            tool["x-nous-" + name] = value
        else:
            base[name] = value
    out = {C + k: v for k, v in base.items() if v is not None}
    out.update({k: v for k, v in tool.items() if v is not None})
    return out


# ------------------------------------------------------------------ headers: the good case


def test_full_header_set_parses_every_field() -> None:
    reading = parse_credit_headers(
        headers(paid_access="true", disabled_reason="none", tool_pool_micros="500")
    )
    assert reading == CreditReading(
        remaining_micros=30_340_000,
        remaining_usd="30.34",
        subscription_micros=18_000_000,
        subscription_usd="18.00",
        rollover_micros=0,
        purchased_micros=12_340_000,
        purchased_usd="12.34",
        as_of_ms=1_764_636_000_000,
        subscription_limit_micros=20_000_000,
        subscription_limit_usd="20.00",
        tool_pool_micros=500,
        denominator_kind="subscription_cap",
        paid_access=True,
        disabled_reason="none",
    )
    assert reading.used_fraction == Fraction(1, 10)
    assert reading.used_micros == 2_000_000


def test_names_are_case_insensitive() -> None:
    upper = {k.upper(): v for k, v in headers().items()}
    assert parse_credit_headers(upper) == parse_credit_headers(headers())


def test_optional_fields_take_their_defaults() -> None:
    reading = parse_credit_headers(
        headers(subscription_limit_micros=None, subscription_limit_usd=None, denominator_kind=None)
    )
    assert reading is not None
    assert reading.paid_access is True  # absent: fail open
    assert reading.tool_pool_micros == 0
    assert reading.tool_pool_gated_off is False
    assert reading.denominator_kind == "none"
    assert reading.disabled_reason is None
    assert reading.subscription_limit_micros is None
    assert reading.used_fraction is None


def test_subscription_may_be_negative_debt() -> None:
    reading = parse_credit_headers(
        headers(subscription_micros="-5000000", subscription_usd="-5.00")
    )
    assert reading is not None
    assert reading.subscription_micros == -5_000_000
    assert reading.used_fraction == 1  # clamped
    assert reading.used_micros == 20_000_000


def test_integers_are_exact_beyond_float_precision() -> None:
    big = str(2**53 + 1)
    reading = parse_credit_headers(headers(remaining_micros=big))
    assert reading is not None and reading.remaining_micros == 2**53 + 1


def test_usd_strings_are_kept_verbatim() -> None:
    reading = parse_credit_headers(headers(remaining_usd="0007.10"))
    assert reading is not None and reading.remaining_usd == "0007.10"


@pytest.mark.parametrize(
    ("raw", "expected"), [("true", True), ("FALSE", False), (" false ", False)]
)
def test_bools_are_the_strings_true_and_false(raw: str, expected: bool) -> None:
    reading = parse_credit_headers(headers(paid_access=raw, tool_pool_gated_off=raw))
    assert reading is not None
    assert reading.paid_access is expected
    assert reading.tool_pool_gated_off is expected


def test_depleted_is_paid_access_off_never_a_zero_balance() -> None:
    zero = parse_credit_headers(
        headers(remaining_micros="0", remaining_usd="0.00", subscription_micros="0")
    )
    assert zero is not None and not zero.depleted
    off = parse_credit_headers(headers(paid_access="false"))
    assert off is not None and off.depleted


# ------------------------------------------------------------------ headers: misses


def test_no_version_header_is_a_miss() -> None:
    assert parse_credit_headers(headers(version=None)) is None
    assert parse_credit_headers({}) is None
    assert parse_credit_headers({"content-type": "application/json"}) is None


@pytest.mark.parametrize("version", ["0", "2", "1.0", "one", "", "-1"])
def test_a_version_other_than_1_is_a_miss(version: str) -> None:
    assert parse_credit_headers(headers(version=version)) is None


def test_a_newer_version_is_reported_for_a_one_time_warning() -> None:
    assert unsupported_credit_version(headers(version="2")) == 2
    assert unsupported_credit_version({"X-Nous-Credits-Version": "7"}) == 7
    assert unsupported_credit_version(headers()) is None
    assert unsupported_credit_version(headers(version="0")) is None
    assert unsupported_credit_version(headers(version="x")) is None
    assert unsupported_credit_version({}) is None


@pytest.mark.parametrize(
    "field",
    [
        "remaining-micros",
        "subscription-micros",
        "rollover-micros",
        "purchased-micros",
        "as-of-ms",
        "remaining-usd",
        "subscription-usd",
        "purchased-usd",
    ],
)
def test_every_required_field_missing_is_a_miss(field: str) -> None:
    assert parse_credit_headers(headers(**{field: None})) is None


@pytest.mark.parametrize(
    "bad", ["12.0", "1e6", "1_000", "+5", "", " ", "0x10", "١٢", "12 34", "9" * 20, "NaN"]
)
def test_integers_are_strict(bad: str) -> None:
    assert parse_credit_headers(headers(remaining_micros=bad)) is None


@pytest.mark.parametrize(
    "field",
    ["remaining-micros", "rollover-micros", "purchased-micros", "as-of-ms", "tool-pool-micros"],
)
def test_unsigned_fields_reject_negatives(field: str) -> None:
    assert parse_credit_headers(headers(**{field: "-1"})) is None


@pytest.mark.parametrize("bad", ["12", "12.3", "12.345", "$12.34", "12,34", "١٢.٣٤", "1e2.00", ""])
def test_usd_strings_must_have_exactly_two_decimals(bad: str) -> None:
    assert parse_credit_headers(headers(purchased_usd=bad)) is None


@pytest.mark.parametrize("bad", ["yes", "1", "", "truee"])
def test_bools_reject_anything_but_true_and_false(bad: str) -> None:
    assert parse_credit_headers(headers(paid_access=bad)) is None
    assert parse_credit_headers(headers(tool_pool_gated_off=bad)) is None


@pytest.mark.parametrize("kind", ["cap", "Subscription_Cap", "", "monthly"])
def test_an_unknown_denominator_kind_is_a_miss(kind: str) -> None:
    assert parse_credit_headers(headers(denominator_kind=kind)) is None


@pytest.mark.parametrize("missing", ["subscription-limit-micros", "subscription-limit-usd"])
def test_half_a_limit_pair_counts_as_neither(missing: str) -> None:
    reading = parse_credit_headers(headers(**{missing: None}))
    assert reading is not None
    assert reading.subscription_limit_micros is None
    assert reading.subscription_limit_usd is None
    assert reading.used_fraction is None


def test_a_malformed_limit_in_a_full_pair_is_a_miss() -> None:
    assert parse_credit_headers(headers(subscription_limit_micros="20.5")) is None
    assert parse_credit_headers(headers(subscription_limit_usd="20")) is None


def test_a_zero_limit_gives_no_fraction() -> None:
    reading = parse_credit_headers(headers(subscription_limit_micros="0"))
    assert reading is not None and reading.used_fraction is None


def test_case_variants_that_disagree_are_a_miss() -> None:
    mixed = headers()
    mixed["X-Nous-Credits-Remaining-Micros"] = "1"
    assert parse_credit_headers(mixed) is None
    agreeing = headers()
    agreeing["X-Nous-Credits-Remaining-Micros"] = agreeing[C + "remaining-micros"]
    assert parse_credit_headers(agreeing) == parse_credit_headers(headers())


def test_a_non_string_value_is_a_miss_not_a_crash() -> None:
    odd: dict[str, object] = dict(headers())
    odd[C + "remaining-micros"] = 5
    assert parse_credit_headers(odd) is None  # type: ignore[arg-type]


def test_disabled_reason_keeps_only_printable_ascii_and_is_short() -> None:
    reading = parse_credit_headers(
        headers(disabled_reason="out\x1b[31m_of\u2028credits" + "x" * 500)
    )
    assert reading is not None and reading.disabled_reason is not None
    assert reading.disabled_reason.startswith("out[31m_ofcredits")
    assert len(reading.disabled_reason) <= 120


_names = st.sampled_from(
    [
        C + f
        for f in (
            "version",
            "remaining-micros",
            "subscription-micros",
            "purchased-usd",
            "paid-access",
            "denominator-kind",
            "subscription-limit-micros",
        )
    ]
    + ["x-nous-tool-pool-micros", "X-NOUS-CREDITS-AS-OF-MS", "other"]
)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(st.one_of(_names, st.text(max_size=30)), st.text(max_size=40), max_size=12),
    st.dictionaries(_names, st.text(max_size=40), max_size=4),
)
def test_parsing_never_raises_on_arbitrary_values(
    noise: dict[str, str], overrides: dict[str, str]
) -> None:
    for candidate in (noise, {**headers(), **overrides}):
        reading = parse_credit_headers(candidate)
        assert reading is None or isinstance(reading, CreditReading)
        unsupported_credit_version(candidate)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(10**18), max_value=10**18), st.integers(1, 10**15))
def test_used_fraction_is_exact_and_clamped(subscription: int, limit: int) -> None:
    reading = parse_credit_headers(
        headers(subscription_micros=str(subscription), subscription_limit_micros=str(limit))
    )
    assert reading is not None and reading.used_fraction is not None
    assert 0 <= reading.used_fraction <= 1
    if 0 <= subscription <= limit:
        assert reading.used_fraction == Fraction(limit - subscription, limit)


# ------------------------------------------------------------------ OpenRouter key balance


def test_openrouter_key_with_a_limit_becomes_a_capped_reading() -> None:
    body = {
        "data": {
            "label": "sk-or-v1-au7...890",
            "limit": 100,
            "limit_remaining": 74.5,
            "limit_reset": "monthly",
            "usage": 25.5,
            "is_free_tier": False,
        }
    }
    reading = parse_balance(body)
    assert reading == CreditReading(
        remaining_micros=74_500_000,
        remaining_usd="74.50",
        subscription_micros=74_500_000,
        subscription_usd="74.50",
        rollover_micros=0,
        purchased_micros=0,
        purchased_usd="0.00",
        as_of_ms=0,
        subscription_limit_micros=100_000_000,
        subscription_limit_usd="100.00",
        denominator_kind="subscription_cap",
        source="balance",
    )
    assert reading.used_fraction == Fraction(255, 1000)
    assert "sk-or" not in repr(reading)  # the key's label is never kept


def test_openrouter_small_amounts_are_exact_micros() -> None:
    reading = parse_balance({"data": {"limit": 5, "limit_remaining": 4.8984355238, "usage": 0.1}})
    assert reading is not None
    assert reading.subscription_micros == 4_898_436  # half-even on the exact decimal
    assert reading.subscription_usd == "4.90"


def test_openrouter_floats_are_read_by_their_repr() -> None:
    # 3.5e-06 as a binary float is a hair under 3.5 micros: read exactly, it would round
    # down; the JSON said 3.5 micros, which rounds half-even to 4
    reading = parse_balance({"data": {"limit": 1, "limit_remaining": 3.5e-06}})
    assert reading is not None and reading.subscription_micros == 4


def test_openrouter_extreme_exponents_do_not_raise() -> None:
    tiny = parse_balance({"data": {"limit": 10, "limit_remaining": Decimal("1e-999999999")}})
    assert tiny is not None and tiny.subscription_micros == 0
    assert parse_balance({"data": {"limit": Decimal("1e999999999"), "usage": 1}}) is None


def test_openrouter_remaining_derived_from_usage_when_absent() -> None:
    reading = parse_balance({"data": {"limit": 10, "usage": Decimal("9.25")}})
    assert reading is not None and reading.subscription_micros == 750_000


def test_openrouter_overdrawn_key_is_not_depleted() -> None:
    reading = parse_balance({"data": {"limit": 10, "limit_remaining": -0.5, "usage": 10.5}})
    assert reading is not None
    assert reading.subscription_micros == -500_000
    assert reading.remaining_micros == 0
    assert reading.used_fraction == 1
    assert not reading.depleted  # §6: never inferred from the balance


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "x",
        {},
        {"data": None},
        {"data": []},
        # no cap: nothing to judge
        {"data": {"limit": None, "limit_remaining": None, "usage": 3.2}},
        {"data": {"limit": True, "limit_remaining": 1}},
        {"data": {"limit": "ten", "limit_remaining": 1}},
        {"data": {"limit": 10}},  # cap without remaining or usage
        {"data": {"limit": 10, "limit_remaining": float("nan")}},
        {"data": {"limit": float("inf"), "limit_remaining": 1}},
        {"data": {"limit": -1, "limit_remaining": 1}},
        {"data": {"limit": 10**13, "limit_remaining": 1}},
        {"data": {"limit": 10, "limit_remaining": 1, "usage": "lots"}},
        {"data": {"limit": "10", "limit_remaining": "1"}},  # strings are not amounts
    ],
)
def test_odd_balance_bodies_are_misses(body: object) -> None:
    assert parse_balance(body) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
_amount = st.one_of(
    st.none(), st.integers(), st.floats(), st.decimals(), st.text(max_size=45), st.booleans()
)


@settings(max_examples=80, deadline=None)
@given(_json, _amount, _amount, _amount)
def test_parse_balance_never_raises(
    noise: object, limit: object, left: object, used: object
) -> None:
    for body in (noise, {"data": {"limit": limit, "limit_remaining": left, "usage": used}}):
        reading = parse_balance(body)
        assert reading is None or reading.used_fraction is None or 0 <= reading.used_fraction <= 1
