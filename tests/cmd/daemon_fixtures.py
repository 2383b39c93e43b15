"""Fixtures for end-to-end tests of ``sessionwarden daemon`` as a real subprocess.

The upstream is :class:`~tests.support.fake_provider.FakeProviderServer`, run in-process so
tests can read what it received: one per test process, its state reset for each test.
Every daemon a test starts is stopped at teardown (SIGTERM, then SIGKILL if it lingers),
whether the test passed or not. Registered as a plugin by ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import httpx
import msgspec
import openai
import pytest
from sessionwarden.clock import OFFSET_ENV

from tests.support.fake_provider import FakeProviderServer

_BIN = Path(sys.executable).with_name("sessionwarden")
_LISTENING = re.compile(r"sessionwarden listening on http://127\.0\.0\.1:(\d+)/v1")
MODEL = "gpt-test"
COMPLETED_TYPE = "session.call_completed.v4"
ADMITTED_TYPE = "session.call_admitted.v5"


def sessionwarden_cmd() -> list[str]:
    """The command that runs the CLI from this virtualenv."""
    if _BIN.exists():
        return [str(_BIN)]
    return [sys.executable, "-m", "sessionwarden.cmd.cli.main"]


#: The retry backoff's base in the tests' daemons (the default is 1 s).
FAST_RETRIES = "retry_base_s = 0.05\n"


def config_text(base_url: str, key_vars: Sequence[str], *, extra: str = "",
                strategy: str = "round_robin") -> str:
    """A TOML config with one provider ``fake`` and one model ``gpt-test``.

    Retries wait a twentieth of the default backoff: the tests of retries check that they
    happen and how often, not how long the daemon sleeps (``[daemon] retry_base_s``).
    """
    keys = ", ".join(f'"env:{name}"' for name in key_vars)
    if "[daemon]\n" in extra:
        extra = extra.replace("[daemon]\n", "[daemon]\n" + FAST_RETRIES, 1)
    elif "[daemon]" not in extra:
        extra = "[daemon]\n" + FAST_RETRIES + extra
    return (
        f"{extra}\n"
        "[[providers]]\n"
        'name = "fake"\n'
        f'base_url = "{base_url}"\n'
        f"keys = [{keys}]\n"
        f'strategy = "{strategy}"\n'
        "[[models]]\n"
        f'name = "{MODEL}"\n'
        'provider = "fake"\n'
        "context_length = 128000\n"
    )


def clean_env() -> dict[str, str]:
    """The test process's environment without any sessionwarden or provider settings.

    ``SESSIONWARDEN_CLOCK_OFFSET`` stays: a run of the suite a year ahead shifts its
    daemons' clocks too.
    """
    drop = ("SESSIONWARDEN_", "OPENAI_", "ANTHROPIC_", "OPENROUTER_", "FAKE_KEY")
    return {k: v for k, v in os.environ.items()
            if not k.startswith(drop) or k == OFFSET_ENV}


class Daemon:
    """One ``sessionwarden daemon`` subprocess on a database; restartable."""

    def __init__(self, workdir: Path, db: Path, config: Path, env: dict[str, str],
                 token: str, keys: dict[str, str], args: Sequence[str] = ()) -> None:
        self.workdir, self.db, self.config, self.env, self.token = workdir, db, config, env, token
        self.keys = keys
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.runs = 0
        self.stdout_path = self.stderr_path = workdir / "unset"

    # -- lifecycle -------------------------------------------------------------------

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to listen."""
        self.runs += 1
        self.stdout_path = self.workdir / f"daemon-{self.runs}.out"
        self.stderr_path = self.workdir / f"daemon-{self.runs}.err"
        cmd = [*sessionwarden_cmd(), "daemon", "--config", str(self.config), "--db",
               str(self.db), "--port", "0", *self.args]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir)
        return self.proc

    def start(self, timeout: float = 20.0) -> Daemon:
        """Start and wait for the ``listening`` line; fail with the daemon's stderr."""
        proc = self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.stderr())
            if match:
                self.port = int(match.group(1))
                self._wait_healthy(deadline)
                return self
            if proc.poll() is not None:
                pytest.fail(f"daemon exited {proc.returncode} at start:\n{self.stderr()}")
            time.sleep(0.02)
        self.kill()
        pytest.fail(f"daemon did not start within {timeout} s:\n{self.stderr()}")

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url("/healthz"), timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        pytest.fail(f"daemon never answered /healthz:\n{self.stderr()}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; SIGKILL (and fail) if it does not exit in time."""
        proc = self.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                pytest.fail(f"daemon ignored SIGTERM for {timeout} s:\n{self.stderr()}")
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL (if still running) and reap."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def cleanup(self) -> None:
        """Teardown: stop gently, then by force."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    # -- clients ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the running daemon."""
        return f"http://127.0.0.1:{self.port}/v1"

    def url(self, path: str) -> str:
        """An absolute URL on the daemon."""
        return f"http://127.0.0.1:{self.port}{path}"

    def auth(self) -> dict[str, str]:
        """The bearer header clients send."""
        return {"Authorization": f"Bearer {self.token}"}

    def openai(self, session: str | None = None, **kwargs: Any) -> openai.OpenAI:
        """An SDK client on the daemon (no retries); ``session`` sets X-Session-Id."""
        headers = {"X-Session-Id": session} if session else None
        return openai.OpenAI(base_url=self.base_url, api_key=self.token, max_retries=0,
                             default_headers=headers, **kwargs)

    def http(self, **kwargs: Any) -> httpx.Client:
        """A raw httpx client on the daemon, authenticated."""
        kwargs.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url(""), headers=self.auth(), **kwargs)

    # -- output and state ------------------------------------------------------------

    def stderr(self) -> str:
        """The current run's stderr so far."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def outputs(self) -> list[Path]:
        """Every stdout/stderr file of every run."""
        return sorted(self.workdir.glob("daemon-*.out")) + sorted(
            self.workdir.glob("daemon-*.err"))

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run another ``sessionwarden`` command on this database."""
        result = subprocess.run(
            [*sessionwarden_cmd(), *args, "--db", str(self.db)], env=self.env,
            capture_output=True, text=True, timeout=60, cwd=self.workdir,
        )
        if check:
            assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
        return result

    def replay_verify(self) -> dict[str, Any]:
        """``replay --verify --json``, asserting it passes."""
        result = self.cli("replay", "--verify", "--json")
        report: dict[str, Any] = json.loads(result.stdout)
        assert report["ok"] is True, report
        return report

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` on a read-only connection to the database."""
        return query_db(self.db, sql, args)

    def ledger(self) -> dict[str, dict[str, Any]]:
        """``view_ledger`` by call id."""
        return ledger_rows(self.db)

    def completions(self) -> list[dict[str, Any]]:
        """Every call's completion, oldest first (see :func:`completions`)."""
        return completions(self.db)


def query_db(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` on a read-only apsw connection."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        return [tuple(row) for row in conn.execute(sql, args)]
    finally:
        conn.close()


