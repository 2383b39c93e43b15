from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.runaway.budget import (
    IterationBudget,
    decide,
    exhausted_text,
    grace_notice,
)
from sessionwarden.domain.runaway.turns import NOTICE_MARKER


def calls(budget: IterationBudget, n: int) -> tuple[IterationBudget, list[str]]:
    """``n`` calls of a turn, counted as the runaway stage counts them: every one, and the
    grace call remembered once made."""
    decisions = []
    for _ in range(n):
        decision = decide(budget)
        decisions.append(decision)
        budget = IterationBudget(budget.limit, budget.used + 1,
                                 budget.grace or decision != "forward")
    return budget, decisions


def fresh(limit: int) -> IterationBudget:
    return IterationBudget(limit)


def test_a_budget_of_three_forwards_three_then_grace_then_answers():
    budget, decisions = calls(fresh(3), 6)
    assert decisions == ["forward"] * 3 + ["grace", "answer", "answer"]
    assert budget == IterationBudget(3, 6, True)
    assert budget.remaining == 0


def test_a_new_turn_has_a_fresh_budget():
    spent, _ = calls(fresh(2), 4)
    assert decide(spent) == "answer"
    assert decide(fresh(spent.limit)) == "forward"


def test_a_limit_of_zero_or_less_is_unlimited_but_counted():
    for limit in (0, -1):
        budget, decisions = calls(fresh(limit), 200)
        assert set(decisions) == {"forward"}
        assert budget.used == 200 and budget.unlimited and budget.remaining is None


def test_the_notices_are_marked_and_say_how_to_go_on():
    notice = grace_notice(3, 3)
    assert notice.startswith(NOTICE_MARKER) and "do not call any tool" in notice
    text = exhausted_text(3)
    assert text.startswith(NOTICE_MARKER)
    assert "[budgets] max_iterations" in text
    assert 'POST /v1/sessions/{id}/iterations with {"refund": n}' in text
    child = exhausted_text(50, "[budgets] child_max_iterations", "s-1")
    assert "child_max_iterations" in child and "/v1/sessions/s-1/iterations" in child


@given(st.integers(-2, 20), st.integers(0, 40))
def test_exactly_the_limit_is_forwarded_before_one_grace_call(limit, n):
    budget, decisions = calls(fresh(limit), n)
    if limit <= 0:
        assert decisions == ["forward"] * n
        return
    assert decisions[:limit] == ["forward"] * min(limit, n)
    assert decisions.count("grace") == (1 if n > limit else 0)
    assert budget.used == n
    assert all(d == "answer" for d in decisions[limit + 1:])
