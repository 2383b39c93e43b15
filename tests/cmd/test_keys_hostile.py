"""Hostile input to the key pool's operator surface: the commands, ``GET /v1/keys``, the lock.

Whatever an operator types (a literal key where a reference or a fingerprint belongs, a
provider name with control characters, a fingerprint of the wrong case or provider) and
whatever a running daemon is doing (its last key removed while calls keep coming), the
command answers in one line with a documented exit code, writes nothing it should not,
and no key value appears in its output, the log or any file beside it. The lock file's
announcement, written by whoever could write that file, never sends the token anywhere
but a plain-HTTP address on this machine, and ``keys list`` never waits past its bound.
"""

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import apsw
import httpx
import pytest
from sessionwarden.cmd.cli.main import internal_error, main
from sessionwarden.cmd.daemon import client as daemon_client
from sessionwarden.cmd.daemon.client import leases_in_flight
from sessionwarden.redact import fingerprint
from sessionwarden.store import EventLog
from sessionwarden.views.wiring import default_projections

from tests.cmd.daemon_fixtures import clean_env, query_db, sessionwarden_cmd
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import GENUINE, POLLED_S, REVOKED, TRANSIENT, Daemons, ask

#: A key as a user would paste it: the shape the redactor's patterns know.
LITERAL = "sk-proj-" + "Q7x9" * 10


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit:  # argparse's own refusals exit
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def no_secret_beside(db: Path, secrets: list[str]) -> None:
    """No file in the log's directory holds any of ``secrets``."""
    for path in db.parent.iterdir():
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, path


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    return query_db(db, sql)


def one_line(code: int, out: str, err: str, expected: int) -> None:
    assert code == expected, err
    assert out == "" and err.count("\n") == 1 and err.startswith("sessionwarden"), err
    assert "Traceback" not in err and len(err) < 300, err


@pytest.fixture
def stopped(daemons: Daemons) -> Iterator[InProcessDaemon]:
    """A log with provider ``fake`` and its two keys, the daemon stopped."""
    daemon = daemons.start()
    daemon.stop()
    yield daemon


