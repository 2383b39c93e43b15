"""The single-instance lock (store/lock.py): no file left behind, and no two holders.

``release()`` unlinks ``<db>.lock`` while it still holds the flock. That opens a race the
acquire must close: a process that opened the old file before the unlink gets the flock
on a file no longer in the directory, while a third creates a new file under the name
and locks that. The acquire therefore checks, after the flock, that the path still names
the file it locked, and starts over if not.
"""

import fcntl
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sessionwarden.store import lock as lock_module
from sessionwarden.store.errors import StoreClaimed
from sessionwarden.store.lock import Announcement, InstanceLock, read_announcement


def test_release_removes_the_lock_file(db: Path) -> None:
    claim = InstanceLock(db)
    assert claim.path.read_text() == f"{os.getpid()}\n"
    claim.release()
    assert not claim.path.exists()
    claim.release()  # idempotent
    with InstanceLock(db) as again:
        assert again.path.exists()
    assert not again.path.exists()


def test_a_stale_file_of_a_dead_holder_is_taken_over(db: Path) -> None:
    stale = db.with_name(db.name + ".lock")
    stale.write_text("99999999\n")  # left by a holder killed with SIGKILL
    with InstanceLock(db) as claim:
        assert claim.path.read_text() == f"{os.getpid()}\n"
    assert not stale.exists()


def _between_open_and_flock(
    monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
) -> list[int]:
    """Run ``action`` between the acquirer's open() and its first flock()."""
    real_flock = fcntl.flock
    calls: list[int] = []

    def flock(fd: int, operation: int) -> None:
        first = not calls
        calls.append(operation)
        if first:
            action()
        real_flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", flock)
    return calls


def test_a_file_unlinked_between_open_and_flock_is_not_a_claim(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = db.with_name(db.name + ".lock")
    path.write_text("")
    # Another holder's release() unlinks the file after this process opened it.
    calls = _between_open_and_flock(monkeypatch, path.unlink)
    claim = InstanceLock(db)
    monkeypatch.undo()
    try:
        assert len([op for op in calls if op & fcntl.LOCK_EX]) == 2  # it started over
        assert path.read_text() == f"{os.getpid()}\n"  # the name points at the held file
        with pytest.raises(StoreClaimed):
            InstanceLock(db)  # the third process is refused: one holder only
    finally:
        claim.release()


def test_a_holder_releasing_between_open_and_flock_leaves_one_holder(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = InstanceLock(db)
    _between_open_and_flock(monkeypatch, first.release)
    second = InstanceLock(db)
    monkeypatch.undo()
    try:
        assert second.path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(StoreClaimed):
            InstanceLock(db)
    finally:
        second.release()
    assert not second.path.exists()


def test_threads_racing_for_the_lock_never_hold_it_together(db: Path) -> None:
    # flock locks belong to open file descriptions, so threads with their own
    # descriptors contend exactly as processes do.
    holders: list[int] = []
    overlaps: list[list[int]] = []
    acquired = [0] * 4
    guard = threading.Lock()
    deadline = time.monotonic() + 0.5

    def contend(n: int) -> None:
        while time.monotonic() < deadline:
            try:
                claim = InstanceLock(db)
            except StoreClaimed:
                continue
            with guard:
                holders.append(n)
                if len(holders) > 1:
                    overlaps.append(list(holders))
            acquired[n] += 1
            time.sleep(0.0001)
            with guard:
                holders.remove(n)
            claim.release()

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert overlaps == []
    assert sum(acquired) > 10
    assert not db.with_name(db.name + ".lock").exists()


def test_the_announcement_names_the_holder_and_its_url_while_it_lives(db: Path) -> None:
    assert read_announcement(db) is None  # no daemon
    with InstanceLock(db) as claim:
        assert read_announcement(db) is None  # claimed, not listening yet
        claim.announce("http://127.0.0.1:8787")
        assert read_announcement(db) == Announcement(os.getpid(), "http://127.0.0.1:8787")
        with pytest.raises(StoreClaimed) as refused:
            InstanceLock(db)
        assert str(refused.value).endswith(f"(pid {os.getpid()})")  # the pid, not the URL
    assert read_announcement(db) is None


@pytest.mark.parametrize("text", [
    "99999999\nhttp://127.0.0.1:8787\n",  # a SIGKILLed daemon's leftover: its pid is gone
    "{pid}\nftp://127.0.0.1:8787\n",  # {pid}: this process's, alive
    "{pid}\n",
    "garbage\nhttp://127.0.0.1:8787\n",
    "",
])
def test_an_announcement_that_names_no_live_daemon_of_ours_is_none(
    db: Path, text: str
) -> None:
    db.with_name(db.name + ".lock").write_text(text.replace("{pid}", str(os.getpid())))
    assert read_announcement(db) is None


@pytest.mark.parametrize("content", [
    b"9" * 30 + b"\nhttp://127.0.0.1:8787\n",  # a pid no kernel has (kill would overflow)
    "\u00b2\nhttp://127.0.0.1:8787\n".encode(),  # a digit to isdigit(), not to int()
    "\u0661\u0662\nhttp://127.0.0.1:8787\n".encode(),  # Arabic-Indic digits
    b"0\nhttp://127.0.0.1:8787\n",  # kill(0) would reach our own process group
    b"-1\nhttp://127.0.0.1:8787\n",
    b"+{pid}\nhttp://127.0.0.1:8787\n",
    b"\xff\xfe\x00\x01" * 4096,
    b"{pid}\n" + b"http://" + b"A" * (1 << 20) + b"\n",  # huge: past the 512 bytes read
])
def test_hostile_lock_contents_are_no_announcement(db: Path, content: bytes) -> None:
    path = db.with_name(db.name + ".lock")
    path.write_bytes(content.replace(b"{pid}", str(os.getpid()).encode()))
    assert read_announcement(db) is None


def test_only_a_private_regular_file_of_this_user_is_believed(db: Path) -> None:
    path = db.with_name(db.name + ".lock")
    path.write_text(f"{os.getpid()}\nhttp://127.0.0.1:8787\n")
    path.chmod(0o600)
    assert read_announcement(db) == Announcement(os.getpid(), "http://127.0.0.1:8787")
    path.chmod(0o666)  # anyone could have pointed it elsewhere
    assert read_announcement(db) is None
    path.chmod(0o620)
    assert read_announcement(db) is None
    path.unlink()
    os.mkfifo(path, 0o600)  # opening a FIFO for reading would wait for a writer forever
    started = time.monotonic()
    assert read_announcement(db) is None
    assert time.monotonic() - started < 1
    path.unlink()
    path.write_text("99999999\n")  # a leftover made open to others: the claim makes it ours
    path.chmod(0o666)
    with InstanceLock(db) as claim:
        claim.announce("http://127.0.0.1:8787")
        assert read_announcement(db) == Announcement(os.getpid(), "http://127.0.0.1:8787")
        assert path.stat().st_mode & 0o777 == 0o600
