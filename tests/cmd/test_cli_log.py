"""The log's CLI: ``events`` and ``replay`` (``cmd/cli/log.py``), through ``main()``.

What the issue promised a user of these commands: the ``--json`` shapes, the filters, one
documented exit code per kind of damage naming the first bad event, a short message and
no traceback for a bad path, the database path from ``--db``, ``SESSIONWARDEN_DB`` or the
state directory, and a read-only audit that neither waits for nor changes a live log.
"""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from sessionwarden.cmd.cli.log import REPLAY_EXIT_CODES
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import EventLog, NewEvent
from sessionwarden.views.wiring import default_projections

from tests.store.store_support import write_lock

EVENTS = 12  # on streams s-0, s-1, s-2 in turn


def session_started(n: int) -> NewEvent:
    encoded = CODEC.encode(SessionStarted(model="m", client=f"s-{n}"))
    return NewEvent(encoded.type, encoded.data, encoded.schema_version)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    with EventLog(path, projections=default_projections()) as log:
        for n in range(EVENTS):
            log.append(f"s-{n % 3}", [session_started(n)])
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def damage(db: Path, sql: str, *args: object) -> None:
    """Change the closed log behind its back, as someone with write access could."""
    conn = apsw.Connection(str(db))
    conn.execute("DROP TRIGGER IF EXISTS events_no_update")
    conn.execute(sql, args)
    conn.close()


# -- events ---------------------------------------------------------------------------------


def test_events_json_gives_the_documented_fields_oldest_first(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "events", "--db", str(db), "--json")
    assert (code, err) == (0, "")
    rows = json_lines(out)
    assert [row["seq"] for row in rows] == list(range(1, EVENTS + 1))
    assert set(rows[0]) == {"seq", "stream", "version", "type", "recorded_at", "data"}
    assert (rows[4]["stream"], rows[4]["version"], rows[4]["type"]) == (
        "s-1", 2, "session.started.v3")
    data = rows[4]["data"]
    assert isinstance(data, dict) and data["client"] == "s-4"


