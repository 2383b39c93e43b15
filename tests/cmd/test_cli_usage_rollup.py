"""``usage`` from the ledger's daily sums gives the answer the calls give, byte for byte.

``view_ledger_daily`` (views/ledger_rollup.py) is what makes ``usage --by day`` fast on
a large ledger; it must never change an answer: for any ledger, any ``--by`` and any
whole-day window, the output read from it is the output read from every call (which
``usage`` still does for a window that is not whole days), and a rebuild from zero, or a
fill from ``view_ledger`` of a database written before the table existed, gives the
same rows.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sessionwarden.cmd.cli.main import main
from sessionwarden.store import EventLog, replay
from sessionwarden.store.projections import table_digest
from sessionwarden.views.ledger_rollup import ROLLUP_TABLE
from sessionwarden.views.wiring import default_projections

from tests.cmd.test_cli_usage import Clock, _call

START = datetime(2026, 11, 28, 22, 0, tzinfo=UTC)
#: A bound a second after the first instant of the log: read from every call, not the sums.
RAW = ["--since", "2000-01-01T00:00:01"]

calls = st.lists(st.tuples(
    st.integers(0, 80),  # hours after START
    st.sampled_from(["s1", "s2", "s3"]),
    st.sampled_from([("openai", "gpt"), ("anthropic", "claude"), ("openai", "mini")]),
    st.sampled_from(["fp:a", "fp:b", ""]),
    st.tuples(*[st.integers(0, 5000)] * 5),
    st.sampled_from(["provider", "provider", "estimated", "missing"]),
    st.sampled_from([(None, "unknown"), ("0.0010", "actual"), ("0.00000123", "actual"),
                     ("12.5", "estimated"), ("0", "included"), ("junk", "actual"),
                     ("NaN", "actual")]),
), min_size=1, max_size=25)


def ledger(path: Path, rows: list[tuple]) -> None:  # type: ignore[type-arg]
    clock = Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        for n, (hours, sid, (provider, model), cred, tokens, source, (cost, status)) in (
                enumerate(sorted(rows, key=lambda r: r[0]))):
            _call(log, clock, START + timedelta(hours=hours, seconds=n), sid, n, provider,
                  model, cred, tokens, source=source, cost=cost, cost_status=status)


def usage(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> str:
    assert main(["usage", "--db", str(db), *argv]) == 0
    return capsys.readouterr().out


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=calls)
def test_the_daily_sums_answer_as_the_calls_do(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
    rows: list[tuple],  # type: ignore[type-arg]
) -> None:
    db = tmp_path_factory.mktemp("rollup") / "events.db"
    ledger(db, rows)
    for by, fmt in [(by, ["--json", "--totals"]) for by in ("day", "session", "model",
                                                             "provider", "credential")] + [
                    ("day", ["--csv"]), ("session", [])]:
        assert usage(capsys, db, "--by", by, *fmt) == usage(capsys, db, "--by", by, *fmt, *RAW)
    # Calls are on whole seconds: a bound a microsecond off midnight selects the same ones.
    for days, instants in (
        (["--since", "2026-11-30"], ["--since", "2026-11-29T23:59:59.999999"]),
        (["--until", "2026-11-29"], ["--until", "2026-11-29T23:59:59.999998"]),
        (["--since", "2026-11-29", "--until", "2026-11-30", "--session", "s2"],
         ["--since", "2026-11-28T23:59:59.999999", "--until", "2026-11-30T23:59:59.999998",
          "--session", "s2"]),
    ):
        assert usage(capsys, db, "--by", "day", "--json", *days) == usage(
            capsys, db, "--by", "day", "--json", *instants)
    report = replay(db, default_projections(), verify=True)
    assert report.ok, report.detail


def test_a_ledger_written_before_the_sums_gets_them_from_its_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    ledger(db, [(h, f"s{h % 3}", ("openai", "gpt"), "fp:a", (h, 1, 2, 3, 0), "provider",
                 ("0.25", "actual")) for h in range(0, 60, 7)])
    with EventLog(db, readonly=True) as log:
        before = table_digest(log.read_connection(), ROLLUP_TABLE)
    conn = apsw.Connection(str(db))
    conn.execute(f"DROP TABLE {ROLLUP_TABLE}")
    conn.close()
    # A reader of such a database answers from the calls...
    answer = usage(capsys, db, "--by", "day", "--json")
    assert '"cost": "2.25"' in usage(capsys, db, "--by", "provider", "--json")
    # ...and the next writer to open it fills the sums in, as a rebuild would.
    with EventLog(db, projections=default_projections()):
        pass
    with EventLog(db, readonly=True) as log:
        assert table_digest(log.read_connection(), ROLLUP_TABLE) == before
    assert usage(capsys, db, "--by", "day", "--json") == answer
    assert replay(db, default_projections(), verify=True).ok


def test_the_sums_are_a_few_rows_per_session_and_day(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    ledger(db, [(h % 5, "s1", ("openai", "gpt"), "fp:a", (1, 1, 0, 0, 0), "provider",
                 ("0.1", "actual")) for h in range(40)])
    with EventLog(db, readonly=True) as log:
        rows = log.read_connection().execute(
            f"SELECT day, calls, cost, first_at <= last_at FROM {ROLLUP_TABLE}").fetchall()
    assert rows == [("2026-11-28", 16, "1.6", 1), ("2026-11-29", 24, "2.4", 1)]


def test_usage_reads_the_sums_for_whole_days_and_the_calls_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    ledger(db, [(1, "s1", ("openai", "gpt"), "fp:a", (1, 1, 0, 0, 0), "provider",
                 ("0.1", "actual"))])
    conn = apsw.Connection(str(db))
    conn.execute(f"UPDATE {ROLLUP_TABLE} SET cost = '7'")  # a mark only the sums carry
    conn.close()
    assert '"cost": "7"' in usage(capsys, db, "--by", "day", "--json")
    assert '"cost": "7"' in usage(capsys, db, "--by", "day", "--json", "--until", "2026-12-01")
    assert '"cost": "0.1"' in usage(capsys, db, "--by", "day", "--json", *RAW)


@pytest.mark.parametrize("bad", ["junk", "NaN", "Infinity"])
def test_a_cost_that_is_not_a_number_makes_its_group_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    db = tmp_path / "events.db"
    ledger(db, [(1, "s1", ("openai", "gpt"), "fp:a", (1, 1, 0, 0, 0), "provider",
                 (cost, "actual")) for cost in ("0.5", bad)])
    for window in ([], RAW):
        out = usage(capsys, db, "--by", "session", "--json", *window)
        assert '"cost": null' in out and '"cost_status": "unknown"' in out
