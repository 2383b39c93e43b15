"""One rule for reading recorded costs: ``usage``, ``status --session`` and the rollup agree."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.usage.recorded import combined_status, exact_sum, read_cost
from sessionwarden.domain.usage.report import fold_usage
from sessionwarden.events import CallAdmitted, CallCompleted

JUNK = ["abc", "NaN", "Infinity", "-Infinity", "1e300", "-1e300", "1e-200", ""]


@pytest.mark.parametrize("text", JUNK)
def test_junk_is_not_a_cost(text: str) -> None:
    assert read_cost(text) is None
    assert exact_sum([text, "0.5"]) == (Decimal("0.5"), 1)


def test_costs_the_daemon_writes_are_read_exactly() -> None:
    assert read_cost("0.0000001234") == Decimal("0.0000001234")
    assert read_cost("-0.5") == Decimal("-0.5")  # a reprice difference may be negative
    assert read_cost(None) is None
    assert exact_sum(["1e-20", "1000000"]) == (Decimal("1000000.00000000000000000001"), 0)


def test_the_status_of_a_group() -> None:
    assert combined_status([]) == "unknown"
    assert combined_status(["actual", "actual"]) == "actual"
    assert combined_status(["actual", "estimated"]) == "partial"
    assert combined_status(["actual", "unknown", "estimated"]) == "unknown"


@pytest.mark.parametrize("text", JUNK)
def test_a_session_fold_reads_junk_as_usage_does(text: str) -> None:
    # An altered log's "1e300" was summed by `status --session` and unknown in `usage`.
    usage = fold_usage([
        CallAdmitted(call_id="c1", provider="openai", model="gpt-4o"),
        CallCompleted(call_id="c1", cost=text, cost_status="actual"),
        CallAdmitted(call_id="c2", provider="openai", model="gpt-4o"),
        CallCompleted(call_id="c2", cost="0.25", cost_status="actual"),
    ])
    total, junk = exact_sum([text, "0.25"])
    assert junk == 1 and usage.total.unknown_requests == 1
    assert usage.total.cost_status == "unknown" and usage.total.cost is None
    assert usage.total.priced_cost == str(total)


@given(st.lists(st.one_of(st.none(), st.decimals(allow_nan=True).map(str), st.text(max_size=8)),
                max_size=8))
def test_the_fold_and_the_sum_agree_on_any_recorded_costs(costs: list[str | None]) -> None:
    events: list[object] = []
    for i, cost in enumerate(costs):
        events += [CallAdmitted(call_id=f"c{i}", provider="p", model="m"),
                   CallCompleted(call_id=f"c{i}", cost=cost, cost_status="actual")]
    usage = fold_usage(events)  # type: ignore[arg-type]
    total, junk = exact_sum(costs)
    assert usage.total.unknown_requests == junk
    assert usage.total.priced_cost == (str(total) if junk < len(costs) else None)
