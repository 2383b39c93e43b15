"""A full disk is a clear 503 while it lasts, a clear exit at start, and heals by itself.

SQLite reports a full disk as SQLITE_FULL from a write. Here a VFS that wraps the real
one (``unix``) and fails every write with that error while ``full`` is set is made the
process's default, so the in-process daemon (real log file, real actors, real HTTP and
fake upstream) meets exactly what a full disk makes SQLite say, and the disk "frees up"
when the test says so. Before: at start the full disk hid behind "cannot rollback - no
transaction is active" (exit 70); while running, a session shard that failed its append
five times was given up on, and the daemon stayed down after space returned.
"""

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import openai
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.daemon.proxy import calls
from sessionwarden.store.errors import StoreUnavailable

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]


class FullDisk(apsw.VFS):
    """The real file system, except that writes fail with SQLITE_FULL while ``full``."""

    def __init__(self) -> None:
        self.full = False
        super().__init__("sw-test-full-disk", base="unix", makedefault=True)

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:
        return _File(self, name, flags)


class _File(apsw.VFSFile):
    def __init__(self, disk: FullDisk, name: Any, flags: list[int]) -> None:
        self._disk = disk
        super().__init__("unix", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self._disk.full:
            raise apsw.FullError("database or disk is full")
        super().xWrite(data, offset)


@pytest.fixture
def disk() -> Iterator[FullDisk]:
    vfs = FullDisk()
    try:
        yield vfs
    finally:
        vfs.full = False
        vfs.unregister()


@pytest.fixture
def daemon(disk: FullDisk, tmp_path: Path, fake: FakeProviderServer
           ) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake)
    try:
        yield d.start()
    finally:
        disk.full = False
        d.stop()


def _call(client: openai.OpenAI) -> str:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    return reply.choices[0].message.content or ""


def test_calls_get_a_clear_503_while_the_disk_is_full_and_succeed_once_it_is_not(
    daemon: InProcessDaemon, disk: FullDisk, fake: FakeProviderServer
) -> None:
    with daemon.openai(session="full") as client:
        assert _call(client) == "ok: hello"
        fake.state.clear()
        disk.full = True
        for _ in range(12):  # more failures than a flapping actor is allowed
            with pytest.raises(openai.APIStatusError) as info:
                _call(client)
            assert info.value.status_code == 503
            assert "the disk is full" in info.value.message
            assert "nothing was sent upstream" in info.value.message
            assert info.value.response.headers["retry-after"] == "1"
            time.sleep(0.05)
        assert fake.state.snapshot() == []
        disk.full = False
        deadline = time.monotonic() + 10
        while True:  # the shard comes back by itself, within its capped backoff
            try:
                assert _call(client) == "ok: hello"
                break
            except openai.APIStatusError:
                assert time.monotonic() < deadline, "the daemon did not recover"
                time.sleep(0.1)
    assert not daemon.runtime.supervisor.given_up
    rows = daemon.rows("SELECT outcome FROM view_ledger WHERE session_id = 'full'")
    assert rows == [("ok",), ("ok",)]


def test_a_call_in_flight_when_the_disk_fills_is_recorded_once_space_returns(
    daemon: InProcessDaemon, disk: FullDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls, "COMPLETE_DEADLINE_S", 20.0)
    result: list[object] = []

    def slow_call() -> None:
        with daemon.openai(session="inflight") as client:
            try:
                reply = client.chat.completions.create(
                    model=MODEL, messages=MESSAGES, extra_body={"fake": {"delay_ms": 600}})
                result.append(reply.choices[0].message.content)
            except openai.APIError as exc:
                result.append(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    deadline = time.monotonic() + 5
    while not daemon.rows("SELECT 1 FROM view_calls_open"):  # admitted, upstream working
        assert time.monotonic() < deadline
        time.sleep(0.01)
    disk.full = True  # the completion will find the disk full ...
    time.sleep(1.5)
    disk.full = False  # ... and be retried until it is written
    caller.join(20)
    assert result == ["ok: hello"]
    rows = daemon.rows("SELECT outcome FROM view_ledger WHERE session_id = 'inflight'")
    assert rows == [("ok",)]


def test_a_full_disk_at_start_is_one_clear_line_and_exit_74(
    disk: FullDisk, tmp_path: Path, fake: FakeProviderServer,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    daemon_logging: None,
) -> None:
    db = tmp_path / "events.db"
    first = InProcessDaemon(db, fake).start()  # a log with a call in it
    with first.openai(session="s") as client:
        _call(client)
    first.stop()
    (tmp_path / "events.db-wal").unlink(missing_ok=True)
    disk.full = True
    with pytest.raises(StoreUnavailable, match="the disk is full"):
        InProcessDaemon(db, fake).start()
    monkeypatch.setenv("SESSIONWARDEN_TOKEN", "swt-test-token")
    monkeypatch.setenv("FAKE_KEY_A", "sk-test-key-aaaaaaaa")
    config = tmp_path / "c.toml"
    config.write_text(f'[[providers]]\nname = "fake"\nbase_url = "{fake.base_url}"\n'
                      'keys = ["env:FAKE_KEY_A"]\n')
    capsys.readouterr()
    assert main(["daemon", "--db", str(db), "--port", "0", "--config", str(config)]) == 74
    err = capsys.readouterr().err
    assert "the disk is full" in err and "Traceback" not in err
