from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.credits.notices import (
    GRANT_UNSPENT_MIN_MICROS,
    POLL_INTERVAL,
    RESTORED_TTL_MS,
    CreditState,
    Notice,
    header_value,
    next_poll,
    observe,
    shown,
)
from sessionwarden.domain.credits.readings import CreditReading, parse_balance

NOW = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
LIMIT = 20_000_000  # a $20 cap


def reading(
    used: Fraction | float | None = None,
    *,
    paid_access: bool = True,
    purchased_micros: int = 0,
    purchased_usd: str = "0.00",
    kind: str = "subscription_cap",
    subscription_micros: int | None = None,
    limit: int = LIMIT,
    limit_usd: str | None = "20.00",
    as_of_ms: int = 0,
) -> CreditReading:
    """A reading whose cap is ``used`` spent (None: no cap at all)."""
    if used is None:
        return CreditReading(
            remaining_micros=0,
            remaining_usd="0.00",
            subscription_micros=subscription_micros or 0,
            subscription_usd="0.00",
            rollover_micros=0,
            purchased_micros=purchased_micros,
            purchased_usd=purchased_usd,
            as_of_ms=as_of_ms,
            paid_access=paid_access,
        )
    sub = (
        subscription_micros
        if subscription_micros is not None
        else int(limit - Fraction(used) * limit)
    )
    return CreditReading(
        remaining_micros=max(0, sub) + purchased_micros,
        remaining_usd="0.00",
        subscription_micros=sub,
        subscription_usd="0.00",
        rollover_micros=0,
        purchased_micros=purchased_micros,
        purchased_usd=purchased_usd,
        as_of_ms=as_of_ms,
        subscription_limit_micros=limit,
        subscription_limit_usd=limit_usd,
        denominator_kind="subscription_cap" if kind == "subscription_cap" else "none",
        paid_access=paid_access,
    )


def run(
    *readings: CreditReading, free: bool = False, state: CreditState | None = None
) -> tuple[CreditState, tuple[Notice, ...]]:
    """Observe each reading in turn; the final state and the last observation's notices."""
    current = state or CreditState()
    notices: tuple[Notice, ...] = ()
    for r in readings:
        current, notices = observe(current, r, model_is_free=free, now=NOW)
    return current, notices


def shows(notices: tuple[Notice, ...], kind: str | None = None) -> list[Notice]:
    return [n for n in notices if n.action == "show" and (kind is None or n.kind == kind)]


def clears(notices: tuple[Notice, ...]) -> list[str]:
    return [n.key for n in notices if n.action == "clear"]


# ------------------------------------------------------------------ the usage gauge


def test_below_the_lowest_band_sets_the_latch_without_a_notice() -> None:
    state, notices = run(reading(0.10))
    assert notices == ()
    assert state.seen_below_lowest
    assert state.band is None


def test_crossing_to_90_fires_once_and_never_again_while_there() -> None:
    state, notices = run(reading(0.10), reading(0.95))
    assert [(n.kind, n.band, n.level) for n in notices] == [("band", 90, "warn")]
    assert notices[0].key == "credits.usage"
    assert notices[0].message == "used $19.00 of the $20.00 credit cap (90%)"
    for used in (0.95, 0.97, 1.0):
        state, notices = run(reading(used), state=state)
        assert notices == ()


def test_recovery_clears_the_band_and_a_recross_fires_again() -> None:
    state, _ = run(reading(0.10), reading(0.95))
    state, notices = run(reading(0.10), state=state)
    assert clears(notices) == ["credits.usage"]
    assert shows(notices) == []
    assert state.band is None
    _, notices = run(reading(0.95), state=state)
    assert [n.band for n in shows(notices, "band")] == [90]


def test_opening_already_in_a_band_is_silent() -> None:
    state, notices = run(reading(0.95))
    assert notices == ()
    assert not state.seen_below_lowest
    _, notices = run(reading(0.97), state=state)
    assert notices == ()


