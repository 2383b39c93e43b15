from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.cost.caps import (
    CODE_CAP_EXHAUSTED,
    CODE_REQUEST_EXCEEDS_CAP,
    CODE_UNPRICED_MODEL,
    MAX_ANCESTRY,
    BudgetCall,
    Caps,
    Refusal,
    Reservation,
    Reserved,
    Scope,
    Spend,
    Tally,
    adopt,
    display_usd,
    release,
    reserve,
    settle,
)
from sessionwarden.domain.cost.worst_case import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    output_bound,
    prompt_chars,
    requested_choices,
    requested_max_tokens,
    worst_case,
    worst_input_price,
)
from sessionwarden.domain.errors import UnknownCall

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DAY = "2026-12-02"
D = Decimal


def call(call_id: str = "c1", cost: str | None = "1", *, session: str = "s1",
         provider: str = "openai") -> BudgetCall:
    return BudgetCall(call_id=call_id, session_id=session, provider=provider,
                      worst_case=None if cost is None else D(cost))


def ok(result: Reserved | Refusal) -> Reserved:
    assert isinstance(result, Reserved), result
    return result


def refused(result: Reserved | Refusal) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


# ------------------------------------------------------------------ the worst case


def test_worst_case_is_exact_decimal() -> None:
    # 1,000 in at $3/M + 500 out at $15/M + a $0.01 request fee.
    assert worst_case(1000, 500, D("3"), D("15"), D("0.01")) == D("0.0205")
    assert worst_case(1, 1, D("0.1"), D("0.2")) == D("0.0000003")
    assert worst_case(-5, 0, D("3"), D("15")) == 0


def test_worst_input_price_takes_the_dearer_cache_write() -> None:
    assert worst_input_price(D("3"), D("3.75")) == D("3.75")
    assert worst_input_price(D("3"), None) == D("3")
    assert worst_input_price(D("3"), D("0.3")) == D("3")


def test_worst_input_price_takes_the_dearer_one_hour_cache_write() -> None:
    assert worst_input_price(D("3"), D("3.75"), D("6")) == D("6")
    assert worst_input_price(D("3"), None, D("6")) == D("6")


def test_requested_max_tokens_reads_every_wire_shape() -> None:
    # Several limits: the largest, whichever one the provider honours.
    assert requested_max_tokens({"max_tokens": 100, "max_completion_tokens": 50}) == 100
    assert requested_max_tokens({"max_tokens": 100, "max_completion_tokens": 500}) == 500
    assert requested_max_tokens({"max_tokens": -1, "max_completion_tokens": 50}) == 50
    assert requested_max_tokens({"max_tokens": 100}) == 100
    assert requested_max_tokens({"max_output_tokens": 70}) == 70
    for bad in ({"max_tokens": True}, {"max_tokens": 0}, {"max_tokens": "9"}, {}, [1], None):
        assert requested_max_tokens(bad) is None


def test_output_bound_request_then_model_then_default() -> None:
    assert output_bound(100_000, 16_384) == 16_384  # the provider cannot write more
    assert output_bound(500, 16_384) == 500
    assert output_bound(500, None) == 500
    assert output_bound(None, 8_192) == 8_192
    assert output_bound(None, None) == DEFAULT_MAX_OUTPUT_TOKENS
    assert output_bound(100_000, 16_384, choices=3) == 3 * 16_384  # each answer is billed
    assert output_bound(None, None, choices=2) == 2 * DEFAULT_MAX_OUTPUT_TOKENS


def test_requested_choices_reads_n_and_ignores_what_is_not_a_count() -> None:
    assert requested_choices({"n": 4}) == 4
    for odd in ({"n": 1}, {"n": 0}, {"n": -2}, {"n": True}, {"n": "4"}, {"n": 2.0}, {}, None):
        assert requested_choices(odd) == 1


