"""The prose promises only what exists: options named in the docs are real options.

Docstrings and the Markdown files (README.md, ARCHITECTURE.md, every page of docs/) quote
command lines in backticks (``replay --verify``); every ``--option`` of such a quote must
be an option of that command, so the docs never send a user to a flag that is not there.
Every relative link of those files reaches a file (and a heading of it, when it names
one); every user page of docs/ is linked from the README, and every page of
docs/architecture/ from ARCHITECTURE.md (which the README links). And the daemon does not
advertise a control API it does not have yet.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sessionwarden.cmd.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
_QUOTE = re.compile(r"``(.+?)``|`([^`\n]+)`")
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


ARCHITECTURE = ROOT / "docs" / "architecture"


def _pages() -> list[Path]:
    """The documentation: the README, ARCHITECTURE.md and every Markdown page under docs/."""
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _documents() -> list[Path]:
    skip = {".venv", "build", "tests", "bench"}
    sources = [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]
    return [*_pages(), *sorted(sources)]


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
    done = subprocess.run([sys.executable, "-m", "sessionwarden.cmd.cli.main", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "control api" not in done.stdout.lower()


def test_the_docs_document_each_control_endpoint_with_an_example() -> None:
    text = (ROOT / "docs" / "control-api.md").read_text()
    section = text.split("\n## Control API\n", 1)[1].split("\n## ", 1)[0]
    for endpoint, example in (("GET /v1/sessions/{id}", "/v1/sessions/my-agent-run\n"),
                              ("POST /v1/sessions/{id}/compact", "-X POST")):
        assert endpoint in section and example in section, endpoint


_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (same line count: links keep their lines)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, blanks to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(h) for h in _HEADING.findall(_prose(path.read_text()))}


def test_every_relative_link_of_the_docs_reaches_a_file_and_its_heading() -> None:
    broken = []
    checked = 0
    for page in _pages():
        text = _prose(page.read_text())
        for match in _LINK.finditer(text):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours
                continue
            checked += 1
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
            if not path.is_file():
                broken.append(f"{where}: {target}: no such file")
            elif anchor and (path.suffix != ".md" or anchor not in _anchors(path)):
                broken.append(f"{where}: {target}: no such heading")
    assert checked > 20  # the check must have links to check
    assert broken == []


def _linked_from(page: Path) -> set[Path]:
    """The files ``page`` links to (relative links, anchors dropped)."""
    return {(page.parent / m.partition("#")[0]).resolve()
            for m in _LINK.findall(_prose(page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", m)}


def test_every_user_page_of_the_docs_is_linked_from_the_readme() -> None:
    linked = _linked_from(ROOT / "README.md")
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if ARCHITECTURE not in p.parents]
    assert pages
    assert [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked] == []
    assert (ROOT / "ARCHITECTURE.md").resolve() in linked


def test_every_architecture_page_is_linked_from_architecture_md() -> None:
    linked = _linked_from(ROOT / "ARCHITECTURE.md")
    pages = sorted(ARCHITECTURE.rglob("*.md"))
    assert pages
    assert [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked] == []


def test_no_quote_of_the_docs_spans_two_lines() -> None:
    # A backtick quote broken over two lines is not seen by the option check above (and
    # shifts which backticks pair up after it): the docs keep every quote on one line.
    split = []
    for page in _pages():
        for number, line in enumerate(_prose(page.read_text()).splitlines(), 1):
            if re.sub(r"``.*?``", "", line).count("`") % 2:
                split.append(f"{page.relative_to(ROOT)}:{number}")
    assert split == []
