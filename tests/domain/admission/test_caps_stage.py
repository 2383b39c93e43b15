"""The budgets stage, a session's budget, charging side calls, rebuilding the spend at start."""

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.admission.caps_stage import session_budget, spend_caps
from sessionwarden.domain.admission.pipeline import Proceed, Refuse
from sessionwarden.domain.calls import CallRequest, RequestShape
from sessionwarden.domain.cost.caps import (
    Caps,
    Refusal,
    Scope,
    Spend,
    Tally,
    adopt,
    charge,
    rebuild,
    release,
    reserve,
    settle,
)
from sessionwarden.domain.cost.pricing import Price, PriceLookup, PriceTier
from sessionwarden.domain.cost.worst_case import call_worst_case
from sessionwarden.domain.session import SessionState

from tests.domain.cost.test_caps import call, ok

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DAY = "2026-12-02"
D = Decimal


def request(budget: Any) -> CallRequest:
    return CallRequest(call_id="c1", session_id="s1", provider="openai", model="m",
                       api_mode="chat_completions", shape=RequestShape(model="m"), body=None,
                       budget=budget)


def test_the_stage_refuses_what_the_ledger_refused_with_its_retry_after() -> None:
    refusal = Refusal(code="cap_exhausted", message="the daily cap ... is used up",
                      scope=Scope("day", DAY), cap=D(1), spent=D(1), reserved=D(0),
                      needed=D("0.1"), retry_after_s=3600)
    outcome = spend_caps(SessionState("s1"), request(refusal), NOW)
    assert outcome == Refuse(402, refusal.message, "cap_exhausted", "insufficient_quota",
                             retry_after_s=3600)


def test_the_stage_lets_a_reserved_or_unjudged_call_through() -> None:
    held = ok(reserve(Spend(), Caps(session_usd=D(1)), call("c1", "0.5"), NOW)).reservation
    for budget in (held, None):
        outcome = spend_caps(SessionState("s1"), request(budget), NOW)
        assert isinstance(outcome, Proceed) and outcome.request.budget is budget


def test_a_session_budget_is_its_subtree_money_and_what_is_left() -> None:
    caps = Caps(session_usd=D("1.00"), session_overrides={"free": None})
    spend = adopt(Spend(), "child", "parent")
    spend = ok(reserve(spend, caps, call("a", "0.30", session="child"), NOW)).spend
    held = ok(reserve(spend, caps, call("b", "0.25", session="parent"), NOW))
    spend = settle(held.spend, held.reservation, D("0.10"))
    budget = session_budget(spend, caps, "parent")
    assert (budget.cap, budget.spent, budget.reserved, budget.left) == ("1", "0.1", "0.3", "0.6")
    assert session_budget(spend, caps, "child").parent == "parent"
    free = session_budget(spend, caps, "free")
    assert (free.cap, free.left, free.spent) == (None, None, "0")
    over = charge(spend, "parent", "openai", D("5"), NOW)
    assert session_budget(over, caps, "parent").left == "0"  # never below zero


def test_a_side_call_is_charged_to_its_lineage_and_days_without_a_reservation() -> None:
    spend = adopt(Spend(), "child", "parent")
    spend = charge(spend, "child", "openai", D("0.25"), NOW)
    spend = charge(spend, "child", "openai", None, NOW)
    for scope in (Scope("session", "child"), Scope("session", "parent"),
                  Scope("provider", "openai", DAY), Scope("day", DAY)):
        assert spend.tally(scope) == Tally(D("0.25"), D(0), 1)
    assert spend.open == {}
    # The next call of the subtree is refused once the charges used the cap up.
    refused = reserve(spend, Caps(session_usd=D("0.30")), call("c", "0.10", session="child"), NOW)
    assert isinstance(refused, Refusal) and refused.scope == Scope("session", "child")


def test_rebuild_sums_each_subtree_and_keeps_only_todays_days() -> None:
    rows = [("child", "openai", DAY, D("0.25")), ("child", "openai", "2026-12-01", D("1")),
            ("parent", "anthropic", DAY, None), ("other", "openai", DAY, D("0.5"))]
    spend = rebuild(rows, {"child": "parent", "loop-a": "loop-b", "loop-b": "loop-a"}, NOW)
    assert spend.tally(Scope("session", "parent")) == Tally(D("1.25"), D(0), 1)
    assert spend.tally(Scope("session", "child")) == Tally(D("1.25"), D(0), 0)
    assert spend.tally(Scope("day", DAY)) == Tally(D("0.75"), D(0), 1)
    assert spend.tally(Scope("provider", "openai", DAY)) == Tally(D("0.75"), D(0), 0)
    assert not spend.knows(Scope("day", "2026-12-01"))
    assert spend.parents == {"child": "parent", "loop-a": "loop-b"}  # no cycle kept
    assert spend.today == DAY and spend.open == {}


sessions = st.sampled_from(["a", "b", "c", "d"])
amounts = st.one_of(st.none(), st.decimals(min_value=0, max_value=10, places=4))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(sessions, sessions)), st.lists(st.tuples(sessions, amounts)))
def test_rebuild_equals_the_live_fold_of_the_same_calls(
    links: list[tuple[str, str]], costs: list[tuple[str, Decimal | None]]
) -> None:
    live = Spend()
    for child, parent in links:  # the parents are learned first, as at a restart
        live = adopt(live, child, parent)
    # The log records the parent the ledger adopted (SessionStarted), in any order.
    parents = dict(reversed(list(live.parents.items())))
    caps = Caps(allow_unpriced=True)
    for index, (session, cost) in enumerate(costs):
        held = ok(reserve(live, caps, call(f"c{index}", "0", session=session), NOW))
        live = settle(held.spend, held.reservation, cost)
    built = rebuild([(s, "openai", DAY, c) for s, c in costs], parents, NOW)
    assert built.parents == live.parents
    for scope, tally in live.tallies().items():
        assert built.tally(scope) == tally, scope


def test_a_released_call_leaves_its_session_known_to_the_ledger() -> None:
    held = ok(reserve(Spend(), Caps(), call("c", "0.1", session="quiet"), NOW))
    spend = release(held.spend, held.reservation)
    assert spend.knows(Scope("session", "quiet")) and not spend.knows(Scope("session", "x"))


# ------------------------------------------------------------------ a call's worst case


PRICE = Price(source="override", version="config", input=D("2"), output=D("8"),
              cache_write=D("2.5"), request=D("0.01"),
              tiers=(PriceTier(above=200_000, input=D("4"), output=D("12")),))


def test_the_worst_case_bills_input_at_the_cache_write_rate_plus_the_fee() -> None:
    worst = call_worst_case(PriceLookup(kind="price", price=PRICE), 1000, 500)
    assert worst == (D(1000) * D("2.5") + D(500) * 8) / 1_000_000 + D("0.01")


def test_the_worst_case_above_a_tier_takes_the_tiers_rates_for_everything() -> None:
    worst = call_worst_case(PriceLookup(kind="price", price=PRICE), 300_000, 1000)
    assert worst == (D(300_000) * 4 + D(1000) * 12) / 1_000_000 + D("0.01")


def test_included_is_free_and_no_price_is_none() -> None:
    assert call_worst_case(PriceLookup(kind="included"), 10**6, 10**5) == 0
    assert call_worst_case(PriceLookup(kind="unknown", reason="x"), 10, 10) is None
    no_output = Price(source="override", version="config", input=D("1"))
    assert call_worst_case(PriceLookup(kind="price", price=no_output), 10, 10) is None
