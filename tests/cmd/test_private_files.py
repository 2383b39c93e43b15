"""The daemon's files are its user's alone: created private whatever the umask, and an
existing token file or state directory open to others is tightened or refused.

The checks themselves (``cmd/daemon/private.py``) take the uid they expect, so "another user's
file" is tested without root: the file is ours, and the check is told to expect another
uid.
"""

import contextlib
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from loguru import logger
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.daemon.private import private_directory, read_private_file, token_directory
from sessionwarden.cmd.daemon.start import load_token
from sessionwarden.cmd.errors import UnsafeFile

from tests.cmd.daemon_fixtures import clean_env, sessionwarden_cmd

_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/v1")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """What the daemon's code logs at WARNING while the test runs."""
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    try:
        yield seen
    finally:
        logger.remove(sink)


def test_a_daemon_under_umask_0_creates_only_private_directories_and_files(
    tmp_path: Path,
) -> None:
    xdg = tmp_path / "xdg" / "state"  # neither exists: the daemon creates both
    env = clean_env() | {"XDG_STATE_HOME": str(xdg),
                         "XDG_CONFIG_HOME": str(tmp_path / "config")}
    err = tmp_path / "daemon.err"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            ["sh", "-c", 'umask 000 && exec "$@"', "sh", *sessionwarden_cmd(), "daemon",
             "--port", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not _LISTENING.search(err.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.02)
        listening = _LISTENING.search(err.read_text())
        assert listening, err.read_text()
        while time.monotonic() < deadline:  # serving: SIGTERM now means a clean stop
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{listening[1]}/healthz").status_code == 200:
                    break
            time.sleep(0.02)
        state = xdg / "sessionwarden"
        made = [tmp_path / "xdg", xdg, state]
        files = [p for p in state.iterdir() if p.is_file()]
        assert {p.name for p in files} >= {"events.db", "token", "events.db.lock"}
        assert {str(p): oct(mode(p)) for p in made} == {str(p): "0o700" for p in made}
        assert {p.name: oct(mode(p)) for p in files} == {p.name: "0o600" for p in files}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err.read_text()


def test_an_open_token_file_is_made_0600_with_a_warning(
    tmp_path: Path, warnings: list[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("swt-existing\n")
    token.chmod(0o644)
    assert load_token(tmp_path / "events.db", {}) == ("swt-existing", token)
    assert mode(token) == 0o600
    assert warnings == [f"{token}: the token file was open to other users (mode 0644); "
                        "it is 0600 now"]
    assert load_token(tmp_path / "events.db", {}) == ("swt-existing", token)
    assert len(warnings) == 1  # a private file is read without a word


def test_a_new_token_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would leave the owner without write permission
    try:
        token, path = load_token(tmp_path / "events.db", {})
    finally:
        os.umask(old)
    assert path is not None and mode(path) == 0o600 and path.read_text() == token + "\n"


def test_a_token_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("swt-planted\n")
    (tmp_path / "db").mkdir(mode=0o700)
    (tmp_path / "db" / "token").symlink_to(target)
    with pytest.raises(UnsafeFile) as caught:
        load_token(tmp_path / "db" / "events.db", {})
    assert caught.value.exit_code == 74
    assert "a symbolic link" in str(caught.value) and "SESSIONWARDEN_TOKEN" in str(caught.value)


def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("swt-theirs\n")
    token.chmod(0o600)
    with pytest.raises(UnsafeFile, match="belongs to another user"):
        read_private_file(token, print, what="the token file", owner=os.geteuid() + 1)


def test_a_directory_others_can_write_to_loses_their_write_permission(
    tmp_path: Path, warnings: list[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    token, path = load_token(shared / "events.db", {})
    assert path == shared / "token" and path.read_text() == token + "\n"
    assert mode(shared) == 0o755
    assert warnings == [f"{shared}: other users could write to the directory holding the "
                        "token file (mode 0777); it is 0755 now"]


def test_a_directory_of_another_user_others_can_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    with pytest.raises(UnsafeFile, match="other users can write to this directory"):
        token_directory(shared, print, owner=os.geteuid() + 1)
    assert mode(shared) == 0o775
    shared.chmod(0o1777)  # sticky, as /tmp: no one can replace a file of ours
    token_directory(shared, print, owner=os.geteuid() + 1)
    assert mode(shared) == 0o1777


def test_an_open_default_state_directory_is_made_0700_even_by_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_DB", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = tmp_path / "sessionwarden"
    state.mkdir()
    state.chmod(0o755)
    assert main(["events"]) == 74  # no log yet; the directory was looked after anyway
    err = capsys.readouterr().err
    assert mode(state) == 0o700
    assert err.startswith(f"sessionwarden: warning: {state}: the state directory was open "
                          "to other users (mode 0755); it is 0700 now\n")


def test_a_state_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "sessionwarden"
    state.mkdir(mode=0o700)
    with pytest.raises(UnsafeFile, match="belongs to another user"):
        private_directory(state, print, create=False, owner=os.geteuid() + 1)