def test_display_rounds_and_marks_it() -> None:
    assert display_usd(D("1.234")) == "~$1.23"
    assert display_usd(D("0.00464")) == "~$0.0046"
    assert display_usd(D("0.00005")) == "~$<0.0001"
    assert display_usd(D(0)) == "$0.00"


# ------------------------------------------------------------------ reserving


def test_reserve_holds_the_worst_case_in_every_scope() -> None:
    done = ok(reserve(Spend(), Caps(session_usd=D(5)), call(cost="0.25"), NOW))
    assert done.reservation.amount == D("0.25")
    assert done.reservation.scopes == (Scope("session", "s1"), Scope("provider", "openai", DAY),
                                       Scope("day", DAY))
    for scope in done.reservation.scopes:
        assert done.spend.tally(scope).reserved == D("0.25")
        assert done.spend.tally(scope).spent == 0


def test_a_request_alone_above_the_cap_cannot_be_retried() -> None:
    no = refused(reserve(Spend(), Caps(session_usd=D("0.10")), call(cost="0.50"), NOW))
    assert (no.status, no.kind, no.code) == (402, "insufficient_quota", CODE_REQUEST_EXCEEDS_CAP)
    assert no.retry_after_s is None
    assert no.scope == Scope("session", "s1") and no.cap == D("0.10")
    assert "session cap of session s1 ($0.10)" in no.message
    assert "~$0.50" in no.message and "retrying cannot help" in no.message
    assert "rounded for display" in no.message


def test_a_used_up_session_cap_has_no_retry_after() -> None:
    caps = Caps(session_usd=D(1))
    first = ok(reserve(Spend(), caps, call("a", "0.8"), NOW))
    spend = settle(first.spend, first.reservation, D("0.7"))
    no = refused(reserve(spend, caps, call("b", "0.4"), NOW))
    assert no.code == CODE_CAP_EXHAUSTED and no.retry_after_s is None
    assert (no.spent, no.reserved, no.needed) == (D("0.7"), 0, D("0.4"))
    # $0.30 is left: the message says the worst case does not fit it, not "used up".
    assert ("may cost up to ~$0.40, more than is left of the session cap of session s1: "
            "~$0.30 of $1 (spent ~$0.70, reserved $0.00") in no.message
    assert "used up" not in no.message
    # What is left still fits a smaller call.
    last = ok(reserve(spend, caps, call("c", "0.3"), NOW))
    gone = refused(reserve(settle(last.spend, last.reservation, D("0.3")), caps,
                           call("d", "0.1"), NOW))
    assert "($1) is used up: spent ~$1.00" in gone.message


def test_a_used_up_daily_cap_retries_after_utc_midnight() -> None:
    caps = Caps(daily_usd=D(1))
    late = datetime(2026, 12, 2, 23, 59, 30, tzinfo=UTC)
    spend = ok(reserve(Spend(), caps, call("a", "1"), late)).spend
    no = refused(reserve(spend, caps, call("b", "0.01"), late))
    assert no.code == CODE_CAP_EXHAUSTED and no.retry_after_s == 30
    assert no.scope == Scope("day", DAY) and f"daily cap for {DAY} (UTC)" in no.message
    # The same instant in another time zone: still 30 s to the UTC midnight.
    elsewhere = late.astimezone(timezone(timedelta(hours=-5)))
    assert refused(reserve(spend, caps, call("b", "0.01"), elsewhere)).retry_after_s == 30


def test_a_daily_cap_alone_exceeded_by_the_request_has_no_retry_after() -> None:
    no = refused(reserve(Spend(), Caps(daily_usd=D(1)), call(cost="2"), NOW))
    assert no.code == CODE_REQUEST_EXCEEDS_CAP and no.retry_after_s is None


def test_a_session_cap_in_the_way_is_named_before_the_daily_one() -> None:
    caps = Caps(session_usd=D(1), daily_usd=D(1))
    spend = ok(reserve(Spend(), caps, call("a", "1"), NOW)).spend
    no = refused(reserve(spend, caps, call("b", "0.5"), NOW))
    assert no.scope == Scope("session", "s1") and no.retry_after_s is None


