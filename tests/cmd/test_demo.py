"""``sessionwarden demo``: a scripted session through a real daemon, on a fresh log.

The demo runs as a user would run it (a subprocess), with a state directory, a
``$SESSIONWARDEN_DB`` and a provider key that must all be left alone: the demo writes
only to a new temporary log (or the one ``--db`` names), and its configuration to a
new temporary directory.
"""

import re
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sessionwarden.cmd.cli.demo.config import DEMO_CONFIG, check_offline
from sessionwarden.cmd.cli.demo.run import STEPS
from sessionwarden.cmd.errors import CommandError
from sessionwarden.config import SIM_PRICE, parse_config
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    ContextCompressed,
    IterationCounted,
    SessionStarted,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog

from tests.cmd.daemon_fixtures import (
    DaemonFactory,
    clean_env,
    ledger_rows,
    query_db,
    sessionwarden_cmd,
)

_LOG = re.compile(r"^the demo's log: (\S+) ", re.MULTILINE)
_CONFIG = re.compile(r"^its config: (\S+) ", re.MULTILINE)
_SESSION = re.compile(r", session (demo-[0-9a-f]+)$", re.MULTILINE)
#: The calls of the demo's session: 4 short steps, then the long session's 10 (run_tests,
#: the call that sends its spilled result, 8 read_file turns until the 12,750-token
#: threshold).
_CALLS = 14
#: Its session's stream: SessionStarted, per call IterationCounted (each call is one step
#: of its turn) + CallAdmitted (with its request record) + CallCompleted, one
#: ToolResultSpilled, one ContextCompressed. The log also has the
#: spend cap step's session and its cap (SessionCapSet), and the checkpoint of the clean
#: stop.
_EVENTS = 1 + 3 * _CALLS + 1 + 1


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "real").mkdir()
    return clean_env() | {
        "XDG_STATE_HOME": str(tmp_path / "xdg"),
        "TMPDIR": str(tmp_path / "tmp"),
        "SESSIONWARDEN_DB": str(tmp_path / "real" / "events.db"),
        "OPENAI_API_KEY": "sk-demo-must-not-be-used-0123456789",
    }


def _demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = env or _env(tmp_path)
    result = subprocess.run([*sessionwarden_cmd(), "demo", *args], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout, result.stderr)
    match = _LOG.search(result.stdout)
    assert match, result.stdout
    return result, Path(match.group(1))


def _events(db: Path) -> list[Any]:
    with EventLog(db, readonly=True) as log:
        return [CODEC.decode(e.type, e.data) for e in log.read_all()
                if CODEC.knows(e.type)]


def _session(out: str) -> str:
    match = _SESSION.search(out)
    assert match, out
    return match.group(1)


def _assert_played(out: str, db: Path) -> None:
    for number, step in enumerate(STEPS, 1):
        assert f"{number:>3}. {step.title}:" in out
    # status, the long session's status and usage of the demo's log, as their own
    # commands print them
    assert (out.index(f"$ sessionwarden status --db {db}\n")
            < out.index(f"$ sessionwarden status --db {db} --session demo-")
            < out.index("$ sessionwarden usage"))
    assert "sessions:" in out and "REQUESTS" in out and "total" in out
    session = _session(out)
    rows = ledger_rows(db)
    ours = [r for r in rows.values() if r["session_id"] == session]
    assert len(ours) == _CALLS
    assert {(r["provider"], r["status"], r["source"]) for r in rows.values()} == {
        ("sim", 200, "provider")}
    assert all(r["output_tokens"] > 0 for r in rows.values())
    # the spend cap step's calls, in a session of their own, on sim's priced model
    assert {(r["session_id"], r["model"]) for r in rows.values() if r not in ours} == {
        (f"{session}-capped", "priced")}
    _assert_spilled_and_compressed(out, db)


