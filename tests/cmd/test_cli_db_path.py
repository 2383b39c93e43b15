"""Where the database lives: an explicit path must exist, the default one is created.

``--db`` and ``SESSIONWARDEN_DB`` are explicit choices: a typo in them must not make a
new, empty log in a new directory, so their directory must exist (else one line, exit 74,
naming the directory). Only the default state directory
(``$XDG_STATE_HOME/sessionwarden/``) is created, 0700, and only by a command that writes.
The store itself never creates a directory (tests/store/test_log.py).
"""

import os
import stat
from pathlib import Path

import pytest
from sessionwarden.cmd.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No SESSIONWARDEN_DB; the state directory under ``tmp_path/xdg`` (not created)."""
    monkeypatch.delenv("SESSIONWARDEN_DB", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


@pytest.mark.parametrize("command", [["demo"], ["events"], ["usage"], ["status"],
                                     ["replay", "--verify"]])
@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_explicit_db_in_a_missing_directory_is_refused(
    env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, command: list[str], how: str,
) -> None:
    missing = tmp_path / "no" / "such"
    db = missing / "events.db"
    if how == "option":
        code, out, err = run(capsys, *command, "--db", str(db))
    else:
        monkeypatch.setenv("SESSIONWARDEN_DB", str(db))
        code, out, err = run(capsys, *command)
    assert (code, out) == (74, "")
    assert err == f"sessionwarden: {missing}: no such directory\n"
    assert not (tmp_path / "no").exists() and not env.exists()


def test_an_explicit_db_under_a_file_is_refused(
    env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plain").write_text("")
    code, out, err = run(capsys, "demo", "--db", str(tmp_path / "plain" / "events.db"))
    assert (code, out) == (74, "")
    assert err == f"sessionwarden: {tmp_path / 'plain'}: not a directory\n"


def test_an_explicit_db_in_an_existing_directory_is_created(
    env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    code, out, _ = run(capsys, "demo", "--db", str(db))
    assert code == 0 and "ok: 2 events verified" in out
    assert db.exists() and not env.exists()


def test_the_default_state_directory_is_created_0700_by_a_writing_command(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = env / "sessionwarden"
    code, _, err = run(capsys, "events")  # a read creates nothing
    assert code == 74 and "no event log here" in err and not env.exists()
    old = os.umask(0o022)  # a permissive umask must not leak into the directory
    try:
        code, out, _ = run(capsys, "demo")
    finally:
        os.umask(old)
    assert code == 0 and str(state / "events.db") in out
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert run(capsys, "events")[0] == 0