def test_the_provider_cap_is_per_provider_and_per_day() -> None:
    caps = Caps(provider_daily_usd={"openai": D(1)})
    spend = ok(reserve(Spend(), caps, call("a", "1", session="x"), NOW)).spend
    no = refused(reserve(spend, caps, call("b", "0.1", session="y"), NOW))
    assert no.scope == Scope("provider", "openai", DAY) and no.retry_after_s is not None
    assert "daily cap of provider openai" in no.message
    ok(reserve(spend, caps, call("b", "0.1", session="y", provider="anthropic"), NOW))
    ok(reserve(spend, caps, call("b", "0.1", session="y"), NOW + timedelta(days=1)))


def test_twenty_calls_against_a_cap_that_fits_five_send_five() -> None:
    caps = Caps(session_usd=D("0.50"))
    spend, sent = Spend(), 0
    for i in range(20):
        result = reserve(spend, caps, call(f"c{i}", "0.10"), NOW)
        if isinstance(result, Reserved):
            spend, sent = result.spend, sent + 1
        else:
            assert result.code == CODE_CAP_EXHAUSTED
    assert sent == 5
    assert spend.tally(Scope("session", "s1")).reserved == D("0.50")


def test_a_new_state_leaves_the_old_one_as_it_was() -> None:
    # Enough sessions that buckets hold several scopes and a call touches shared ones.
    spend, kept = Spend(), []
    for i in range(600):
        done = ok(reserve(spend, Caps(), call(f"c{i}", "0.01", session=f"s{i}"), NOW))
        kept.append((spend, spend.tallies(), done))
        spend = done.spend
    for before, tallies, done in kept[::37]:
        assert before.tallies() == tallies
        settled = settle(done.spend, done.reservation, D("0.002"))
        assert done.spend.tally(Scope("session", done.reservation.scopes[0].name)).spent == 0
        assert settled.tally(done.reservation.scopes[0]).spent == D("0.002")
    assert len(spend.tallies()) == 602  # 600 sessions, the provider's day, the day
    assert spend.tally(Scope("day", DAY)).reserved == D("6.00")


# ------------------------------------------------------------------ subtrees and overrides


def test_a_child_draws_from_its_parents_cap_recursively() -> None:
    caps = Caps(session_usd=D(1))
    spend = adopt(adopt(Spend(), "kid", "root"), "grandkid", "kid")
    spend = ok(reserve(spend, caps, call("a", "0.4", session="root"), NOW)).spend
    spend = ok(reserve(spend, caps, call("b", "0.3", session="kid"), NOW)).spend
    grand = ok(reserve(spend, caps, call("c", "0.2", session="grandkid"), NOW))
    assert Scope("session", "root") in grand.reservation.scopes
    assert grand.spend.tally(Scope("session", "root")).reserved == D("0.9")
    assert grand.spend.tally(Scope("session", "kid")).reserved == D("0.5")
    # The grandchild's own cap has room, its grandparent's has not.
    no = refused(reserve(grand.spend, caps, call("d", "0.2", session="grandkid"), NOW))
    assert no.scope == Scope("session", "root")
    assert "session cap of session root" in no.message
    spend = settle(grand.spend, grand.reservation, D("0.1"))
    assert spend.tally(Scope("session", "root")) == Tally(D("0.1"), D("0.7"), 0)


