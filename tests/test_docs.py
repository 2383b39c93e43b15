"""The prose promises only what exists: options named in the docs are real options.

Docstrings and the Markdown files quote command lines in backticks (``replay --verify``);
every ``--option`` of such a quote must be an option of that command, so the docs never
send a user to a flag that is not there. And the daemon does not advertise a control API
it does not have yet.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sessionwarden.cmd.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
_QUOTE = re.compile(r"``(.+?)``|`([^`\n]+)`")
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def _documents() -> list[Path]:
    skip = {".venv", "build", "tests", "bench"}
    sources = [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(sources)]


def quoted_command_lines() -> list[tuple[str, str, list[str]]]:
    """(where, command, options) for every quoted command line in the docs."""
    commands = set(_subcommands())
    found = []
    for path in _documents():
        text = path.read_text()
        for match in _QUOTE.finditer(text):
            words = (match.group(1) or match.group(2)).split()
            if words[:1] == ["sessionwarden"]:
                words = words[1:]
            if words and words[0] in commands:
                options = _OPTION.findall(" ".join(words[1:]))
                where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
                found.append((where, words[0], options))
    return found


def test_the_docs_quote_command_lines() -> None:
    # The check below must have something to check.
    quoted = quoted_command_lines()
    assert any(command == "replay" and "--verify" in options
               for _, command, options in quoted)


def test_every_option_quoted_in_the_docs_exists() -> None:
    subcommands = _subcommands()
    unknown = [
        f"{where}: {command} {option}"
        for where, command, options in quoted_command_lines()
        for option in options
        if option not in subcommands[command]._option_string_actions
    ]
    assert unknown == []


@pytest.mark.parametrize("argv", [["--help"], ["daemon", "--help"]])
def test_the_cli_does_not_promise_a_control_api(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "sessionwarden.cmd.main", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "control api" not in done.stdout.lower()


def test_the_readme_documents_each_control_endpoint_with_an_example() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Control API", 1)[1].split("\n### ", 1)[0]
    for endpoint, example in (("GET /v1/sessions/{id}", "/v1/sessions/my-agent-run\n"),
                              ("POST /v1/sessions/{id}/compact", "-X POST")):
        assert endpoint in section and example in section, endpoint
