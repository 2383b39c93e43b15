"""``domain.cost.caps.move``: a reserved call sent to its fallback route holds the route instead.

Issue 21 §5: the route's worst case replaces the call's reservation, in the route's
scopes (its provider's daily cap), or is refused with the spend unchanged.
"""

from datetime import UTC, datetime
from decimal import Decimal

from sessionwarden.domain.cost.caps import (
    CODE_CAP_EXHAUSTED,
    BudgetCall,
    Caps,
    Refusal,
    Reserved,
    Scope,
    Spend,
    move,
    release,
    reserve,
    settle,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DAY = "2026-12-02"
D = Decimal


def ask(provider: str, worst: str, bound: int = 0, call_id: str = "c1") -> BudgetCall:
    return BudgetCall(call_id=call_id, session_id="s", provider=provider,
                      worst_case=D(worst), output_bound=bound)


def test_the_route_replaces_the_reservation_in_the_route_s_scopes() -> None:
    caps = Caps(session_usd=D("1"), provider_daily_usd={"backup": D("0.5")})
    first = reserve(Spend(), caps, ask("main", "0.01", 100), NOW)
    assert isinstance(first, Reserved) and first.reservation.output_bound == 100
    routed = move(first.spend, caps, ask("backup", "0.3", 250), NOW)
    assert isinstance(routed, Reserved)
    spend, held = routed.spend, routed.reservation
    assert (held.amount, held.output_bound) == (D("0.3"), 250)
    assert Scope("provider", "backup", DAY) in held.scopes
    # Not counted twice where both draw (the session, the day); gone from the first's.
    assert spend.tally(Scope("session", "s")).reserved == D("0.3")
    assert spend.tally(Scope("day", DAY)).reserved == D("0.3")
    assert spend.tally(Scope("provider", "main", DAY)).reserved == 0
    assert spend.tally(Scope("provider", "backup", DAY)).reserved == D("0.3")
    done = settle(spend, held, D("0.2"))
    assert done.tally(Scope("provider", "backup", DAY)).spent == D("0.2")
    assert done.tally(Scope("session", "s")).reserved == 0 and not done.open


def test_a_route_that_does_not_fit_leaves_the_spend_as_it_was() -> None:
    caps = Caps(provider_daily_usd={"backup": D("0.5")})
    spend = Spend()
    for n in range(2):  # the backup's day holds $0.4 already
        made = reserve(spend, caps, ask("backup", "0.2", call_id=f"b{n}"), NOW)
        assert isinstance(made, Reserved)
        spend = made.spend
    first = reserve(spend, caps, ask("main", "0.01"), NOW)
    assert isinstance(first, Reserved)
    refused = move(first.spend, caps, ask("backup", "0.2"), NOW)
    assert isinstance(refused, Refusal) and refused.code == CODE_CAP_EXHAUSTED
    assert refused.scope == Scope("provider", "backup", DAY)
    assert "may cost up to" in refused.message and refused.retry_after_s
    # The call keeps its first reservation: its end releases it as before.
    assert first.spend.open["c1"] == first.reservation
    assert not release(first.spend, first.reservation).open.get("c1")


def test_a_call_that_held_nothing_is_simply_reserved() -> None:
    caps = Caps(session_usd=D("1"))
    routed = move(Spend(), caps, ask("backup", "0.3"), NOW)
    assert isinstance(routed, Reserved)
    assert routed.spend.tally(Scope("session", "s")).reserved == D("0.3")