def test_events_text_is_one_line_per_event(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "events", "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and len(lines) == EVENTS
    assert lines[0].split()[0] == "1" and "s-0@1" in lines[0] and "session.started.v3" in lines[0]


@pytest.mark.parametrize(
    ("filters", "seqs"),
    [
        (["--stream", "s-2"], [3, 6, 9, 12]),
        (["--after", "9"], [10, 11, 12]),
        (["--limit", "2"], [1, 2]),
        (["--stream", "s-1", "--after", "4", "--limit", "2"], [5, 8]),
        (["--stream", "nobody"], []),
        (["--after", str(EVENTS)], []),
        (["--after", str(10**30)], []),
        (["--stream", "s-0", "--after", str(10**30)], []),
        (["--limit", str(10**30)], list(range(1, EVENTS + 1))),
    ],
)
def test_events_filters(
    db: Path, capsys: pytest.CaptureFixture[str], filters: list[str], seqs: list[int]
) -> None:
    code, out, _ = run(capsys, "events", "--db", str(db), "--json", *filters)
    assert code == 0
    assert [row["seq"] for row in json_lines(out)] == seqs


@pytest.mark.parametrize(("option", "value"), [("--limit", "-1"), ("--after", "-5"),
                                               ("--limit", "ten")])
def test_events_refuses_a_bad_count_as_usage(
    db: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["events", "--db", str(db), option, value])
    assert exited.value.code == 64
    assert f"argument {option}:" in capsys.readouterr().err


# -- replay -----------------------------------------------------------------------------------


def test_replay_verify_json_on_an_intact_log(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify", "--json")
    assert code == 0
    assert json.loads(out) == {
        "ok": True, "events": EVENTS, "first_bad_seq": None, "kind": None, "detail": "",
    }


def test_replay_text_names_the_views_and_the_head(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify")
    assert code == 0
    assert out.startswith(f"ok: {EVENTS} events verified")
    assert "view_streams: 3 rows" in out and "head hash " in out


def modify_event_7(db: Path) -> int | None:
    damage(db, "UPDATE events SET data = ? WHERE seq = 7", b'{"forged":1}')
    return 7


def append_unknown_type(db: Path) -> int | None:
    # Chained and hashed like any other event, but no codec knows its type.
    with EventLog(db, projections=default_projections()) as log:
        return log.append("s-0", [NewEvent("nobody.knows.v1", b"{}")]).first_seq


def edit_a_view_row(db: Path) -> int | None:
    damage(db, "UPDATE view_streams SET events = 99 WHERE stream = 's-0'")
    return None


@pytest.mark.parametrize(
    ("kind", "harm"),
    [("modified", modify_event_7), ("undecodable", append_unknown_type),
     ("view_mismatch", edit_a_view_row)],
)
def test_replay_exit_code_names_the_kind_of_damage(
    db: Path, capsys: pytest.CaptureFixture[str], kind: str, harm: Callable[[Path], int | None]
) -> None:
    bad = harm(db)
    code, out, err = run(capsys, "replay", "--db", str(db), "--verify", "--json")
    assert code == REPLAY_EXIT_CODES[kind] and err == ""
    report = json.loads(out)
    assert (report["ok"], report["kind"], report["first_bad_seq"]) == (False, kind, bad)
    assert report["detail"]
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify")
    assert code == REPLAY_EXIT_CODES[kind]
    assert out.startswith(f"FAILED: {kind}")
    if bad is not None:
        assert f"at event {bad}" in out and f"events 1..{bad - 1} are intact" in out


def test_replay_exit_codes_are_the_documented_ones() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "logs-and-exit-codes.md"
    readme = page.read_text()
    for kind, code in REPLAY_EXIT_CODES.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| {code} |"))
        assert f"`{kind}`" in row


def test_replay_neither_waits_for_nor_changes_a_live_log(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with EventLog(db, projections=default_projections()) as log:
        log.append("s-0", [session_started(99)])
        with write_lock(db):  # a writer in the middle of a transaction
            code, out, _ = run(capsys, "replay", "--db", str(db), "--verify", "--json")
        assert code == 0 and json.loads(out)["events"] == EVENTS + 1
        log.append("s-0", [session_started(100)])  # and the log writes on afterwards
        assert log.head()[0] == EVENTS + 2


# -- paths and errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (lambda p: None, 74, "no event log here"),
        (lambda p: p.mkdir(), 74, "is a directory"),
        (lambda p: p.write_bytes(b"not a database, just text" * 100), 65, "corrupt or not"),
    ],
    ids=["missing", "directory", "garbage"],
)
@pytest.mark.parametrize("command", [["events"], ["replay", "--verify"]])
def test_a_bad_path_gets_one_line_and_an_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, code: int, message: str,
    command: list[str],
) -> None:
    path = tmp_path / "events.db"
    make(path)  # type: ignore[operator]
    got, out, err = run(capsys, *command, "--db", str(path))
    assert got == code and out == ""
    assert err.startswith("sessionwarden: ") and message in err and err.count("\n") == 1
    assert not path.with_name("events.db-wal").exists()


def test_the_database_path_comes_from_the_option_then_the_environment(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    monkeypatch.setenv("SESSIONWARDEN_DB", str(db))
    code, out, _ = run(capsys, "events", "--json")
    assert code == 0 and len(json_lines(out)) == EVENTS
    # --db wins over the environment, before or after the command name.
    for argv in (["--db", str(elsewhere), "events"], ["events", "--db", str(elsewhere)]):
        code, _, err = run(capsys, *argv)
        assert code == 74 and str(elsewhere) in err
    monkeypatch.setenv("SESSIONWARDEN_DB", str(elsewhere))
    for argv in (["--db", str(db), "events"], ["events", "--db", str(db)]):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and len(out.splitlines()) == EVENTS
    # Neither: the user's state directory.
    monkeypatch.delenv("SESSIONWARDEN_DB")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, _, err = run(capsys, "events")
    assert code == 74 and str(tmp_path / "state" / "sessionwarden" / "events.db") in err


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    garbage = tmp_path / "events.db"
    garbage.write_bytes(b"\x00" * 4096)
    done = subprocess.run(
        [sys.executable, "-m", "sessionwarden.cmd.cli.main", "replay", "--verify", "--db",
         str(garbage)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 65
    assert "Traceback" not in done.stderr and done.stderr.startswith("sessionwarden: ")
