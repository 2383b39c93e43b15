"""The CLI's text output on a terminal: tables that fit, and hostile names made harmless.

A log with many sessions, long names, huge numbers and names carrying escape sequences,
``\\r``, ``\\n``, tabs, C1 controls and bidi overrides (a log may come from an older
version, a config, or a client's model name). ``usage`` and ``status`` must fit the
terminal's width (``COLUMNS``; 80 when stdout is not a terminal) and show more columns
when it is wider; numbers are never cut; every string from the log is escaped in every
text the CLI prints, while ``--json``/``--csv`` stay exact.
"""

import csv
import io
import json
import subprocess
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.cells import cell_len
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CallAdmitted, CallCompleted, CredentialAdded, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.text import json_safe, printable
from sessionwarden.views.wiring import default_projections

from tests.cmd.daemon_fixtures import clean_env, sessionwarden_cmd

#: One of each kind of character a terminal acts on.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\r\n\t\x9b31m\u202eevil\u2066\u200b\x7f"
EVIL_PROVIDER = "prov\x1b[31mred"
EVIL_MODEL = "model\u202ereversed\r"
EVIL_SESSION = "s-" + HOSTILE
EVIL_FP = "fp:\x1b[5mblink"
LONG = "a-session-with-a-really-quite-long-descriptive-name-for-an-agent-run"
BY = ("session", "model", "provider", "credential", "day")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _unsafe(text: str) -> list[str]:
    """Characters in ``text`` a terminal would act on (a line's end aside)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tables") / "events.db"
    clock = Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        for prov, fp in (("openai", "fp:aaaaaaaaaaaa"), (EVIL_PROVIDER, EVIL_FP)):
            log.append(f"credentials-{prov}", [new_event(
                CredentialAdded(provider=prov, ref="env:K", fingerprint=fp))])
        sessions = [f"{LONG}-{i:02d}" for i in range(24)] + [EVIL_SESSION, "短い-セッション"]
        for i, sid in enumerate(sessions):
            clock.now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC) + timedelta(hours=i)
            evil = i % 5 == 0
            provider = EVIL_PROVIDER if evil else "openai"
            model = EVIL_MODEL if evil else f"gpt-4.1-mini-with-a-long-suffix-{i % 3}"
            log.append(session_stream(sid), [new_event(SessionStarted(model=model))])
            call_id = f"c{i}"
            log.append(session_stream(sid), [
                new_event(CallAdmitted(call_id=call_id, provider=provider, model=model,
                                       message_count=3, estimated_tokens=10)),
                new_event(CallCompleted(
                    call_id=call_id, status=200, latency_ms=12.5,
                    credential=EVIL_FP if evil else "fp:aaaaaaaaaaaa", outcome="ok",
                    input_tokens=987_654_321 * (i + 1), output_tokens=12_345 * i,
                    cache_read_tokens=i, cache_write_tokens=2 * i, reasoning_tokens=3 * i,
                    source="estimated" if i % 2 else "provider",
                    cost="1234.5678" if i % 4 == 1 else None,
                    cost_status="actual" if i % 4 == 1 else "unknown")),
            ])
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def header(out: str, first: str) -> list[str]:
    return next(line for line in out.splitlines() if line.startswith(first)).split()


@pytest.mark.parametrize("by", BY)
def test_usage_fits_80_columns_and_shows_more_at_200(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, by: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run(capsys, "usage", "--db", str(db), "--by", by)
    assert max(cell_len(line) for line in narrow.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "200")
    wide = run(capsys, "usage", "--db", str(db), "--by", by)
    assert max(cell_len(line) for line in wide.splitlines()) <= 200
    cols_80, cols_200 = header(narrow, by.upper()), header(wide, by.upper())
    assert cols_80[:4] == [by.upper(), "REQUESTS", "INPUT", "OUTPUT"]
    assert "COST" in cols_80 and len(cols_200) > len(cols_80)
    assert "not shown at 80 columns" in narrow
    # Each group is one line (no wrapping), and no number is cut: the totals are whole.
    groups = json.loads(run(capsys, "usage", "--db", str(db), "--by", by, "--json"))
    for out in (narrow, wide):
        lines = out.splitlines()
        rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
        assert rule == 1 + len(groups)
        total = lines[rule + 1].split()
        assert total[:4] == ["total", str(sum(g["requests"] for g in groups)),
                             str(sum(g["input_tokens"] for g in groups)),
                             str(sum(g["output_tokens"] for g in groups))]


def test_status_fits_80_columns_and_cuts_names_with_an_ellipsis(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run(capsys, "status", "--db", str(db))
    assert max(cell_len(line) for line in narrow.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "200")
    wide = run(capsys, "status", "--db", str(db))
    cols_80, cols_200 = header(narrow, "SESSION"), header(wide, "SESSION")
    assert cols_80[:3] == ["SESSION", "MODEL", "CALLS"] and len(cols_200) > len(cols_80)
    assert set(cols_200) >= {"CREDENTIAL", "STARTED", "LAST", "LAST_STATUS"}
    data = json.loads(run(capsys, "status", "--db", str(db), "--json"))
    for out in (narrow, wide):
        lines = out.splitlines()
        start = lines.index("sessions:") + 2
        rows = lines[start:start + len(data["sessions"])]
        # one line per session, in order, each session's whole numbers on it
        for line, session in zip(rows, data["sessions"], strict=True):
            cells = line.split()
            assert str(session["input_tokens"]) in cells, line
            assert str(session["output_tokens"]) in cells, line
        assert any("…" in line and LONG[:12] in line for line in rows)
    monkeypatch.setenv("COLUMNS", "300")
    assert f"{LONG}-00 " in run(capsys, "status", "--db", str(db))  # whole when there is room


def test_a_pipe_without_columns_gets_80(db: Path) -> None:
    env = {k: v for k, v in clean_env().items() if k != "COLUMNS"}
    for command in ("usage", "status"):
        done = subprocess.run([*sessionwarden_cmd(), command, "--db", str(db)], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        assert max(cell_len(line) for line in done.stdout.splitlines()) <= 80


@pytest.mark.parametrize("argv", [
    *(["usage", "--by", by] for by in BY), ["status"], ["events"],
])
@pytest.mark.parametrize("columns", ["80", "300"])
def test_names_from_the_log_are_escaped_in_every_text_output(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str], columns: str,
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    out = run(capsys, *argv, "--db", str(db))
    assert _unsafe(out) == []
    if columns == "300" and argv != ["usage", "--by", "day"]:
        # shown, escaped, not dropped
        assert "\\x1b[" in out or "model\\u202ereversed\\r" in out


def test_events_lines_escape_names_and_stay_one_line_per_event(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "events", "--db", str(db), "--stream", session_stream(EVIL_SESSION))
    lines = out.splitlines()
    assert len(lines) == 3 and _unsafe(out) == []
    assert printable(session_stream(EVIL_SESSION)) in lines[0]
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\r\\n\\t\\x9b31m\\u202eevil" in lines[0]


def test_json_and_csv_stay_exact_and_json_escapes_what_a_terminal_acts_on(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "events", "--db", str(db), "--stream", session_stream(EVIL_SESSION),
              "--json")
    assert _unsafe(out) == [] and "\\u202e" in out and "\\u009b" in out
    records = [json.loads(line) for line in out.splitlines()]
    assert {r["stream"] for r in records} == {session_stream(EVIL_SESSION)}
    usage = json.loads(run(capsys, "usage", "--db", str(db), "--by", "provider", "--json"))
    assert {g["provider"] for g in usage} == {"openai", EVIL_PROVIDER}
    status = json.loads(run(capsys, "status", "--db", str(db), "--json"))
    assert EVIL_SESSION in {s["session_id"] for s in status["sessions"]}
    rows = list(csv.reader(io.StringIO(run(capsys, "usage", "--db", str(db), "--csv"))))
    assert EVIL_SESSION in {r[0] for r in rows}  # CSV is data: exact, quoted by csv


def test_printable_and_json_safe() -> None:
    assert printable("plain text, ünïcode, 中文") == "plain text, ünïcode, 中文"
    assert printable("a\x1bb\rc\nd\te\x9bf\u202eg\U000e0041") == (
        "a\\x1bb\\rc\\nd\\te\\x9bf\\u202eg\\U000e0041")
    text = json.dumps({"k": "x\x7f\x85\u202e\u2028\U000e0041 ü"}, ensure_ascii=False)
    assert json.loads(json_safe(text)) == json.loads(text)
    assert json_safe(text) == '{"k": "x\\u007f\\u0085\\u202e\\u2028\\udb40\\udc41 ü"}'
