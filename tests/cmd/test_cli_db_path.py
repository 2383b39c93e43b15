"""Where the database lives: an explicit path must exist, the default one is created.

``--db`` and ``SESSIONWARDEN_DB`` are explicit choices: a typo in them must not make a
new, empty log in a new directory, so their directory must exist (else one line, exit 74,
naming the directory). Only the default state directory
(``$XDG_STATE_HOME/sessionwarden/``) is created, 0700, and only by a command that writes
(``daemon``). ``demo`` writes only to a log of its own or the one ``--db`` names
(tests/cmd/test_demo.py). The store itself never creates a directory
(tests/store/test_log.py).
"""

import os
import stat
from pathlib import Path

import pytest
from sessionwarden.cmd.cli.main import build_parser, database, main


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


@pytest.mark.parametrize(("command", "how"), [
    *((command, how) for command in (["events"], ["usage"], ["status"], ["replay", "--verify"])
      for how in ("option", "environment")),
    (["demo"], "option"),  # the demo ignores $SESSIONWARDEN_DB (tests/cmd/test_demo.py)
])
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


def test_the_default_state_directory_is_created_0700_by_a_writing_command(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = env / "sessionwarden"
    code, _, err = run(capsys, "events")  # a read creates nothing
    assert code == 74 and "no event log here" in err and not env.exists()
    environ = {"XDG_STATE_HOME": str(env)}
    # the demo makes a log of its own: the default one is not even looked at
    demo = build_parser().parse_args(["demo"])
    assert database(demo, environ) == state / "events.db" and not env.exists()
    old = os.umask(0o022)  # a permissive umask must not leak into the directory
    try:
        db = database(build_parser().parse_args(["daemon"]), environ)
    finally:
        os.umask(old)
    assert db == state / "events.db"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