def test_a_parent_learned_late_counts_what_its_subtree_spent() -> None:
    caps = Caps(session_usd=D(1))
    # The grandchild calls before its parent ever did: only "kid" is known above it.
    spend = adopt(Spend(), "grandkid", "kid")
    early = ok(reserve(spend, caps, call("a", "0.34", session="grandkid"), NOW))
    spend = ok(reserve(early.spend, caps, call("b", "0.67", session="root"), NOW)).spend
    spend = adopt(spend, "kid", "root")
    assert spend.tally(Scope("session", "root")).reserved == D("1.01")  # past its cap
    no = refused(reserve(spend, caps, call("c", "0.01", session="grandkid"), NOW))
    assert no.scope == Scope("session", "root") and no.code == CODE_CAP_EXHAUSTED
    # The early reservation settles in the lineage known now, root included.
    spend = settle(spend, early.reservation, D("0.04"))
    assert spend.tally(Scope("session", "root")) == Tally(D("0.04"), D("0.67"), 0)
    assert spend.tally(Scope("session", "kid")) == Tally(D("0.04"), 0, 0)


def test_a_sessions_parent_is_the_first_named_and_never_a_cycle() -> None:
    spend = adopt(adopt(Spend(), "kid", "p1"), "kid", "p2")
    assert spend.parents == {"kid": "p1"}
    assert adopt(spend, "p1", "kid") is spend
    assert adopt(spend, "me", "me") is spend
    assert adopt(spend, "me", "") is spend


def test_a_chain_of_ancestors_is_bounded() -> None:
    spend = Spend()
    for depth in range(1, MAX_ANCESTRY + 5):
        spend = adopt(spend, f"s{depth}", f"s{depth - 1}")
    # s0 … s63 is a chain of MAX_ANCESTRY sessions: s64's parent is ignored.
    assert f"s{MAX_ANCESTRY - 1}" in spend.parents and f"s{MAX_ANCESTRY}" not in spend.parents
    done = ok(reserve(spend, Caps(), call(session=f"s{MAX_ANCESTRY - 1}"), NOW))
    assert len(done.reservation.scopes) == MAX_ANCESTRY + 2


def test_a_session_override_raises_lowers_or_lifts_its_cap() -> None:
    big = call(cost="3")
    assert refused(reserve(Spend(), Caps(session_usd=D(1)), big, NOW))
    ok(reserve(Spend(), Caps(session_usd=D(1), session_overrides={"s1": D(5)}), big, NOW))
    ok(reserve(Spend(), Caps(session_usd=D(1), session_overrides={"s1": None}), big, NOW))
    lowered = Caps(session_overrides={"s1": D(2)})
    assert refused(reserve(Spend(), lowered, big, NOW)).cap == D(2)
    ok(reserve(Spend(), lowered, call(cost="3", session="other"), NOW))


# ------------------------------------------------------------------ unpriced models


def test_an_unpriced_model_under_a_cap_is_refused_by_default() -> None:
    no = refused(reserve(Spend(), Caps(daily_usd=D(10)), call(cost=None), NOW))
    assert no.code == CODE_UNPRICED_MODEL and no.status == 402 and no.needed is None
    assert "has no price" in no.message and "allow_unpriced" in no.message


def test_an_unpriced_model_runs_when_allowed_or_uncapped() -> None:
    allowed = ok(reserve(Spend(), Caps(daily_usd=D(10), allow_unpriced=True), call(cost=None),
                         NOW))
    assert allowed.reservation.amount == 0 and allowed.reservation.unpriced
    spend = settle(allowed.spend, allowed.reservation, None)
    assert spend.tally(Scope("day", DAY)).unknown == 1
    ok(reserve(Spend(), Caps(), call(cost=None), NOW))


# ------------------------------------------------------------------ settling and releasing


def test_settle_replaces_the_reservation_by_the_real_cost() -> None:
    done = ok(reserve(Spend(), Caps(), call(cost="0.5"), NOW))
    spend = settle(done.spend, done.reservation, D("0.0123"))
    for scope in done.reservation.scopes:
        tally = spend.tally(scope)
        assert (tally.spent, tally.reserved, tally.unknown) == (D("0.0123"), 0, 0)
    assert spend.open == {}


def test_an_unknown_cost_keeps_the_worst_case_as_spent() -> None:
    done = ok(reserve(Spend(), Caps(), call(cost="0.5"), NOW))
    tally = settle(done.spend, done.reservation, None).tally(Scope("session", "s1"))
    assert (tally.spent, tally.reserved, tally.unknown) == (D("0.5"), 0, 1)


