import csv
import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.cli.usage import parse_time
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CallAdmitted, CallCompleted, CredentialAdded, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.usage import Group
from sessionwarden.views.wiring import default_projections

FP_A, FP_B = "fp:aaaaaaaaaaaa", "fp:bbbbbbbbbbbb"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _call(log, clock, at, sid, n, provider, model, cred, tokens, source="provider",
          cost=None, cost_status="unknown", status=200):
    clock.now = at
    call_id = f"{sid}-c{n}"
    inp, out, cr, cw, rs = tokens
    log.append(session_stream(sid), [
        new_event(CallAdmitted(call_id=call_id, provider=provider, model=model,
                               message_count=3, estimated_tokens=inp)),
        new_event(CallCompleted(
            call_id=call_id, status=status, latency_ms=12.5, credential=cred,
            outcome="ok" if status < 400 else "upstream_error", input_tokens=inp,
            output_tokens=out, cache_read_tokens=cr, cache_write_tokens=cw,
            reasoning_tokens=rs, source=source, cost=cost, cost_status=cost_status)),
    ])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    clock = Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        for prov, fp in (("openai", FP_A), ("anthropic", FP_B)):
            log.append(f"credentials-{prov}", [new_event(
                CredentialAdded(provider=prov, ref=f"env:{prov.upper()}_KEY", fingerprint=fp))])
        day = lambda d, h: datetime(2026, 11, d, h, 0, tzinfo=UTC)  # noqa: E731
        for sid, model, at in (("alpha", "openai/gpt-4.1-mini", day(29, 9)),
                               ("beta", "anthropic/claude", day(30, 10)),
                               ("gamma", "openai/gpt-4.1", day(30, 23))):
            clock.now = at
            log.append(session_stream(sid), [new_event(SessionStarted(model=model))])
        _call(log, clock, day(29, 9), "alpha", 1, "openai", "gpt-4.1-mini", FP_A,
              (100, 10, 50, 0, 2))
        _call(log, clock, day(29, 11), "alpha", 2, "openai", "gpt-4.1-mini", FP_A,
              (200, 20, 0, 5, 0))
        _call(log, clock, day(30, 10), "beta", 1, "anthropic", "claude", FP_B,
              (1000, 100, 0, 0, 0), source="estimated")
        _call(log, clock, day(30, 12), "beta", 2, "anthropic", "claude", FP_B,
              (0, 0, 0, 0, 0), source="missing", status=502)
        _call(log, clock, datetime(2026, 12, 1, 8, 30, tzinfo=UTC), "gamma", 1, "openai",
              "gpt-4.1", FP_A, (10, 1, 0, 0, 0), cost="0.0010", cost_status="actual")
        _call(log, clock, datetime(2026, 12, 1, 9, 0, tzinfo=UTC), "gamma", 2, "openai",
              "gpt-4.1", FP_A, (20, 2, 0, 0, 0), cost="0.0025", cost_status="actual")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def usage_json(capsys, db: Path, *argv: str) -> dict[str, dict]:
    code, out, _ = run(capsys, "usage", "--db", str(db), "--json", *argv)
    assert code == 0
    rows = json.loads(out)
    by = argv[argv.index("--by") + 1] if "--by" in argv else "session"
    return {r[by]: r for r in rows}


def test_usage_by_session_json(db, capsys):
    rows = usage_json(capsys, db)
    assert list(rows) == ["alpha", "beta", "gamma"]
    a = rows["alpha"]
    assert a == {
        "session": "alpha", "requests": 2, "input_tokens": 300, "output_tokens": 30,
        "cache_read_tokens": 50, "cache_write_tokens": 5, "reasoning_tokens": 2,
        "cost": None, "cost_status": "unknown", "sources": {},
        "first_at": "2026-11-29T09:00:00.000000+00:00",
        "last_at": "2026-11-29T11:00:00.000000+00:00", "side_calls": [],
    }
    assert rows["beta"]["sources"] == {"estimated": 1, "missing": 1}
    assert rows["gamma"]["cost"] == "0.0035" and rows["gamma"]["cost_status"] == "actual"
    assert Decimal(rows["gamma"]["cost"]) == Decimal("0.0010") + Decimal("0.0025")


