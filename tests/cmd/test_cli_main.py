"""The CLI's entry point (cmd/cli/main.py): bad usage of any kind has one exit code, 64.

argparse exits 2 on its own errors; docs/logs-and-exit-codes.md documents 64 (EX_USAGE)
for every bad usage, the ones argparse finds (unknown option, missing command, a value of
the wrong type) and the ones the commands find (``usage --since yesterday``) alike.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.store import EventLog

EX_USAGE = 64
EXIT_CODES = Path(__file__).resolve().parents[2] / "docs" / "logs-and-exit-codes.md"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "events.db"
    EventLog(path).close()
    return path


@pytest.mark.parametrize("argv", [
    [],                                       # no command
    ["nonsense"],                             # unknown command
    ["--no-such-option", "events"],           # unknown option, main parser
    ["events", "--no-such-option"],           # unknown option, subparser
    ["events", "--limit", "ten"],             # a value of the wrong type
    ["events", "--after", "-5"],              # a value out of range
    ["events", "--stream"],                   # an option without its value
    ["usage", "--by", "colour"],              # not one of the choices
    ["usage", "--json", "--csv"],             # mutually exclusive options
    ["daemon", "--port", "eighty"],
    ["status", "extra-argument"],
])
def test_argparse_errors_exit_64_with_usage_and_one_message(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--db", str(db)] if argv and argv[0] != "nonsense" else argv)
    assert exited.value.code == EX_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0].startswith("usage: sessionwarden")
    assert lines[-1].startswith("sessionwarden") and ": error: " in lines[-1]
    assert "Traceback" not in err


def test_a_command_found_bad_usage_exits_64_too(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["usage", "--db", str(db), "--since", "yesterday"]) == EX_USAGE


def test_the_installed_command_exits_64_on_an_unknown_option(db: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sessionwarden.cmd.cli.main", "events", "--db", str(db), "--bogus"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == EX_USAGE, done.stderr
    assert "unrecognized arguments: --bogus" in done.stderr


def test_help_and_version_still_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["events", "--help"], ["--version"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0
    assert "sessionwarden" in capsys.readouterr().out


def test_the_docs_document_one_exit_code_for_bad_usage() -> None:
    rows = [line for line in EXIT_CODES.read_text().splitlines() if line.startswith("| ")]
    usage_rows = [row for row in rows if "bad" in row and "usage" in row]
    assert [row.split("|")[1].strip() for row in usage_rows] == ["64"]
    assert not any(row.startswith("| 2 |") for row in rows)


def test_the_read_only_commands_do_not_import_the_daemon() -> None:
    # uvicorn, aiohttp and the actors are most of the CLI's start-up time; a command that
    # only reads the log (and every test that runs one) must not pay for them. rich is
    # imported only when a text table is printed.
    probe = ("import sys; from sessionwarden.cmd.cli.main import build_parser; build_parser(); "
             "print(sorted(m for m in ('uvicorn', 'aiohttp', 'pykka', 'rich', "
             "'sessionwarden.cmd.daemon.start', 'sessionwarden.cmd.daemon.runtime') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_malformed_clock_offset_is_one_line_and_the_config_exit_code(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SESSIONWARDEN_CLOCK_OFFSET", "next tuesday")
    assert main(["keys", "list", "--db", str(db)]) == 78
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "SESSIONWARDEN_CLOCK_OFFSET" in err


def test_the_option_the_internal_error_names_is_in_the_help(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from sessionwarden.cmd.cli.main import internal_error

    assert "--debug" in internal_error(RuntimeError("x"))
    for argv in (["--help"], ["status", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "--debug" in capsys.readouterr().out