def test_release_frees_the_reservation() -> None:
    caps = Caps(session_usd=D(1))
    done = ok(reserve(Spend(), caps, call("a", "1"), NOW))
    refused(reserve(done.spend, caps, call("b", "1"), NOW))
    spend = release(done.spend, done.reservation)
    assert spend.tally(Scope("session", "s1")).reserved == 0
    ok(reserve(spend, caps, call("b", "1"), NOW))


def test_a_reservation_closes_once() -> None:
    done = ok(reserve(Spend(), Caps(), call(), NOW))
    spend = settle(done.spend, done.reservation, D(1))
    with pytest.raises(UnknownCall, match="c1: holds no reservation"):
        settle(spend, done.reservation, D(1))
    with pytest.raises(UnknownCall):
        release(spend, done.reservation)
    with pytest.raises(UnknownCall):
        release(Spend(), Reservation("ghost", "s1", D(1), ()))


def test_reserving_an_open_call_again_reserves_nothing_more() -> None:
    done = ok(reserve(Spend(), Caps(), call(cost="1"), NOW))
    again = ok(reserve(done.spend, Caps(), call(cost="9"), NOW))
    assert again.reservation is done.reservation and again.spend is done.spend


def test_a_cost_above_its_reservation_uses_the_cap_up() -> None:
    caps = Caps(session_usd=D(1))
    done = ok(reserve(Spend(), caps, call("a", "0.1"), NOW))
    spend = settle(done.spend, done.reservation, D("1.2"))  # our input estimate was short
    no = refused(reserve(spend, caps, call("b", "0.01"), NOW))
    assert no.code == CODE_CAP_EXHAUSTED and no.spent == D("1.2")


# ------------------------------------------------------------------ the UTC day


def test_the_day_rolls_over_at_utc_midnight() -> None:
    caps = Caps(daily_usd=D(1))
    before = datetime(2026, 12, 2, 23, 59, 59, tzinfo=UTC)
    done = ok(reserve(Spend(), caps, call("a", "1"), before))
    spend = settle(done.spend, done.reservation, D(1))
    refused(reserve(spend, caps, call("b", "1"), before))
    after = ok(reserve(spend, caps, call("b", "1"), before + timedelta(seconds=1)))
    assert after.reservation.scopes[-1] == Scope("day", "2026-12-03")
    # Yesterday's spent-only tallies are dropped; the session's stays.
    assert Scope("day", DAY) not in after.spend.tallies()
    assert after.spend.tally(Scope("session", "s1")).spent == D(1)


def test_a_call_in_flight_at_midnight_settles_on_the_day_it_was_sent() -> None:
    caps = Caps(daily_usd=D(1))
    before = datetime(2026, 12, 2, 23, 59, 59, tzinfo=UTC)
    late = ok(reserve(Spend(), caps, call("a", "0.5"), before))
    spend = ok(reserve(late.spend, caps, call("b", "0.5"), before + timedelta(seconds=2))).spend
    assert spend.tally(Scope("day", DAY)).reserved == D("0.5")  # kept: still reserved
    spend = settle(spend, late.reservation, D("0.4"))
    assert spend.tally(Scope("day", DAY)).spent == D("0.4")
    assert spend.tally(Scope("day", "2026-12-03")).spent == 0


# ------------------------------------------------------------------ the property

_CAPS = Caps(session_usd=D("1.00"), session_overrides={"kid": D("0.60")}, daily_usd=D("2.00"),
             provider_daily_usd={"openai": D("1.50")})
_PARENTS = {"root": "", "kid": "root", "grandkid": "kid", "other": ""}
_op = st.one_of(
    st.tuples(st.just("reserve"), st.sampled_from(sorted(_PARENTS)),
              st.sampled_from(["openai", "x"]), st.integers(0, 80), st.integers(0, 23)),
    st.tuples(st.just("settle"), st.integers(0, 50), st.integers(0, 100)),
    st.tuples(st.just("release"), st.integers(0, 50)),
)