@pytest.mark.parametrize(("by", "expected"), [
    ("model", {"gpt-4.1-mini": 2, "claude": 2, "gpt-4.1": 2}),
    ("provider", {"openai": 4, "anthropic": 2}),
    ("credential", {FP_A: 4, FP_B: 2}),
    ("day", {"2026-11-29": 2, "2026-11-30": 2, "2026-12-01": 2}),
])
def test_usage_groupings(db, capsys, by, expected):
    rows = usage_json(capsys, db, "--by", by)
    assert {k: r["requests"] for k, r in rows.items()} == expected
    assert sum(r["input_tokens"] for r in rows.values()) == 1330


def test_mixed_groups_cost_is_unknown_never_zero(db, capsys):
    rows = usage_json(capsys, db, "--by", "provider")
    assert rows["openai"]["cost"] is None and rows["openai"]["cost_status"] == "unknown"
    code, out, _ = run(capsys, "usage", "--db", str(db), "--by", "provider")
    assert code == 0 and "unknown" in out and "$0 " not in out and "$0.00 " not in out
    code, out, _ = run(capsys, "usage", "--db", str(db), "--session", "alpha")
    assert "$" not in out and " 0.00" not in out


def test_cost_status_rules():
    g = Group("x", statuses={"actual", "estimated"}, cost_sum=Decimal("1.5"))
    assert (g.cost_status, g.cost) == ("partial", "1.5")
    assert Group("y").cost is None and Group("y").cost_status == "unknown"
    g.statuses.add("unknown")
    assert (g.cost_status, g.cost) == ("unknown", None)


def test_session_and_time_filters(db, capsys):
    assert list(usage_json(capsys, db, "--session", "beta")) == ["beta"]
    assert list(usage_json(capsys, db, "--since", "2026-11-30")) == ["beta", "gamma"]
    assert list(usage_json(capsys, db, "--until", "2026-11-30")) == ["alpha", "beta"]
    rows = usage_json(capsys, db, "--since", "2026-11-29T10:00:00",
                      "--until", "2026-11-30T10:00:00")
    assert {k: r["requests"] for k, r in rows.items()} == {"alpha": 1, "beta": 1}
    assert usage_json(capsys, db, "--since", "2026-11-30T12:00:00+01:00")["beta"][
        "requests"] == 1  # 11:00 UTC: only the 12:00 call of beta
    assert usage_json(capsys, db, "--session", "nobody") == {}


def test_parse_time_bounds():
    assert parse_time("2026-11-30", option="--until", end=True) == (
        "2026-12-01T00:00:00.000000+00:00")
    assert parse_time("2026-11-30T12:00:00", option="--since") == (
        "2026-11-30T12:00:00.000000+00:00")


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "2026-11-30T25:00"])
def test_bad_time_exits_64(db, capsys, bad):
    code, out, err = run(capsys, "usage", "--db", str(db), "--since", bad)
    assert code == 64 and out == ""
    assert err.count("\n") == 1 and "--since" in err and bad in err


@pytest.mark.parametrize(("since", "until"), [("2026-11-30", "2026-11-29"),
                                             ("2026-11-30T12:00:00", "2026-11-30T11:59:59")])
def test_since_after_until_exits_64(db: Path, capsys: pytest.CaptureFixture[str],
                                    since: str, until: str) -> None:
    code, out, err = run(capsys, "usage", "--db", str(db), "--since", since, "--until", until)
    assert code == 64 and out == ""
    assert err.count("\n") == 1 and "is not before --until" in err


def test_csv_shape(db, capsys):
    code, out, _ = run(capsys, "usage", "--db", str(db), "--csv", "--by", "day")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0][:3] == ["day", "requests", "input_tokens"]
    assert "cost" in rows[0] and "cost_status" in rows[0]
    assert len(rows) == 4 and all(len(r) == len(rows[0]) for r in rows)
    record = dict(zip(rows[0], rows[2], strict=True))
    assert record["cost"] == "" and record["cost_status"] == "unknown"
    assert record["sources"] == "estimated: 1, missing: 1"