def ledger_rows(db: Path) -> dict[str, dict[str, Any]]:
    """``view_ledger`` as ``{call_id: row}``."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        with conn:  # one read transaction for both statements
            names = [r[1] for r in conn.execute("PRAGMA table_info(view_ledger)")]
            rows = [dict(zip(names, row, strict=True))
                    for row in conn.execute("SELECT * FROM view_ledger ORDER BY seq")]
    finally:
        conn.close()
    return {row["call_id"]: row for row in rows}


def completions(db: Path) -> list[dict[str, Any]]:
    """Decoded ``session.call_completed.v4`` events, oldest first, every field present.

    Each also has ``session_id`` (its stream's) and ``stream`` (from its admission), which
    the events themselves do not repeat.
    """
    from sessionwarden.events import CODEC

    rows = query_db(db, "SELECT type, stream, data FROM events WHERE type IN (?, ?)"
                        " ORDER BY seq", (ADMITTED_TYPE, COMPLETED_TYPE))
    streamed: dict[str, bool] = {}
    found = []
    for kind, stream, data in rows:
        event = msgspec.structs.asdict(CODEC.decode(kind, bytes(data)))
        if kind == ADMITTED_TYPE:
            streamed[event["call_id"]] = event["stream"]
            continue
        found.append({**event, "session_id": stream.removeprefix("session-"),
                      "stream": streamed.get(event["call_id"])})
    return found


class DaemonMaker:
    """Builds (not starts) daemons under ``base``; :meth:`cleanup` stops every one.

    ``make(keys=..., extra_config=..., args=..., db=..., token=...)``: ``keys`` maps the
    environment variables named in the config to their secret values (default: two
    random test keys, ``FAKE_KEY_A`` and ``FAKE_KEY_B``).
    """

    def __init__(self, base: Path, fake: FakeProviderServer) -> None:
        self.base, self.fake = base, fake
        self.made: list[Daemon] = []

    def __call__(self, *, keys: dict[str, str] | None = None, extra_config: str = "",
                 args: Sequence[str] = (), db: Path | None = None, token: str | None = None,
                 name: str = "run", strategy: str = "round_robin") -> Daemon:
        workdir = self.base / f"{name}-{len(self.made)}"
        workdir.mkdir()
        keys = keys if keys is not None else {
            "FAKE_KEY_A": "sk-test-a-" + secrets.token_hex(8),
            "FAKE_KEY_B": "sk-test-b-" + secrets.token_hex(8),
        }
        config = workdir / "config.toml"
        config.write_text(config_text(self.fake.base_url, list(keys), extra=extra_config,
                                      strategy=strategy))
        token = token or "swt-" + secrets.token_hex(16)
        env = clean_env() | keys | {"SESSIONWARDEN_TOKEN": token}
        if db is None:  # an explicit --db needs its directory: the default one is made here
            db = self.base / "db" / "events.db"
            db.parent.mkdir(mode=0o700, exist_ok=True)
        daemon = Daemon(workdir, db, config, env, token, keys, args)
        self.made.append(daemon)
        return daemon

    def cleanup(self) -> None:
        """Stop every daemon still running: SIGTERM, then SIGKILL."""
        for daemon in self.made:
            daemon.cleanup()


@contextmanager
def module_daemon(base: Path, **options: Any) -> Iterator[tuple[Daemon, FakeProviderServer]]:
    """A fake upstream and a daemon (``DaemonMaker`` ``options``) for a module to share.

    For tests that read back only their own calls and leave every key healthy; the
    daemon must still stop cleanly at the end (SIGTERM, else SIGKILL in any case).
    """
    with FakeProviderServer() as server:
        maker = DaemonMaker(base, server)
        try:
            daemon = maker(**options).start()
            yield daemon, server
            assert daemon.stop() == 0
        finally:
            maker.cleanup()


def still_running(shared: tuple[Daemon, FakeProviderServer]) -> Daemon:
    """The shared daemon, asserted alive."""
    daemon = shared[0]
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.stderr()
    return daemon


DaemonFactory = DaemonMaker


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeProviderServer]:
    """One in-process fake provider for the test process (each xdist worker has its own),
    stopped at the end: stopping uvicorn takes some 0.15 s, which every test paid."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeProviderServer) -> FakeProviderServer:
    """The fake provider as new: nothing recorded, nothing steered (see ``reset``).

    Every daemon a test starts is stopped at its teardown, so no request of an earlier
    test reaches a later one; a stream an earlier test left hung ends with its connection.
    """
    fake_server.state.reset()
    return fake_server


@pytest.fixture
def daemon_factory(tmp_path: Path, fake: FakeProviderServer) -> Iterator[DaemonMaker]:
    """Build daemons on ``tmp_path`` against ``fake``; every one is stopped at teardown."""
    maker = DaemonMaker(tmp_path, fake)
    try:
        yield maker
    finally:
        maker.cleanup()


@pytest.fixture
def daemon(daemon_factory: DaemonMaker) -> Daemon:
    """A running daemon with two keys (A, B) on a fresh database."""
    return daemon_factory().start()


def chat_body(content: str = "hello there", **extra: Any) -> dict[str, Any]:
    """A minimal chat-completions body for the configured model."""
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}
