"""``sessionwarden demo``: a scripted session through a real daemon, on a fresh log.

The demo runs as a user would run it (a subprocess), with a state directory, a
``$SESSIONWARDEN_DB`` and a provider key that must all be left alone: the demo writes
only to a new temporary log (or the one ``--db`` names).
"""

import re
import subprocess
from pathlib import Path

from sessionwarden.cmd.demo import STEPS

from tests.cmd.daemon_fixtures import (
    DaemonFactory,
    clean_env,
    ledger_rows,
    query_db,
    sessionwarden_cmd,
)

_LOG = re.compile(r"^the demo's log: (\S+) ", re.MULTILINE)


def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "real").mkdir()
    env = clean_env() | {
        "XDG_STATE_HOME": str(tmp_path / "xdg"),
        "TMPDIR": str(tmp_path / "tmp"),
        "SESSIONWARDEN_DB": str(tmp_path / "real" / "events.db"),
        "OPENAI_API_KEY": "sk-demo-must-not-be-used-0123456789",
    }
    result = subprocess.run([*sessionwarden_cmd(), "demo", *args], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout, result.stderr)
    match = _LOG.search(result.stdout)
    assert match, result.stdout
    return result, Path(match.group(1))


def _assert_played(out: str, db: Path) -> None:
    for number, step in enumerate(STEPS, 1):
        assert f"{number:>3}. {step.title}: " in out
    # status and usage of the demo's log, in that order, as their own commands print them
    assert out.index("$ sessionwarden status") < out.index("$ sessionwarden usage")
    assert "sessions:" in out and "REQUESTS" in out and "total" in out
    rows = ledger_rows(db)
    assert len(rows) == 4
    assert {(r["provider"], r["status"], r["source"]) for r in rows.values()} == {
        ("sim", 200, "provider")}
    assert all(r["output_tokens"] > 0 for r in rows.values())


def test_the_demo_plays_its_script_on_a_fresh_temporary_log(tmp_path: Path) -> None:
    result, db = _demo(tmp_path)
    _assert_played(result.stdout, db)
    assert db.parent.parent == tmp_path / "tmp" and db.exists()  # kept, in TMPDIR
    assert "credentials: none" in result.stdout  # the user's key stayed out of it
    assert not (tmp_path / "xdg").exists()  # the default log was not touched
    assert list((tmp_path / "real").iterdir()) == []  # nor $SESSIONWARDEN_DB
    assert "sk-demo" not in result.stdout + result.stderr
    verified = subprocess.run([*sessionwarden_cmd(), "replay", "--verify", "--db", str(db)],
                              env=clean_env(), capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stdout.startswith("ok: 14 events verified")


def test_the_demo_writes_to_the_log_db_names(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    result, shown = _demo(tmp_path, "--db", str(db))
    assert shown == db
    _assert_played(result.stdout, db)
    assert not (tmp_path / "xdg").exists() and list((tmp_path / "tmp").iterdir()) == []
    # the daemon ran with the user's environment: its key is in that log's pool
    assert query_db(db, "SELECT provider FROM view_credentials") == [("openai",)]


def test_a_demo_whose_daemon_cannot_start_says_why_in_one_line(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    running = daemon_factory().start()  # holds the log's instance lock
    result = subprocess.run([*sessionwarden_cmd(), "demo", "--db", str(running.db)],
                            env=running.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("sessionwarden: the demo's daemon exited 74 at start: ")
    assert "Traceback" not in result.stdout + result.stderr
    assert running.ledger() == {}  # the running daemon's log got nothing