def test_text_table_has_totals(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # every column (80 leaves some out: test_cli_tables)
    code, out, _ = run(capsys, "usage", "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["SESSION", "REQUESTS", "INPUT"]
    assert lines[-3].startswith("---")
    assert lines[-1] == ("(costs rounded for display: ~; --json and --csv give the exact "
                         "amounts)")
    total = lines[-2].split()
    assert total[:3] == ["total", "6", "1330"] and "unknown" in total
    assert "estimated: 1, missing: 1" in out


def test_empty_ledger(tmp_path, capsys):
    path = tmp_path / "empty.db"
    EventLog(path, projections=default_projections()).close()
    assert run(capsys, "usage", "--db", str(path)) == (0, "no calls recorded\n", "")
    assert json.loads(run(capsys, "usage", "--db", str(path), "--json")[1]) == []
    status = json.loads(run(capsys, "status", "--db", str(path), "--json")[1])
    assert status == {"sessions": [], "credentials": [], "events": 0, "credit_notices": []}


def test_missing_database_exits_74(tmp_path, capsys):
    code, _, err = run(capsys, "usage", "--db", str(tmp_path / "none.db"))
    assert code == 74 and "no event log" in err
    assert not (tmp_path / "none.db").exists()


def test_status_json(db, capsys):
    code, out, _ = run(capsys, "status", "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["events"] == 2 + 3 + 6 * 2
    sessions = {s["session_id"]: s for s in data["sessions"]}
    assert list(sessions) == ["alpha", "beta", "gamma"]
    beta = sessions["beta"]
    assert (beta["calls"], beta["input_tokens"], beta["output_tokens"]) == (2, 1000, 100)
    assert beta["cost"] is None and beta["cost_status"] == "unknown"
    assert (beta["last_status"], beta["credential"], beta["model"]) == (
        502, FP_B, "anthropic/claude")
    assert sessions["gamma"]["cost"] == "0.0035"
    assert beta["started_at"].startswith("2026-11-30T10:00")
    creds = {c["fingerprint"]: c for c in data["credentials"]}
    assert creds[FP_A] == {"provider": "openai", "fingerprint": FP_A, "state": "active",
                           "calls": 4, "last_status": 200, "health": "ok", "until": None}
    assert "env:" not in out  # key references are not shown, only fingerprints


def test_status_text(db, capsys):
    code, out, _ = run(capsys, "status", "--db", str(db))
    assert code == 0 and out.startswith("events: 17\n")
    assert "alpha" in out and "beta" in out and FP_B in out  # credentials header
    assert "unknown" in out and "~$0.0035" in out and "costs rounded for display" in out


def test_console_script_subprocess(db):
    script = Path(sys.executable).with_name("sessionwarden")
    proc = subprocess.run([str(script), "usage", "--db", str(db), "--json", "--by", "day"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [r["day"] for r in json.loads(proc.stdout)] == ["2026-11-29", "2026-11-30",
                                                            "2026-12-01"]


def test_text_table_at_80_columns_keeps_the_most_important_whole(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "usage", "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= 80
    assert lines[0].split() == ["SESSION", "REQUESTS", "INPUT", "OUTPUT", "COST", "STATUS",
                                "NOT_FROM_PROVIDER"]
    # the estimates stay whole: no less important column took their room
    assert "estimated: 1, missing: 1" in out
    assert "(not shown at 80 columns: CACHE_READ, CACHE_WRITE, REASONING, FIRST, LAST;" in out


def test_totals_end_the_json_list_and_the_csv_on_request(db, capsys):
    code, out, _ = run(capsys, "usage", "--db", str(db), "--json")
    plain = json.loads(out)
    code, out, _ = run(capsys, "usage", "--db", str(db), "--json", "--totals")
    *groups, total = json.loads(out)
    assert code == 0 and groups == plain  # the groups as without --totals
    assert total["session"] is None and total["total"] is True
    assert total["requests"] == sum(g["requests"] for g in groups)
    assert total["cost_status"] == "unknown" and total["cost"] is None  # one is unknown
    code, out, _ = run(capsys, "usage", "--db", str(db), "--csv", "--totals")
    lines = out.splitlines()
    assert code == 0 and lines[-1].startswith("total,") and len(lines) == len(groups) + 2
