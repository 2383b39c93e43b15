"""``keys list`` shows each key's leases in flight, asked of the daemon running beside it.

A real daemon subprocess (it announces its URL in the lock file), calls held open by the
fake upstream, and ``sessionwarden keys list`` run as a separate process; then what the
command says when the daemon cannot be asked (no token here, a wrong one, a process
that is not the daemon), and when none runs (nothing is in flight).
"""

import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.daemon.client import leases_in_flight
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL, Daemon, DaemonMaker


def listed(daemon: Daemon, env: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """``keys list --json`` run beside the daemon: the rows and stderr."""
    saved = daemon.env
    daemon.env = env if env is not None else saved
    try:
        result = daemon.cli("keys", "list", "--json")
    finally:
        daemon.env = saved
    return json.loads(result.stdout), result.stderr


def in_flight(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {str(r["fingerprint"]): r["in_flight"] for r in rows}


def test_keys_list_counts_the_calls_each_key_serves_right_now(
    daemon_factory: DaemonMaker,
) -> None:
    daemon = daemon_factory().start()
    a, b = (fingerprint(daemon.keys[k]) for k in ("FAKE_KEY_A", "FAKE_KEY_B"))
    client = daemon.openai(timeout=30)

    def slow_call(i: int) -> None:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"call {i}"}],
            extra_body={"fake": {"delay_ms": 2500}})

    with ThreadPoolExecutor(3) as pool:
        calls = [pool.submit(slow_call, i) for i in range(3)]
        deadline = time.monotonic() + 10
        while True:
            rows, err = listed(daemon)
            flying = in_flight(rows)
            if sum(flying.values()) == 3 or time.monotonic() > deadline:
                break
        assert err == ""
        assert sorted(flying.values()) == [1, 2] and set(flying) == {a, b}  # round robin
        text = daemon.cli("keys", "list").stdout
        assert f"{flying[a]} in flight" in text and f"{flying[b]} in flight" in text
        for call in calls:
            call.result()
    rows, _ = listed(daemon)
    assert in_flight(rows) == {a: 0, b: 0}
    assert sum(r["calls"] for r in rows) == 3
    with httpx.Client(base_url=daemon.url(""), timeout=10) as http:
        assert http.get("/v1/keys").status_code == 401  # the token guards it as every path
        assert http.post("/v1/keys", headers=daemon.auth()).status_code == 405
        assert http.get("/v1/keys", headers=daemon.auth()).json() == {"keys": [
            {"provider": "fake", "fingerprint": fp, "in_flight": 0} for fp in (a, b)]}
    daemon.stop()
    rows, err = listed(daemon)
    assert in_flight(rows) == {a: 0, b: 0} and err == ""  # no daemon: nothing in flight


def test_without_the_daemons_token_the_leases_are_unknown_and_said_so(
    daemon_factory: DaemonMaker,
) -> None:
    daemon = daemon_factory().start()
    no_token = {k: v for k, v in daemon.env.items() if k != "SESSIONWARDEN_TOKEN"}
    rows, err = listed(daemon, no_token)
    assert rows and all(r["in_flight"] is None for r in rows)
    assert daemon.proc is not None
    assert err == (f"sessionwarden: leases in flight unknown: the daemon (pid {daemon.proc.pid})"
                   " runs, but its token is not readable here (set SESSIONWARDEN_TOKEN)\n")
    wrong = {**daemon.env, "SESSIONWARDEN_TOKEN": "swt-not-the-daemons"}
    rows, err = listed(daemon, wrong)
    assert all(r["in_flight"] is None for r in rows)
    assert err.endswith("answered 401: the token here is not the daemon's\n")
    assert "swt-not-the-daemons" not in err and daemon.token not in err
    daemon.env = wrong
    text = daemon.cli("keys", "list").stdout  # the text form says "?"
    assert "0 calls, ? in flight" in text


class _NotTheDaemon(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html>some other program</html>")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_program() -> Iterator[int]:
    """A local HTTP server that is not a sessionwarden daemon; yields its port."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotTheDaemon)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_address_that_is_not_the_daemon_gives_unknown_never_a_crash(
    tmp_path: Path, other_program: int
) -> None:
    db = tmp_path / "events.db"
    lock = db.with_name("events.db.lock")
    env = {"SESSIONWARDEN_TOKEN": "swt-test"}
    lock.write_text(f"{os.getpid()}\nhttp://127.0.0.1:{other_program}\n")
    found = leases_in_flight(db, env)
    assert found.counts is None
    assert found.why_unknown == (f"the daemon (pid {os.getpid()}) answered something that "
                                 "is not its key list")
    lock.write_text(f"{os.getpid()}\nhttp://127.0.0.1:1\n")
    found = leases_in_flight(db, env)
    assert found.counts is None and "did not answer at http://127.0.0.1:1" in found.why_unknown
    lock.write_text("99999999\nhttp://127.0.0.1:1\n")  # a SIGKILLed daemon's leftover
    assert leases_in_flight(db, env).counts == {}