def test_exactly_90_percent_fires_the_90_band() -> None:
    for limit in (20_000_000, 70_000_000, 3_000_010):
        exact = reading(Fraction(9, 10), limit=limit, subscription_micros=limit // 10)
        assert exact.used_fraction == Fraction(9, 10)
        _, notices = run(reading(0.1, limit=limit), exact)
        assert [n.band for n in shows(notices)] == [90], limit
    just_under = reading(Fraction(9, 10), subscription_micros=LIMIT // 10 + 1)
    _, notices = run(reading(0.1), just_under)
    assert [n.band for n in shows(notices)] == [75]


def test_bands_50_is_info_75_and_90_warn() -> None:
    assert [(n.band, n.level) for n in shows(run(reading(0.1), reading(0.5))[1])] == [(50, "info")]
    assert [(n.band, n.level) for n in shows(run(reading(0.1), reading(0.75))[1])] == [(75, "warn")]


def test_only_the_highest_band_reached_is_shown() -> None:
    _, notices = run(reading(0.10), reading(0.80))
    assert [n.band for n in shows(notices)] == [75]


def test_a_band_change_clears_the_old_notice_first() -> None:
    state, _ = run(reading(0.10), reading(0.60))
    state, notices = run(reading(0.92), state=state)
    assert [(n.action, n.kind, n.band) for n in notices] == [
        ("clear", "band", None),
        ("show", "band", 90),
    ]
    # stepping down replaces it too
    _, notices = run(reading(0.80), state=state)
    assert [(n.action, n.band) for n in notices] == [("clear", None), ("show", 75)]


def test_purchased_credit_suppresses_the_gauge() -> None:
    _, notices = run(reading(0.10), reading(0.95, purchased_micros=1, purchased_usd="0.00"))
    assert notices == ()


def test_a_mid_session_top_up_clears_the_gauge() -> None:
    state, _ = run(reading(0.10), reading(0.95))
    _, notices = run(reading(0.95, purchased_micros=5_000_000, purchased_usd="5.00"), state=state)
    assert clears(notices) == ["credits.usage"]


def test_the_gauge_clears_when_the_cap_disappears() -> None:
    state, _ = run(reading(0.10), reading(0.95))
    state, notices = run(reading(None), state=state)
    assert clears(notices) == ["credits.usage"]
    assert state.band is None


def test_an_unknown_cap_display_shows_a_question_mark() -> None:
    _, notices = run(reading(0.10), reading(0.5, limit_usd=None))
    assert notices[0].message == "used $10.00 of the $? credit cap (50%)"


# ------------------------------------------------------------------ grant spent


def grant(purchased: int = 12_340_000) -> CreditReading:
    return reading(1.0, purchased_micros=purchased, purchased_usd="12.34")


def test_just_below_the_full_cap_does_not_fire_grant_spent() -> None:
    almost = reading(1.0, subscription_micros=1, purchased_micros=5_000_000, purchased_usd="5.00")
    assert almost.used_fraction is not None and almost.used_fraction < 1
    _, notices = run(reading(0.1), almost)
    assert shows(notices, "grant_spent") == []


def test_grant_spent_at_the_first_observation_is_silent() -> None:
    # the newer Hermes rule (an older test fired here: version drift, §6)
    state, notices = run(grant())
    assert notices == ()
    assert not state.grant_spent_shown


def test_grant_spent_fires_after_the_grant_was_seen_unspent() -> None:
    state, notices = run(reading(0.5, purchased_micros=12_340_000), grant())
    assert [(n.key, n.level, n.message) for n in shows(notices)] == [
        ("credits.grant_spent", "info", "credit grant spent, $12.34 top-up left")
    ]
    assert state.grant_spent_shown
    assert not state.seen_grant_unspent  # consumed


def test_grant_spent_does_not_refire() -> None:
    state, _ = run(reading(0.5), grant())
    _, notices = run(grant(), grant(), state=state)
    assert notices == ()


def test_grant_spent_clears_when_the_top_up_is_gone() -> None:
    state, _ = run(reading(0.5), grant())
    state, notices = run(grant(purchased=0), state=state)
    assert clears(notices) == ["credits.grant_spent"]
    assert not state.grant_spent_shown


def test_a_flicker_cannot_reannounce_grant_spent() -> None:
    state, _ = run(reading(0.5), grant())
    state, notices = run(reading(None, purchased_micros=12_340_000), state=state)
    assert clears(notices) == ["credits.grant_spent"]
    _, notices = run(grant(), state=state)
    assert notices == ()


def test_a_renewal_rearms_grant_spent() -> None:
    state, _ = run(reading(0.5), grant(), reading(0.1), grant())
    assert state.grant_spent_shown


def test_sub_cent_residue_does_not_arm_grant_spent() -> None:
    residue = reading(1.0, subscription_micros=GRANT_UNSPENT_MIN_MICROS - 1, purchased_micros=1)
    state, _ = run(residue)
    assert not state.seen_grant_unspent
    _, notices = run(grant(), state=state)
    assert notices == ()
    armed, _ = run(reading(1.0, subscription_micros=GRANT_UNSPENT_MIN_MICROS))
    assert armed.seen_grant_unspent


def test_grant_spent_needs_a_subscription_cap() -> None:
    no_cap_kind = reading(1.0, purchased_micros=1, kind="none")
    _, notices = run(reading(0.5), no_cap_kind)
    assert shows(notices, "grant_spent") == []


# ------------------------------------------------------------------ depleted / restored


def test_depleted_is_an_error_and_sticky() -> None:
    state, notices = run(reading(None, paid_access=False))
    assert [(n.kind, n.key, n.level, n.expires_at) for n in notices] == [
        ("depleted", "credits.depleted", "error", None)
    ]
    assert state.depleted_shown
    _, notices = run(reading(None, paid_access=False), state=state)
    assert notices == ()


def test_a_zero_balance_with_access_is_not_depleted() -> None:
    _, notices = run(reading(1.0, subscription_micros=0))
    assert shows(notices, "depleted") == []


def test_recovery_clears_and_raises_restored_for_8_seconds() -> None:
    state, _ = run(reading(None, paid_access=False))
    state, notices = run(reading(None), state=state)
    assert [(n.action, n.key) for n in notices] == [
        ("clear", "credits.depleted"),
        ("show", "credits.restored"),
    ]
    restored = notices[1]
    assert restored.level == "success"
    assert restored.expires_at == NOW + timedelta(milliseconds=RESTORED_TTL_MS)
    assert not state.depleted_shown


def test_depleted_refires_after_a_recovery() -> None:
    _, notices = run(
        reading(None, paid_access=False), reading(None), reading(None, paid_access=False)
    )
    assert [n.kind for n in shows(notices)] == ["depleted"]


# The free-model matrix (§6: five cases).


def test_free_model_suppresses_depleted() -> None:
    state, notices = run(reading(None, paid_access=False), free=True)
    assert notices == ()
    assert not state.depleted_shown


def test_switching_to_a_free_model_clears_without_restored() -> None:
    state, _ = run(reading(None, paid_access=False))
    state, notices = run(reading(None, paid_access=False), free=True, state=state)
    assert [(n.action, n.key) for n in notices] == [("clear", "credits.depleted")]


def test_switching_back_to_a_paid_model_while_depleted_reshows() -> None:
    state, _ = run(reading(None, paid_access=False))
    state, _ = run(reading(None, paid_access=False), free=True, state=state)
    state, notices = run(reading(None, paid_access=False), state=state)
    assert [n.key for n in shows(notices)] == ["credits.depleted"]
    assert state.depleted_shown


def test_recovery_on_a_free_model_while_suppressed_restores_nothing() -> None:
    state, _ = run(reading(None, paid_access=False), free=True)
    _, notices = run(reading(None), free=True, state=state)
    assert notices == ()


def test_genuine_recovery_while_shown_restores_even_on_a_free_model() -> None:
    state, _ = run(reading(None, paid_access=False))
    _, notices = run(reading(None), free=True, state=state)
    assert [(n.action, n.key) for n in notices] == [
        ("clear", "credits.depleted"),
        ("show", "credits.restored"),
    ]


def test_the_free_flag_leaves_the_other_notices_alone() -> None:
    _, notices = run(reading(0.1), reading(0.95, paid_access=False), free=True)
    assert [n.kind for n in shows(notices)] == ["band"]


# ------------------------------------------------------------------ seeding, staleness


def seed(state: CreditState, r: CreditReading) -> tuple[CreditState, tuple[Notice, ...]]:
    return observe(state, r, model_is_free=False, now=NOW, seed=True)


def test_a_seed_in_a_band_warns_at_once() -> None:
    state, notices = seed(CreditState(), reading(0.92))
    assert [n.band for n in shows(notices)] == [90]
    assert state.seen_below_lowest


def test_a_seed_primes_only_the_crossing_latch() -> None:
    # opening with the grant already spent is a steady state: the seed must not arm the
    # grant-spent latch (it would nag at every session start); it is armed only by a
    # reading that shows the grant unspent, seed or live, like any other
    state, notices = seed(CreditState(), grant())
    assert state.seen_below_lowest
    assert not state.seen_grant_unspent
    assert shows(notices, "grant_spent") == []
    _, notices = run(grant(), state=state)
    assert notices == ()


def test_a_seed_never_overrides_a_live_reading() -> None:
    state, _ = run(reading(0.95))
    again, notices = seed(state, reading(0.1, paid_access=False))
    assert again == state
    assert notices == ()


def test_an_older_reading_of_the_same_source_is_ignored() -> None:
    state, _ = run(reading(0.1, as_of_ms=2000), reading(0.95, as_of_ms=3000))
    late, notices = run(reading(0.1, as_of_ms=2500), state=state)
    assert late == state
    assert notices == ()
    # an undated reading (a polled balance) is never judged stale
    later, notices = run(reading(0.1, as_of_ms=0), state=state)
    assert clears(notices) == ["credits.usage"]
    assert later.observed_at == NOW


def test_a_polled_balance_goes_through_the_same_policy() -> None:
    low = parse_balance({"data": {"limit": 100, "limit_remaining": 80, "usage": 20}})
    high = parse_balance({"data": {"limit": 100, "limit_remaining": 8, "usage": 92}})
    assert low is not None and high is not None
    _, notices = run(low, high)
    assert [n.message for n in shows(notices)] == ["used $92.00 of the $100.00 credit cap (90%)"]


# ------------------------------------------------------------------ status and the header


def test_shown_lists_the_sticky_notices_up() -> None:
    assert shown(CreditState()) == ()
    state, _ = run(reading(0.1, purchased_micros=0), reading(0.95, paid_access=False))
    assert [(n.key, n.band) for n in shown(state)] == [
        ("credits.depleted", None),
        ("credits.usage", 90),
    ]


def test_header_value_joins_the_shown_notices() -> None:
    _, notices = run(reading(0.1), reading(0.95, paid_access=False))
    assert header_value(notices) == (
        "warn credits.usage: used $19.00 of the $20.00 credit cap (90%); "
        "error credits.depleted: paid credit access paused, top up the account to use paid models"
    )
    _, only_clear = run(reading(0.1), reading(0.95), reading(0.1))
    assert header_value(only_clear) is None
    assert header_value(()) is None


# ------------------------------------------------------------------ polling


def test_next_poll_waits_an_interval_after_the_last() -> None:
    assert next_poll(NOW, NOW) == NOW + POLL_INTERVAL
    assert next_poll(NOW, NOW + timedelta(seconds=10)) == NOW + POLL_INTERVAL
    late = NOW + timedelta(minutes=5)
    assert next_poll(NOW, late) == late  # overdue: poll now
    assert next_poll(NOW + timedelta(hours=1), NOW) == NOW + POLL_INTERVAL  # clock set back


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_next_poll_is_bounded(last_s: int, now_s: int) -> None:
    last, now = NOW + timedelta(seconds=last_s), NOW + timedelta(seconds=now_s)
    due = next_poll(last, now)
    assert now <= due <= now + POLL_INTERVAL
    if last <= now:
        assert due >= last + POLL_INTERVAL or due == now


# ------------------------------------------------------------------ properties


Step = tuple[Fraction | None, int, bool, bool, bool]
_step = st.tuples(
    st.one_of(st.none(), st.fractions(min_value=0, max_value=1, max_denominator=1000)),
    st.sampled_from([0, 0, 5_000_000]),  # purchased
    st.booleans(),  # paid access
    st.booleans(),  # model is free
    st.booleans(),  # seed
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_step, min_size=1, max_size=12))
def test_any_sequence_keeps_the_policy_invariants(steps: list[Step]) -> None:
    state = CreditState()
    up: set[str] = set()
    for used, purchased, paid, free, is_seed in steps:
        r = reading(used, purchased_micros=purchased, purchased_usd="5.00", paid_access=paid)
        before = state
        state, notices = observe(state, r, model_is_free=free, now=NOW, seed=is_seed)
        actions = [n.action for n in notices]
        assert actions == sorted(actions)  # clears before shows
        for n in notices:
            assert n.message.isascii() and len(n.message) <= 100
            assert not set(n.message) & set(";\r\n")
            if n.action == "clear":
                assert n.key in up  # only what is up is cleared
                up.discard(n.key)
            elif n.kind != "restored":
                assert n.key not in up  # never shown twice while up (the latch)
                up.add(n.key)
        bands = [n for n in shows(notices, "band")]
        assert all(n.band != before.band for n in bands)
        if free:
            assert shows(notices, "depleted") == []  # suppressed on a free model
        if not is_seed and used is not None and used < Fraction(1, 2):
            assert state.seen_below_lowest
        assert {n.key for n in shown(state)} == up


@settings(max_examples=20, deadline=None)
@given(st.lists(_step, min_size=1, max_size=6))
def test_observe_is_deterministic(steps: list[Step]) -> None:
    a = b = CreditState()
    for used, purchased, paid, free, is_seed in steps:
        r = reading(used, purchased_micros=purchased, paid_access=paid)
        a, na = observe(a, r, model_is_free=free, now=NOW, seed=is_seed)
        b, nb = observe(b, r, model_is_free=free, now=NOW, seed=is_seed)
        assert (a, na) == (b, nb)


@pytest.mark.parametrize("pct", [50, 75, 90])
def test_each_band_is_announced_once_per_crossing(pct: int) -> None:
    used = Fraction(pct, 100)
    state, first = run(reading(0.1), reading(used))
    assert [n.band for n in shows(first)] == [pct]
    _, again = run(reading(used), reading(used), state=state)
    assert again == ()