def _assert_spilled_and_compressed(out: str, db: Path) -> None:
    events = _events(db)
    # the 30,000-character test log went to a file under the log's spill/ directory...
    [spill] = [e for e in events if isinstance(e, ToolResultSpilled)]
    assert (spill.tool, spill.reason, spill.chars, spill.truncated) == (
        "run_tests", "result", 30_000, False)
    saved = db.parent / "spill" / spill.file
    assert saved.stat().st_size == spill.bytes == 30_000
    assert saved.read_text().startswith("$ pytest ")
    assert f"spill file: {saved} (30,000 bytes)" in out
    assert "| [sessionwarden saved this tool result to a file" in out  # the stand-in
    # ...and the history was compressed once, from over its threshold to under it
    [compressed] = [e for e in events if isinstance(e, ContextCompressed)]
    assert compressed.trigger == "threshold" and compressed.summariser == "builtin"
    assert compressed.tokens_after < compressed.threshold == 12_750 <= compressed.tokens_before
    assert compressed.summarised > 0
    assert (f"{compressed.tokens_before:,} -> {compressed.tokens_after:,} tokens" in out)
    assert f"{compressed.summarised} summarised by the builtin summariser" in out
    # status --session sees it all, against the demo model's threshold
    assert "/ 12,750 tokens" in out
    assert re.search(r"compressions: 1\n  \d{4}-\d\d-\d\d ", out)
    assert "spills: 1 (30,000 bytes)" in out


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
    assert verified.returncode == 0
    session = _session(result.stdout)
    with EventLog(db, readonly=True) as log:
        assert log.stream_version(session_stream(session)) == _EVENTS
        capped = log.stream_version(session_stream(f"{session}-capped"))
    # the demo's session, the cap step's session and its cap, the clean stop's checkpoint
    assert verified.stdout.startswith(f"ok: {_EVENTS + capped + 1 + 1} events verified")
    # the daemon's configuration: the demo's model, beside the log, nothing else
    match = _CONFIG.search(result.stdout)
    assert match and Path(match.group(1)) == db.parent / "config.toml"
    assert (db.parent / "config.toml").read_text() == DEMO_CONFIG.lstrip()


