"""The daemon's runtime and HTTP app served in this process, for tests that reach its actors.

Everything is real — the event log on a file, the supervised actors, the raw ASGI app
under uvicorn on 127.0.0.1, the upstream client — only in one process, so a test can stop
or crash an actor mid-call and see what a client gets. :meth:`InProcessDaemon.stop` stops
the server, then the actors and the log; the fixture always calls it.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn
from sessionwarden.clock import Clock
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.daemon.server import DaemonApp
from sessionwarden.cmd.daemon.start import _Lifespan
from sessionwarden.config import parse_config
from sessionwarden.domain.admission.pipeline import Pipeline

from tests.cmd.daemon_fixtures import config_text
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer, QuickServer


class InProcessDaemon:
    """A :class:`Runtime` and its :class:`DaemonApp` on a free loopback port."""

    def __init__(self, db: Path, fake: FakeProviderServer, extra_config: str = "",
                 pipeline: Pipeline | None = None, clock: Clock | None = None,
                 max_body_bytes: int = 1 << 20, runtime: dict[str, Any] | None = None) -> None:
        self.db = db
        self.runtime_options = dict(runtime or {})
        self.max_body_bytes = max_body_bytes
        self.pipeline = pipeline
        self.clock = clock
        self.keys = {"FAKE_KEY_A": "sk-test-a-" + secrets.token_hex(8),
                     "FAKE_KEY_B": "sk-test-b-" + secrets.token_hex(8)}
        self.config = parse_config(config_text(fake.base_url, list(self.keys),
                                               extra=extra_config))
        self.token = "swt-" + secrets.token_hex(16)
        self.rt: Runtime | None = None
        self.app: DaemonApp
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> InProcessDaemon:
        """Start the runtime (orphans completed), then serve until :meth:`stop`."""
        self.rt = Runtime(self.config, self.db, self.keys, pipeline=self.pipeline,
                          clock=self.clock, **self.runtime_options)
        self.rt.start()
        app = self.app = DaemonApp(self.rt, self.token, max_body_bytes=self.max_body_bytes)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._server = QuickServer(uvicorn.Config(
            _Lifespan(app), lifespan="on", log_config=None, access_log=False,
            timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="sw-test-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "server start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving, then the actors and the log (idempotent)."""
        if self._server is not None and self._thread is not None:
            self.app.page.close()  # as the daemon's stop signal does (``start._Server``)
            self._server.should_exit = True
            self._thread.join(15)
            self._server = None
        if self.rt is not None:
            self.rt.stop()
            self.rt = None

    @property
    def runtime(self) -> Runtime:
        assert self.rt is not None
        return self.rt

    def openai(self, session: str | None = None, **kwargs: Any) -> openai.OpenAI:
        """An SDK client on the daemon (no retries)."""
        headers = {"X-Session-Id": session} if session else None
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=self.token,
                             max_retries=0, default_headers=headers, **kwargs)

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` from the live log."""
        return [tuple(r) for r in self.runtime.log.read_connection().execute(sql, args)]

    def types(self, stream: str) -> list[str]:
        """The event types of ``stream``."""
        return [e.type for e in self.runtime.log.read_stream(stream)]


@pytest.fixture
def inprocess(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    """A started in-process daemon against ``fake``; always stopped at teardown."""
    daemon = InProcessDaemon(tmp_path / "events.db", fake)
    try:
        yield daemon.start()
    finally:
        daemon.stop()


@pytest.fixture
def made() -> Iterator[list[InProcessDaemon]]:
    """Daemons a test starts with :func:`start_made`; every one is stopped at teardown."""
    daemons: list[InProcessDaemon] = []
    try:
        yield daemons
    finally:
        for daemon in daemons:
            daemon.stop()


def start_made(made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
               extra: str, **keys: str) -> InProcessDaemon:
    """A daemon on ``tmp_path``'s log with ``extra`` config and ``keys`` added, started on a
    fake clock (2026-12-02 12:00 UTC) and stopped at the test's end."""
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra,
                             clock=FakeClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC)))
    daemon.keys.update(keys)
    made.append(daemon)
    return daemon.start()


def nothing_open(daemon: InProcessDaemon) -> None:
    """No call is left open and the log verifies (the daemon may still run)."""
    assert daemon.rows("SELECT call_id FROM view_calls_open") == []
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
