"""How ``sessionwarden daemon`` starts and ends, run as a real subprocess.

A start-up failure is one line on stderr with a documented exit code, and no exit of the
daemon (a clean stop or a failed start) leaves ``<db>.lock`` behind.
"""

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cmd.daemon_fixtures import Daemon, DaemonMaker

EXIT_UNAVAILABLE = 69


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def db_in(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory / "events.db"


def lock_file(daemon: Daemon) -> Path:
    return daemon.db.with_name(daemon.db.name + ".lock")


def test_port_in_use_is_one_line_exit_69_and_leaves_no_lock(
    daemon_factory: DaemonMaker, tmp_path: Path, busy_port: int
) -> None:
    daemon = daemon_factory(db=db_in(tmp_path), args=["--port", str(busy_port)])
    proc = daemon.spawn()
    assert proc.wait(30) == EXIT_UNAVAILABLE, daemon.stderr()
    err = daemon.stderr()
    assert err == (
        f"sessionwarden: cannot listen on 127.0.0.1:{busy_port}: Address already in use\n"
    )
    assert not lock_file(daemon).exists()
    # Nothing was left half-claimed: a daemon on the same database starts at once.
    again = daemon_factory(db=daemon.db, name="after").start()
    assert lock_file(again).exists()
    assert again.stop() == 0


def test_a_clean_stop_leaves_no_lock(daemon_factory: DaemonMaker, tmp_path: Path) -> None:
    daemon = daemon_factory(db=db_in(tmp_path)).start()
    assert daemon.proc is not None  # the pid, then where it listens (for `keys list`)
    assert lock_file(daemon).read_text() == f"{daemon.proc.pid}\n{daemon.url('')}\n"
    assert daemon.stop() == 0
    assert not lock_file(daemon).exists()


def test_a_refused_second_daemon_leaves_the_first_ones_lock(
    daemon_factory: DaemonMaker, tmp_path: Path
) -> None:
    first = daemon_factory(db=db_in(tmp_path)).start()
    second = daemon_factory(db=first.db, name="second")
    assert second.spawn().wait(30) == 74, second.stderr()
    assert "in use by another sessionwarden daemon" in second.stderr()
    assert lock_file(first).exists()  # still the first daemon's claim
    assert first.stop() == 0
    assert not lock_file(first).exists()


def test_a_db_in_a_missing_directory_is_refused_not_created(
    daemon_factory: DaemonMaker, tmp_path: Path
) -> None:
    missing = tmp_path / "typo"
    daemon = daemon_factory(db=missing / "events.db")
    assert daemon.spawn().wait(20) == 74, daemon.stderr()
    assert daemon.stderr() == f"sessionwarden: {missing}: no such directory\n"
    assert not missing.exists()


def test_a_written_tool_limit_larger_than_a_window_is_warned_of_once_at_start(
    daemon_factory: DaemonMaker, tmp_path: Path
) -> None:
    extra = ('[tools]\nresult_size_chars = 100000\n'
             '[[models]]\nname = "small"\nprovider = "fake"\ncontext_length = 16000\n')
    daemon = daemon_factory(db=db_in(tmp_path), extra_config=extra).start()
    assert daemon.stop() == 0
    warned = [line for line in daemon.stderr().splitlines() if "result_size_chars" in line]
    assert len(warned) == 1 and "100,000 characters" in warned[0] and "small" in warned[0]
    assert "gpt-test" not in warned[0]  # its 128K window holds it


def test_the_readmes_curl_examples_take_the_token_the_default_setup_made(
    daemon_factory: DaemonMaker, tmp_path: Path
) -> None:
    # They used $SESSIONWARDEN_TOKEN, which the default setup never sets: 401 as written.
    # The README's first call and the docs' control API examples (docs/*.md) take it alike.
    root = Path(__file__).resolve().parents[2]
    readme = "\n".join(p.read_text() for p in [root / "README.md", *(root / "docs").glob("*.md")])
    lines = {line for line in readme.splitlines() if line.startswith("TOKEN=")}
    assert len(lines) == 1 and readme.count("Bearer $TOKEN") >= 3
    state = tmp_path / "state"
    (state / "sessionwarden").mkdir(parents=True, mode=0o700)
    daemon = daemon_factory(db=state / "sessionwarden" / "events.db")
    del daemon.env["SESSIONWARDEN_TOKEN"]  # the default setup: a generated token file
    daemon.env["XDG_STATE_HOME"] = str(state)
    daemon.start()
    script = (f"{lines.pop()}\ncurl -s -o /dev/null -w '%{{http_code}}' -H "
              f"\"Authorization: Bearer $TOKEN\" {daemon.url('/v1/sessions/none')}")
    env = {k: v for k, v in daemon.env.items() if k != "SESSIONWARDEN_TOKEN"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=30)
    assert daemon.stop() == 0
    assert done.stdout == "404", done  # authenticated: the session is unknown, not 401
