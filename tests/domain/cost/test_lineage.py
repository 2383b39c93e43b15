"""Sessions' parents as the caps follow them (issue 21 §4): the bound and cycles refused.

A chain past ``MAX_ANCESTRY`` used to make its session a new root, free of the caps
above; now the ledger refuses it, and every later call of it or below it, and a log
folded afresh cuts the same links while counting what their sessions spent upward.
"""

from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.cost.caps import (
    BudgetCall,
    Caps,
    Refusal,
    Scope,
    Spend,
    Tally,
    adopt,
    rebuild,
    reserve,
)
from sessionwarden.domain.cost.lineage import (
    CODE_PARENT_CYCLE,
    CODE_PARENT_TOO_DEEP,
    MAX_ANCESTRY,
    Cut,
    chain,
    cut_links,
    inherited_refusal,
    parent_refusal,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DAY = "2026-12-02"
D = Decimal


def chain_of(depth: int) -> dict[str, str]:
    """``c1`` … ``c<depth>``, each the child of the one before, ``c1`` of ``root``."""
    return {f"c{i}": ("root" if i == 1 else f"c{i - 1}") for i in range(1, depth + 1)}


def test_a_parent_within_the_bound_is_no_refusal() -> None:
    assert parent_refusal({}, "kid", "mom") is None
    assert parent_refusal({"kid": "mom"}, "me", "me") is None  # no link: as no header
    assert parent_refusal({}, "me", "") is None
    parents = chain_of(MAX_ANCESTRY - 2)  # root + 62: a chain of 63 sessions
    assert parent_refusal(parents, "last", f"c{MAX_ANCESTRY - 2}") is None


def test_a_parent_past_the_bound_is_refused_naming_the_bound_and_the_chain() -> None:
    parents = chain_of(MAX_ANCESTRY - 1)  # root + 63: a chain of MAX_ANCESTRY sessions
    assert len(chain(parents, f"c{MAX_ANCESTRY - 1}")) == MAX_ANCESTRY
    refusal = parent_refusal(parents, "deep", f"c{MAX_ANCESTRY - 1}")
    assert refusal is not None
    assert (refusal.status, refusal.kind, refusal.code) == (
        400, "invalid_request_error", CODE_PARENT_TOO_DEEP)
    assert f"at most {MAX_ANCESTRY} long" in refusal.message
    assert f"a chain of {MAX_ANCESTRY + 1} sessions" in refusal.message
    assert "deep -> c63 -> c62 -> c61 -> ... -> root" in refusal.message
    assert len(refusal.message) < 400


def test_a_parent_that_would_make_a_cycle_is_refused() -> None:
    parents = {"a": "b", "b": "c"}
    refusal = parent_refusal(parents, "c", "a")
    assert refusal is not None and refusal.code == CODE_PARENT_CYCLE
    assert "a -> b -> c" in refusal.message and "cycle" in refusal.message


def test_a_cut_session_and_everything_below_it_are_refused() -> None:
    cuts = {"cut": Cut("too-deep-parent", CODE_PARENT_TOO_DEEP)}
    parents = {"kid": "cut", "grandkid": "kid"}
    assert inherited_refusal(parents, {}, "grandkid") is None
    assert inherited_refusal(parents, cuts, "elsewhere") is None
    own = inherited_refusal(parents, cuts, "cut")
    below = inherited_refusal(parents, cuts, "grandkid")
    assert own is not None and below is not None
    assert own.code == below.code == CODE_PARENT_TOO_DEEP and below.status == 400
    assert "too-deep-parent was refused" in own.message
    assert "grandkid -> kid -> cut" in below.message
    cycle = inherited_refusal({}, {"b": Cut("a", CODE_PARENT_CYCLE)}, "b")
    assert cycle is not None and "cycle" in cycle.message


def test_the_walk_stops_at_a_repeated_session_whatever_the_map() -> None:
    assert chain({"a": "b", "b": "a"}, "a") == ["a", "b"]


def live(order: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, Cut]]:
    """What the ledger decides, one first call at a time (refused, or adopted)."""
    spend, cuts = Spend(), {}
    for child, parent in order:
        if not parent or child in spend.parents or child in cuts:
            continue
        refusal = parent_refusal(spend.parents, child, parent)
        if refusal is not None:
            cuts[child] = Cut(parent, refusal.code)
        else:
            spend = adopt(spend, child, parent)
    return spend.parents, cuts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([f"s{i}" for i in range(8)]),
                          st.sampled_from(["", *[f"s{i}" for i in range(8)]])),
                max_size=30))