def test_a_literal_key_anywhere_on_the_command_line_is_never_echoed_or_stored(
    stopped: InProcessDaemon, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = str(stopped.db)
    before = len(rows(stopped.db, "SELECT seq FROM events"))
    monkeypatch.setenv("HOLDS_A_KEY", LITERAL)
    for argv, expected in (
        (("keys", "add", "fake", LITERAL), 64),
        (("keys", "add", "fake", f"env:{LITERAL}"), 64),
        (("keys", "add", "fake", f"HOLDS_A_KEY={LITERAL}"), 64),
        (("keys", "add", LITERAL, "env:HOLDS_A_KEY"), 64),  # the key in the provider's place
        (("keys", "remove", "fake", LITERAL), 64),
        (("keys", "reset", "fake", LITERAL), 64),
        (("keys", "remove", LITERAL, "fp:0123456789ab"), 64),
        (("breaker", "reset", LITERAL), 64),
        (("keys", "add", "fake", "env:HOLDS_A_KEY", LITERAL), 64),  # argparse's own errors
        (("keys", LITERAL), 64),
        (("breaker", "list", LITERAL, LITERAL), 64),
    ):
        code, out, err = run(capsys, *argv, "--db", db)
        assert code == expected, (argv, err)
        assert LITERAL not in out + err and LITERAL[:20] not in out + err, argv
        assert "Traceback" not in err
    assert len(rows(stopped.db, "SELECT seq FROM events")) == before  # nothing written
    no_secret_beside(stopped.db, [LITERAL])


def test_references_and_names_that_are_not_well_formed_get_one_line(
    stopped: InProcessDaemon, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = str(stopped.db)
    monkeypatch.setenv("GOOD_KEY", "sk-test-good-" + "5" * 20)
    monkeypatch.setenv("EMPTY_KEY", "   ")
    events = len(rows(stopped.db, "SELECT seq FROM events"))
    for argv, expected in (
        (("keys", "add", "fake", "env:"), 64),
        (("keys", "add", "fake", "env:EMPTY_KEY"), 64),
        (("keys", "add", "fake", "env:A=B"), 64),
        (("keys", "add", "fake", "env:A\nB"), 64),
        (("keys", "add", "fake", "env:CLÉ"), 64),
        (("keys", "add", "fake", "env:" + "A" * 10_000), 64),
        (("keys", "add", "fake", "x" * 10_000), 64),
        (("keys", "add", "fa\x1b[2Jke", "env:GOOD_KEY"), 64),
        (("keys", "add", "f" * 1024, "env:GOOD_KEY"), 64),
        (("keys", "add", "fake\n", "env:GOOD_KEY"), 64),
        (("keys", "add", "", "env:GOOD_KEY"), 64),
        (("keys", "remove", "fa\x1bke", "fp:0123456789ab"), 64),
        (("keys", "remove", "fake", "fp:" + "0" * 10_000), 64),
        (("keys", "remove", "fake", "fp:\x1b[2J"), 64),
        (("breaker", "reset", "\x1b]0;owned\x07"), 64),
    ):
        code, out, err = run(capsys, *argv, "--db", db)
        one_line(code, out, err, expected)
        assert "\x1b" not in err and "\x07" not in err, argv
    assert len(rows(stopped.db, "SELECT seq FROM events")) == events
    assert {s for (s,) in rows(stopped.db, "SELECT name FROM streams")} == {
        s for (s,) in rows(stopped.db, "SELECT name FROM streams")
        if "\x1b" not in s and len(s) < 100}


def test_fingerprints_match_exactly_per_provider_but_not_by_case(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = daemons.start()
    daemon.stop()
    db = str(daemon.db)
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    monkeypatch.setenv("OTHER_KEY", "sk-test-other-" + "3" * 20)
    other = fingerprint("sk-test-other-" + "3" * 20)
    assert run(capsys, "keys", "add", "other", "env:OTHER_KEY", "--db", db)[0] == 0
    code, out, err = run(capsys, "keys", "remove", "fake", a[:8], "--db", db)
    one_line(code, out, err, 64)  # a prefix is no fingerprint: ambiguous by design
    code, out, err = run(capsys, "keys", "remove", "fake", other, "--db", db)
    one_line(code, out, err, 1)  # another provider's key
    assert "no key" in err and "'fake'" in err
    code, out, _ = run(capsys, "keys", "reset", "fake", a.upper().replace("FP:", "fp:"),
                       "--db", db)
    assert (code, out) == (0, f"fake {a}: ok (it was)\n")  # hex case is the same key
    code, out, _ = run(capsys, "keys", "remove", "fake", f" {a.upper()} ", "--db", db)
    assert (code, out) == (0, f"fake {a}: removed\n")
    code, out, err = run(capsys, "keys", "reset", "fake", a, "--db", db)
    one_line(code, out, err, 1)
    assert "removed" in err and "keys add" in err  # says what happened and what to do
    code, out, err = run(capsys, "keys", "remove", "fake", a, "--db", db)
    one_line(code, out, err, 1)
    assert "already removed" in err


def test_the_same_key_under_another_reference_is_already_in_the_pool(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = daemons.start()
    daemon.stop()
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    monkeypatch.setenv("SAME_AS_A", daemons.key("FAKE_KEY_A"))
    code, out, _ = run(capsys, "keys", "add", "fake", "env:SAME_AS_A", "--db", str(daemon.db))
    assert code == 0 and out == f"fake {a}: already in the pool (as env:FAKE_KEY_A)\n"
    code, out, err = run(capsys, "keys", "add", "fkae", "env:SAME_AS_A", "--db", str(daemon.db))
    assert code == 0 and out == f"fkae {a} env:SAME_AS_A: added\n"  # a typo, or a keyless one
    assert err == ("sessionwarden: note: fkae had no key in the log; a daemon uses this one "
                   "only if its config has a provider named fkae\n")
    listed = json.loads(run(capsys, "keys", "list", "--json", "--db", str(daemon.db))[1])
    assert [r["ref"] for r in listed if r["fingerprint"] == a and r["provider"] == "fake"] == [
        "env:FAKE_KEY_A"]
    no_secret_beside(daemon.db, [daemons.key("FAKE_KEY_A")])


def test_the_last_key_removed_while_calls_come_then_added_back(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = daemons.start()
    db = str(daemon.db)
    a, b = (fingerprint(daemons.key(k)) for k in ("FAKE_KEY_A", "FAKE_KEY_B"))
    assert ask(daemon).http_response.status_code == 200
    for fp in (a, b):
        assert run(capsys, "keys", "remove", "fake", fp, "--db", db)[0] == 0
    time.sleep(POLLED_S)  # the pool looks for the operator's changes again
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=10,
                      headers={"authorization": f"Bearer {daemon.token}"}) as http:
        for _ in range(3):
            answer = http.post("/v1/chat/completions", json={
                "model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code in (429, 503), answer.text
            error = answer.json()["error"]
            assert "fake" in error["message"] and "Traceback" not in answer.text
            assert "keys add" in error["message"]  # what the operator can do about it
    monkeypatch.setenv("FAKE_KEY_A", daemons.key("FAKE_KEY_A"))
    code, out, _ = run(capsys, "keys", "add", "fake", "env:FAKE_KEY_A", "--db", db)
    assert (code, out) == (0, f"fake {a} env:FAKE_KEY_A: added\n")
    time.sleep(POLLED_S)
    assert ask(daemon).http_response.status_code == 200  # the pool took it back
    assert daemons.used()[-1] == "FAKE_KEY_A"
    rows = {r["fingerprint"]: r["state"] for r in json.loads(
        run(capsys, "keys", "list", "--json", "--db", db)[1])}
    assert rows == {a: "ok", b: "removed"}
    daemon.stop()
    no_secret_beside(daemon.db, [daemons.key("FAKE_KEY_A"), daemons.key("FAKE_KEY_B")])


class _Catcher:
    """A local TCP server recording what it receives; ``drip`` answers a byte at a time."""

    def __init__(self, drip: float = 0.0) -> None:
        self.received = bytearray()
        self.drip = drip
        self.stopping = False
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self.stopping:
                conn.close()
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.received += conn.recv(65536)
                    if self.drip:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n")
                        for _ in range(200):
                            time.sleep(self.drip)
                            conn.sendall(b" ")
                except OSError:
                    pass

    def close(self) -> None:
        self.stopping = True
        with socket.create_connection(("127.0.0.1", self.port)):
            pass  # wakes the accept: closing the socket under it would not
        self.server.close()
        self.thread.join(5)


@pytest.fixture
def catcher() -> Iterator[_Catcher]:
    made = _Catcher()
    try:
        yield made
    finally:
        made.close()


def announce(db: Path, url: str, pid: int | None = None) -> None:
    lock = db.with_name(db.name + ".lock")
    lock.write_text(f"{pid or os.getpid()}\n{url}\n")
    lock.chmod(0o600)


@pytest.mark.parametrize("url", [
    "http://user:pass@127.0.0.1:{port}/",
    "http://127.0.0.1:{port}@127.0.0.2:{port}",
    "http://127.0.0.1:{port}/v1?x=1",
    "http://127.0.0.1:{port}/elsewhere",
    "http://127.0.0.1:{port}#frag",
    "http://localhost.example.com:{port}",
    "http://203.0.113.7:{port}",  # TEST-NET-3: never this machine's
    "http://[2001:db8::1]:{port}",
    "http://127.0.0.1:99999",
    "http://127.0.0.1:port",
    "http://127.0.0.1",
    "http://\x1b[2J127.0.0.1:{port}",
])
def test_the_token_goes_only_to_a_plain_http_address_on_this_machine(
    tmp_path: Path, catcher: _Catcher, url: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = tmp_path / "events.db"
    announce(db, url.replace("{port}", str(catcher.port)))
    started = time.monotonic()
    found = leases_in_flight(db, {"SESSIONWARDEN_TOKEN": "swt-secret-token"})
    assert time.monotonic() - started < 0.5  # refused, not tried
    assert found.counts is None and "not a plain http:// address on this machine" in (
        found.why_unknown)
    assert b"swt-secret-token" not in catcher.received and not catcher.received
    monkeypatch.setenv("SESSIONWARDEN_TOKEN", "swt-secret-token")
    code, _, err = run(capsys, "keys", "list", "--db", str(db))
    assert code == 74 and "no event log here" in err  # the note first, then the log's error
    assert "\x1b" not in err and "swt-secret" not in err and "pass" not in err


def test_the_lock_files_own_address_is_asked(tmp_path: Path, catcher: _Catcher) -> None:
    db = tmp_path / "events.db"
    announce(db, f"http://127.0.0.1:{catcher.port}")
    found = leases_in_flight(db, {"SESSIONWARDEN_TOKEN": "swt-secret-token"})
    assert found.counts is None  # the catcher is no daemon: it says nothing
    assert catcher.received.startswith(b"GET /v1/keys HTTP/1.1\r\n")
    assert b"Bearer swt-secret-token" in catcher.received


def test_an_answer_a_byte_at_a_time_is_cut_off_at_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = _Catcher(drip=0.05)  # 200 bytes: 10 s in all, each byte well within a read's timeout
    try:
        monkeypatch.setattr(daemon_client, "TIMEOUT_S", 0.5)
        db = tmp_path / "events.db"
        announce(db, f"http://127.0.0.1:{slow.port}")
        started = time.monotonic()
        found = leases_in_flight(db, {"SESSIONWARDEN_TOKEN": "swt-secret-token"})
        assert time.monotonic() - started < 1.5
        assert found.counts is None and "did not answer" in found.why_unknown
    finally:
        slow.close()


def test_breaker_reset_while_half_open_with_a_probe_out(
    daemons: Daemons, capsys: pytest.CaptureFixture[str],
) -> None:
    daemon = daemons.start()
    db = str(daemon.db)
    daemons.steer("FAKE_KEY_A", GENUINE)
    daemons.steer("FAKE_KEY_B", GENUINE)
    with pytest.raises(Exception, match="429"):
        ask(daemon)  # both keys out for 2 h: the breaker opens
    daemons.clock.advance(2 * 3600 + 1)  # half-open: the next call is the probe
    daemons.fake.state.by_key.clear()
    with ThreadPoolExecutor(1) as pool:
        probe = pool.submit(ask, daemon, "probe", extra_body={"fake": {"delay_ms": 1500}})
        time.sleep(0.4)  # the probe is out
        code, out, _ = run(capsys, "breaker", "reset", "fake", "--db", db)
        assert (code, out) == (0, "fake: closed\n")
        time.sleep(POLLED_S)
        assert ask(daemon, "other").http_response.status_code == 200  # closed: not refused
        assert probe.result().http_response.status_code == 200
    assert ask(daemon).http_response.status_code == 200
    code, out, _ = run(capsys, "breaker", "list", "--json", "--db", db)
    assert code == 0 and [(r["provider"], r["state"]) for r in json.loads(out)] == [
        ("fake", "closed")]
    code, out, _ = run(capsys, "breaker", "reset", "fake", "--db", db)
    assert (code, out) == (0, "fake: closed (it was)\n")


def test_breaker_list_on_a_log_without_providers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "events.db"
    EventLog(db, projections=default_projections()).close()
    assert run(capsys, "breaker", "list", "--json", "--db", str(db)) == (0, "[]\n", "")
    assert run(capsys, "breaker", "list", "--db", str(db)) == (0, "no breakers recorded\n", "")
    assert run(capsys, "keys", "list", "--db", str(db)) == (0, "no keys recorded\n", "")
    code, out, err = run(capsys, "breaker", "reset", "fake", "--db", str(db))
    one_line(code, out, err, 64)


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` unwritable, even to root (who ignores modes: the immutable attribute)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o500 if path.is_dir() else 0o400)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_log_that_cannot_be_written_gets_one_line_and_loses_nothing(
    stopped: InProcessDaemon, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = stopped.db
    monkeypatch.setenv("NEW_KEY", "sk-test-new-" + "4" * 20)
    events = rows(db, "SELECT seq, type FROM events")
    with read_only(db):
        code, out, err = run(capsys, "keys", "add", "fake", "env:NEW_KEY", "--db", str(db))
        one_line(code, out, err, 74)
        assert "read-only" in err
        assert run(capsys, "keys", "list", "--db", str(db))[0] == 0  # reading still works
    for name in ("events.db-wal", "events.db-shm"):
        (db.parent / name).unlink(missing_ok=True)  # a cleanly closed log needs neither
    with read_only(db.parent):
        code, out, err = run(capsys, "keys", "add", "fake", "env:NEW_KEY", "--db", str(db))
        one_line(code, out, err, 74)
    assert rows(db, "SELECT seq, type FROM events") == events


def test_a_daemon_started_on_a_read_only_log_says_so_in_one_line(
    stopped: InProcessDaemon,
) -> None:
    # The WAL's presizing at open let SQLite's ReadOnlyError escape: "internal error", 70.
    env = clean_env() | {"SESSIONWARDEN_TOKEN": "swt-" + "5" * 32}
    for name in ("events.db-wal", "events.db-shm"):
        (stopped.db.parent / name).unlink(missing_ok=True)
    with read_only(stopped.db):
        result = subprocess.run(
            [*sessionwarden_cmd(), "daemon", "--db", str(stopped.db), "--port", "0"],
            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 74, result.stderr
    assert result.stderr.endswith(f"sessionwarden: {stopped.db}: the database is read-only\n")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_a_write_waits_for_a_daemon_busy_writing_and_loses_nothing(
    stopped: InProcessDaemon, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = stopped.db
    monkeypatch.setenv("NEW_KEY", "sk-test-new-" + "4" * 20)
    writer = apsw.Connection(str(db))
    writer.execute("BEGIN IMMEDIATE")  # a writer mid-transaction holds the write lock
    release = threading.Timer(1.0, lambda: writer.execute("COMMIT"))
    release.start()
    try:
        code, out, err = run(capsys, "keys", "add", "fake", "env:NEW_KEY", "--db", str(db))
    finally:
        release.join()
        writer.close()
    new = fingerprint("sk-test-new-" + "4" * 20)
    assert (code, out, err) == (0, f"fake {new} env:NEW_KEY: added\n", "")
    assert rows(db, "SELECT count(*) FROM view_credentials WHERE fingerprint = "
                f"'{new}'") == [(1,)]


def test_get_keys_takes_only_what_it_should(
    daemons: Daemons,
) -> None:
    daemon = daemons.start()
    a, b = (fingerprint(daemons.key(k)) for k in ("FAKE_KEY_A", "FAKE_KEY_B"))
    expected = {"keys": [{"provider": "fake", "fingerprint": fp, "in_flight": 0}
                         for fp in (a, b)]}
    auth = {"authorization": f"Bearer {daemon.token}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=10) as http:
        assert http.get("/v1/keys?x=1&keys=all", headers=auth).json() == expected
        assert http.request("GET", "/v1/keys", headers=auth, content=b"{" * 5000).json() == (
            expected)
        head = http.head("/v1/keys", headers=auth)
        assert head.status_code == 405 and head.headers["allow"] == "GET"
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            answer = http.request(method, "/v1/keys", headers=auth, content=b"x")
            assert answer.status_code == 405 and answer.headers["allow"] == "GET", method
        for headers in ({}, {"authorization": "Bearer wrong"},
                        {"authorization": f"Basic {daemon.token}"},
                        {"authorization": f"Bearer {daemon.token}x"}):
            answer = http.get("/v1/keys", headers=headers)
            assert answer.status_code == 401 and daemon.token not in answer.text
        for path in ("/v1/keys/", "/v1/keys/fake", "/v1//keys", "/V1/KEYS"):
            assert http.get(path, headers=auth).status_code == 404, path
        # Concurrent with calls: every answer is a key list, the counts never negative.
        with ThreadPoolExecutor(4) as pool:
            calls = [pool.submit(ask, daemon, f"s{i}",
                                 extra_body={"fake": {"delay_ms": 300}}) for i in range(4)]
            seen = []
            while not all(c.done() for c in calls):
                answer = http.get("/v1/keys", headers=auth)
                assert answer.status_code == 200
                seen.append(sum(k["in_flight"] for k in answer.json()["keys"]))
            assert all(c.result().http_response.status_code == 200 for c in calls)
        assert max(seen) > 0 and min(seen) >= 0
        assert http.get("/v1/keys", headers=auth).json() == expected
    secrets = [daemons.key("FAKE_KEY_A"), daemons.key("FAKE_KEY_B")]
    assert not any(s in json.dumps(seen) for s in secrets)


def test_a_configured_key_removed_by_hand_stays_out_after_a_restart(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = daemons.start()
    db = str(daemon.db)
    a, b = (fingerprint(daemons.key(k)) for k in ("FAKE_KEY_A", "FAKE_KEY_B"))
    assert run(capsys, "keys", "remove", "fake", a, "--db", db)[0] == 0  # a leaked key
    daemon.stop()
    again = daemons.start()  # its config still names FAKE_KEY_A
    for i in range(3):
        assert ask(again, f"s{i}").http_response.status_code == 200
    assert "FAKE_KEY_A" not in daemons.used()  # fill_first would have taken A first
    rows = {r["fingerprint"]: r["state"] for r in json.loads(
        run(capsys, "keys", "list", "--json", "--db", db)[1])}
    assert rows == {a: "removed", b: "ok"}
    monkeypatch.setenv("FAKE_KEY_A", daemons.key("FAKE_KEY_A"))
    assert run(capsys, "keys", "add", "fake", "env:FAKE_KEY_A", "--db", db)[0] == 0
    again.stop()
    third = daemons.start()
    ask(third)
    assert daemons.used()[-1] == "FAKE_KEY_A"  # put back by hand: in the pool again
    assert run(capsys, "keys", "remove", "fake", b, "--db", db)[0] == 0
    assert run(capsys, "keys", "remove", "fake", a, "--db", db)[0] == 0
    third.stop()
    last = daemons.start()  # every configured key removed by hand: it says so
    with httpx.Client(base_url=f"http://127.0.0.1:{last.port}", timeout=10,
                      headers={"authorization": f"Bearer {last.token}"}) as http:
        answer = http.post("/v1/chat/completions", json={
            "model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 503 and "keys add" in answer.json()["error"]["message"]
    assert "restart" not in answer.json()["error"]["message"]


@pytest.mark.parametrize("answer", [{}, TRANSIENT, REVOKED])
def test_a_key_removed_while_it_serves_a_call(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], answer: dict[str, object],
) -> None:
    daemon = daemons.start()
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    daemons.steer("FAKE_KEY_A", {**answer, "delay_ms": 1000})  # fill_first: A serves first
    with ThreadPoolExecutor(1) as pool:
        flying = pool.submit(ask, daemon, "flying")
        time.sleep(0.3)
        assert run(capsys, "keys", "remove", "fake", a, "--db", str(daemon.db))[0] == 0
        time.sleep(POLLED_S)
        assert ask(daemon, "next").http_response.status_code == 200  # the pool drops A
        # A's own call ends as its answer says: served, or failed over to B.
        assert flying.result().http_response.status_code == 200
    assert ask(daemon, "after").http_response.status_code == 200
    assert daemons.used()[1:] == ["FAKE_KEY_B"] * (len(daemons.used()) - 1)
    listed = json.loads(run(capsys, "keys", "list", "--json", "--db", str(daemon.db))[1])
    assert {r["fingerprint"]: r["state"] for r in listed}[a] == "removed"


@pytest.mark.parametrize("token", ["swt-abc\r\nX-Evil: 1", "swt-t\u00f6k\u20ac", "swt-a\x7fb"])
def test_a_token_no_header_can_carry_is_never_sent_nor_echoed(
    tmp_path: Path, catcher: _Catcher, token: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = tmp_path / "events.db"
    EventLog(db, projections=default_projections()).close()
    announce(db, f"http://127.0.0.1:{catcher.port}")
    monkeypatch.setenv("SESSIONWARDEN_TOKEN", token)
    code, out, err = run(capsys, "keys", "list", "--db", str(db))
    assert (code, out) == (0, "no keys recorded\n")
    assert err == ("sessionwarden: leases in flight unknown: the token here is not one a "
                   "daemon could have: printable ASCII only (check SESSIONWARDEN_TOKEN or the "
                   "token file)\n")
    assert not catcher.received


def test_an_internal_error_quoting_a_secret_prints_none() -> None:
    # What http.client raised for a token with a line break before the token was checked.
    bug = ValueError(f"Invalid header value b'Bearer {LITERAL}\\r\\nX: 1' (api_key={LITERAL})")
    line = internal_error(bug)
    assert LITERAL not in line and LITERAL[:12] not in line
    assert line.startswith("sessionwarden: internal error (ValueError: Invalid header value")
    assert line.endswith("; rerun with --debug for details") and "\n" not in line