def _lineage(session: str, parents: dict[str, str]) -> set[str]:
    found = set()
    while session:
        found.add(session)
        session = parents.get(session, "")
    return found


def _oracle(calls: dict[str, tuple[str, str, str, Decimal]],
            parents: dict[str, str]) -> dict[Scope, Decimal]:
    """What each scope holds, computed from the calls alone (not from Spend's tallies)."""
    held: dict[Scope, Decimal] = {}
    for session, provider, day, amount in calls.values():
        scopes = [Scope("session", s) for s in _lineage(session, parents)]
        scopes += [Scope("provider", provider, day), Scope("day", day)]
        for scope in scopes:
            held[scope] = held.get(scope, D(0)) + amount
    return held


def _check(spend: Spend, calls: dict[str, tuple[str, str, str, Decimal]],
           strict: bool) -> None:
    """Every tally is what the calls add up to (through the parents known), within its cap."""
    expected = _oracle(calls, spend.parents)
    for scope, tally in spend.tallies().items():
        assert tally.reserved >= 0
        assert tally.spent + tally.reserved == expected.get(scope, 0), scope
    for scope, amount in expected.items():
        cap = _CAPS.cap(scope)
        assert not strict or cap is None or amount <= cap, (scope, amount)


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=60), st.booleans())
def test_no_interleaving_lets_any_scope_exceed_its_cap(ops: list[tuple[object, ...]],
                                                       tree_known: bool) -> None:
    """With the tree known first, no scope ever holds more than its cap; learned as
    sessions call (a parent may come late), every tally still adds up exactly."""
    spend, held, n = Spend(), list[tuple[Reservation, str]](), 0
    if tree_known:
        for session, parent in _PARENTS.items():
            spend = adopt(spend, session, parent)
    # Each call's (session, provider, UTC day, money held: reserved or spent), by call id.
    calls: dict[str, tuple[str, str, str, Decimal]] = {}
    for op in ops:
        if op[0] == "reserve":
            session, provider, cents, hour = op[1], op[2], op[3], op[4]
            assert isinstance(session, str) and isinstance(provider, str)
            assert isinstance(cents, int) and isinstance(hour, int)
            n += 1
            now = NOW.replace(hour=hour) + timedelta(days=n // 20)
            spend = adopt(spend, session, _PARENTS[session])
            result = reserve(spend, _CAPS, call(f"c{n}", str(D(cents) / 100), session=session,
                                                  provider=provider), now)
            if isinstance(result, Reserved):
                spend = result.spend
                held.append((result.reservation, session))
                calls[f"c{n}"] = (session, provider, now.date().isoformat(),
                                  result.reservation.amount)
        elif held:
            index = op[1]
            assert isinstance(index, int)
            reservation, session = held.pop(index % len(held))
            _, provider, day, _ = calls[reservation.call_id]
            if op[0] == "settle":
                share = op[2]
                assert isinstance(share, int)
                cost = reservation.amount * share / 100
                spend = settle(spend, reservation, cost)
                calls[reservation.call_id] = (session, provider, day, cost)
            else:
                spend = release(spend, reservation)
                del calls[reservation.call_id]
        _check(spend, calls, tree_known)
    assert sum((r.amount for r, _ in held), D(0)) == sum(
        (t.reserved for s, t in spend.tallies().items() if s.kind == "day"), D(0))


def test_prompt_chars_counts_the_items_text_and_the_tools() -> None:
    items = [b'{"role": "user", "content": "hello"}',
             b'{"role": "user", "content": [{"type": "text", "text": "abc"}]}']
    assert prompt_chars(items, {}) == 8
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert prompt_chars(items, {"tools": tools}) == 8 + len(msgspec.json.encode(tools))
    assert prompt_chars([b"{not json"], {}) == 9  # counted as bytes, never as nothing