def test_a_log_folded_afresh_cuts_the_links_the_ledger_refused_live(
    order: list[tuple[str, str]]
) -> None:
    first: dict[str, str] = {}
    for child, parent in order:  # a session's parent is its first call's
        first.setdefault(child, parent)
    assert cut_links(first) == live(list(first.items()))


def test_a_deep_chain_past_the_bound_is_cut_live_and_when_folded() -> None:
    parents = chain_of(200)
    kept, cuts = cut_links(parents)
    assert f"c{MAX_ANCESTRY - 1}" in kept and f"c{MAX_ANCESTRY}" not in kept
    assert cuts[f"c{MAX_ANCESTRY}"] == Cut(f"c{MAX_ANCESTRY - 1}", CODE_PARENT_TOO_DEEP)
    # Below the cut the chain goes on (c65 … c127 under c64), and is cut again.
    assert f"c{2 * MAX_ANCESTRY}" in cuts
    for deep in (MAX_ANCESTRY, MAX_ANCESTRY + 1, 150, 200):
        assert inherited_refusal(kept, cuts, f"c{deep}") is not None, deep
    assert inherited_refusal(kept, cuts, f"c{MAX_ANCESTRY - 1}") is None


def test_what_a_deep_chain_spent_before_a_cap_counts_in_every_ancestor() -> None:
    # Recorded while no cap applied: 200 sessions deep, each spent $0.01.
    parents = chain_of(200)
    rows = [(f"c{i}", "openai", DAY, D("0.01")) for i in range(1, 201)]
    spend = rebuild(rows, parents, NOW)
    assert spend.tally(Scope("session", "root")) == Tally(D("2.00"), 0, 0)
    assert spend.tally(Scope("session", "c100")) == Tally(D("1.01"), 0, 0)
    # The lineage a call walks stays bounded: the cut sessions are roots there.
    assert max(len(chain(spend.parents, s)) for s in parents) == MAX_ANCESTRY
    # The root's $1 cap is used up by its deep descendants: its next call is refused.
    capped = Caps(session_overrides={"root": D(1)})
    no = reserve(spend, capped, BudgetCall(call_id="x", session_id="c3", provider="openai",
                                           worst_case=D("0.001")), NOW)
    assert isinstance(no, Refusal) and no.scope == Scope("session", "root")


def test_a_cycle_in_a_recorded_log_is_counted_once() -> None:
    parents = {"a": "b", "b": "a", "kid": "a"}
    rows = [("a", "p", DAY, D(1)), ("b", "p", DAY, D(2)), ("kid", "p", DAY, D(4))]
    spend = rebuild(rows, parents, NOW)
    assert spend.parents == {"a": "b", "kid": "a"}
    assert spend.tally(Scope("session", "b")) == Tally(D(7), 0, 0)
    assert spend.tally(Scope("session", "a")) == Tally(D(5), 0, 0)


def test_a_cycle_through_a_cut_link_is_not_followed_when_summing() -> None:
    # x heads a chain of 64 (x <- y1 <- … <- y63); z under y63 is cut (too deep), w
    # under z kept; then x names w: by the kept walk (w -> z) no cycle, so kept, yet
    # in the full graph, which counts the cut link too, it closes a loop.
    parents: dict[str, str] = {}
    previous = "x"
    for i in range(1, MAX_ANCESTRY):
        parents[f"y{i}"] = previous
        previous = f"y{i}"
    parents["z"] = previous  # too deep: cut
    parents["w"] = "z"       # kept under z
    parents["x"] = "w"       # by the kept walk w -> z: not a cycle, a short chain: kept
    kept, cuts = cut_links(parents)
    assert "z" in cuts and kept["x"] == "w"
    rows = [(s, "p", DAY, D(1)) for s in parents]
    spend = rebuild(rows, parents, NOW)  # terminates, each session counted once
    # x -> w closes the loop x <- y1 … <- z <- w in the full graph: not followed there.
    assert spend.tally(Scope("session", "x")).spent == len(parents)
    assert spend.tally(Scope("session", "z")).spent == 2  # z and w