def test_the_demo_shows_a_spend_cap_refusing_a_call(tmp_path: Path) -> None:
    result, db = _demo(tmp_path)
    out, session = result.stdout, f"{_session(result.stdout)}-capped"
    # the capped session: one call answered and charged, the next refused unsent
    with EventLog(db, readonly=True) as log:
        events = [CODEC.decode(e.type, e.data)
                  for e in log.read_stream(session_stream(session), 0)]
    assert [type(e) for e in events] == [SessionStarted, IterationCounted, CallAdmitted,
                                         CallCompleted, CallRefused]
    refused = events[-1]
    assert isinstance(refused, CallRefused)
    assert (refused.stage, refused.status, refused.code) == ("budgets", 402, "cap_exhausted")
    [row] = [r for r in ledger_rows(db).values() if r["session_id"] == session]
    assert SIM_PRICE.input is not None and SIM_PRICE.output is not None
    cost = (row["input_tokens"] * SIM_PRICE.input
            + row["output_tokens"] * SIM_PRICE.output).scaleb(-6)
    assert (row["model"], row["cost_status"], Decimal(row["cost"])) == ("priced", "actual",
                                                                         cost)
    assert 0 < cost < Decimal("0.001")
    # ...as the step says it: the cap, what the first call cost, the refusal's own words
    step = out[out.index("  6. a spend cap refuses a call:\n"):out.index("  7. ")]
    assert f"a new session, {session}, capped at $0.001 through the control API" in step
    left = Decimal("0.001") - cost
    assert f"${cost.normalize():f} spent, ${left.normalize():f} left;" in step
    assert "the same call again no longer fits: the daemon refuses it unsent," in step
    said = " ".join(line.strip() for line in step.splitlines()[6:])
    assert said.startswith("402 cap_exhausted: this request may cost up to ")
    assert f"the session cap of session {session}" in said
    # and the usage of the log sees its exact cost
    usage = subprocess.run([*sessionwarden_cmd(), "usage", "--db", str(db), "--json"],
                           env=clean_env(), capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and f"{cost.normalize():f}" in usage.stdout


def test_the_demo_writes_to_the_log_db_names(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    result, shown = _demo(tmp_path, "--db", str(db))
    assert shown == db
    _assert_played(result.stdout, db)
    assert not (tmp_path / "xdg").exists()
    # the daemon ran with the user's environment: its key is in that log's pool, from the
    # zero config the demo wrote out (key references only) before its own model
    assert sorted(query_db(db, "SELECT provider FROM view_credentials")) == [
        ("openai",), ("openai-responses",)]
    [scratch] = list((tmp_path / "tmp").iterdir())
    assert [p.name for p in scratch.iterdir()] == ["config.toml"]
    config = (scratch / "config.toml").read_text()
    assert config.endswith(DEMO_CONFIG) and 'keys = ["env:OPENAI_API_KEY"]' in config
    assert "sk-demo" not in config + result.stdout + result.stderr


def test_with_db_the_demo_adds_its_model_to_the_users_config_file(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (tmp_path / "mine.toml").write_text(
        '[daemon]\nport = 9999\n\n[[providers]]\nname = "openai"\n'
        'base_url = "https://api.openai.com/v1"\nkeys = ["env:OPENAI_API_KEY"]\n')
    env["SESSIONWARDEN_CONFIG"] = str(tmp_path / "mine.toml")
    db = tmp_path / "mine.db"
    result, _ = _demo(tmp_path, "--db", str(db), env=env)
    _assert_played(result.stdout, db)
    [scratch] = list((tmp_path / "tmp").iterdir())
    assert (scratch / "config.toml").read_text() == (
        (tmp_path / "mine.toml").read_text() + DEMO_CONFIG)


def test_a_demo_that_would_leave_the_machine_is_refused_in_one_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (tmp_path / "mine.toml").write_text(
        '[[providers]]\nname = "openai"\nbase_url = "https://api.openai.com/v1"\n'
        'keys = ["env:OPENAI_API_KEY"]\n\n[compression]\nsummariser = "model"\n'
        'summary_model = "openai/gpt-4.1-mini"\n')
    db = tmp_path / "mine.db"
    result = subprocess.run([*sessionwarden_cmd(), "demo", "--db", str(db)],
                            env=env | {"SESSIONWARDEN_CONFIG": str(tmp_path / "mine.toml")},
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == ("sessionwarden: the demo stays offline, but the configuration's "
                             "summary model is on provider openai: run `sessionwarden demo` "
                             "without --db\n")
    assert not db.exists()  # no daemon was started


def test_a_configuration_that_replaces_sim_is_not_offline() -> None:
    replaced = parse_config('[[providers]]\nname = "sim"\nbase_url = "https://sim.example/v1"\n'
                            + DEMO_CONFIG)
    with pytest.raises(CommandError, match="replaces the simulated provider sim"):
        check_offline(replaced)
    check_offline(parse_config(DEMO_CONFIG))  # the demo's own: offline
    check_offline(parse_config('[compression]\nsummariser = "model"\nsummary_model = '
                               '"sim/chat"\n'))  # a simulated summary model: offline too


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


def test_demo_help_says_which_log_it_writes_without_db(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sessionwarden.cmd.cli.main import build_parser

    def help_of(command: str) -> str:
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        return " ".join(capsys.readouterr().out.split())

    assert ("--db DB the log to write to (default: a new one in a new temporary "
            "directory, kept; $SESSIONWARDEN_DB is not used)") in help_of("demo")
    # the other commands' --db keeps its own help
    assert "--db DB event log (default: $SESSIONWARDEN_DB" in help_of("events")
