"""``sessionwarden daemon``: run the actors and the OpenAI-compatible proxy until signalled.

Start-up order: configuration (a bad file exits 78 naming the key), the database's
single-instance lock (a second daemon on the same database exits 74 at once and leaves
the first untouched), the listening socket (bound before anything else starts, so a port
in use is a one-line error, exit 69), the actors (each recovers from the log), then the
server.

SIGINT/SIGTERM stop accepting, let in-flight requests finish (bounded), stop the
actors in reverse order, run a TRUNCATE checkpoint, release the lock and exit 0. Every
exit after the lock was claimed, a failed start included, releases it, which removes
``<db>.lock``; only a killed daemon leaves the file, and the next claim takes it over.
"""

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from loguru import logger
from sessionwarden.cmd.daemon.config import load_config
from sessionwarden.cmd.daemon.credit_poll import BalancePoller
from sessionwarden.cmd.daemon.http import ASGIReceive, ASGISend
from sessionwarden.cmd.daemon.logs import setup_logging
from sessionwarden.cmd.daemon.private import (
    TOKEN_ENV,
    read_private_file,
    token_directory,
    token_file,
)
from sessionwarden.cmd.daemon.protocol import bounded_head_protocol
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.daemon.server import LOOPBACK_NAMES, DaemonApp
from sessionwarden.cmd.errors import CommandError, ListenError, UsageError
from sessionwarden.config import Config
from sessionwarden.domain.context.spill import oversized_limits
from sessionwarden.domain.context.trigger import DEFAULT_CONTEXT_LENGTH
from sessionwarden.store import InstanceLock

__all__ = ["load_token", "run_daemon"]

_GRACE_S = 30


def load_token(db: Path, environ: dict[str, str]) -> tuple[str, Path | None]:
    """The clients' bearer token: ``$SESSIONWARDEN_TOKEN``, else a 0600 file by the db.

    The file and its directory are checked as ``cmd/daemon/private.py`` says: tightened with a
    warning when they are open to others, refused (exit 74) when they cannot be.
    """
    explicit = environ.get(TOKEN_ENV, "").strip()
    if explicit:
        return explicit, None
    path = token_file(db)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token_directory(path.parent, _warn)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        token = read_private_file(path, _warn, what="the token file").strip()
        if not token:
            raise CommandError(f"{path}: the token file is empty; delete it") from None
        return token, path
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        token = secrets.token_urlsafe(32)
        file.write(token + "\n")
    return token, path


def _reachable(host: str) -> str:
    """The host part of a URL that reaches a daemon bound to ``host`` from this machine."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _warn(message: str) -> None:
    logger.warning("{}", message)


class _Server(uvicorn.Server):
    """uvicorn re-raises the stop signal after shutdown; a clean stop here exits 0."""

    #: Called at the first stop signal: the live page's event streams end within a
    #: second, rather than holding the stop for the whole grace period.
    on_exit: Callable[[], None] = staticmethod(lambda: None)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_exit()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


#: How long a stop lets the compactions being prepared ahead land.
PREPARATION_GRACE_S = 5.0


class _Lifespan:
    """Starts and stops the loop work: price listings, the balance poller, the upstream client."""

    def __init__(self, app: DaemonApp) -> None:
        self.app = app
        self.poller = BalancePoller(app.runtime)
        self._polling: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.app.runtime.astart()
                if self.poller.targets:
                    self._polling = asyncio.create_task(self.poller.run(), name="credit-poll")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._polling is not None:
                    self._polling.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._polling
                # A preparation in flight has its summary paid for: it may land for a
                # few seconds; past that it is cancelled (its side call completes its
                # record on the way out) and the next call past the mark prepares again.
                preparing = list(self.app.runtime.preparations.values())
                if preparing:
                    await asyncio.wait(preparing, timeout=PREPARATION_GRACE_S)
                for task in preparing:
                    task.cancel()
                await asyncio.gather(*preparing, return_exceptions=True)
                await self.app.runtime.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def model_windows(config: Config) -> dict[str, int]:
    """Each ``[[models]]`` entry's window in tokens, and the one assumed for the others."""
    windows = {m.name: m.context_length or DEFAULT_CONTEXT_LENGTH for m in config.models}
    return windows | {"models without a [[models]] entry": DEFAULT_CONTEXT_LENGTH}


def run_daemon(args: argparse.Namespace, db: Path) -> int:
    """Run the daemon until SIGINT/SIGTERM; return 0 after a clean shutdown."""
    environ = dict(os.environ)
    config = load_config(args.config, environ)
    host = args.host or config.daemon.host
    port = config.daemon.port if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0-65535, not {port}")
    remote = host not in LOOPBACK_NAMES
    if remote and not args.allow_remote:
        raise UsageError(f"refusing to bind {host}: not a loopback address (pass --allow-remote)")
    setup_logging(json=args.log_json, level=args.log_level.upper())
    lock = InstanceLock(db)
    try:
        token, token_path = load_token(db, environ)
        sock = _bind(host, port)
        port = sock.getsockname()[1]
        runtime = Runtime(config, db, environ, clock=args.clock)
        try:
            runtime.start()
            hosts = LOOPBACK_NAMES | {host.lower()} if remote else LOOPBACK_NAMES
            app = DaemonApp(runtime, token, max_body_bytes=config.daemon.max_body_mib << 20,
                            allowed_hosts=hosts)
            server = _Server(uvicorn.Config(
                _Lifespan(app), lifespan="on", log_config=None, access_log=False,
                timeout_graceful_shutdown=_GRACE_S, server_header=False,
                # No proxy in front of a loopback daemon: X-Forwarded-* would only be
                # believed from a client, and the middleware cost ~15 % of a call's CPU.
                proxy_headers=False,
                http=bounded_head_protocol(config.daemon.max_header_kib << 10),
            ))
            server.on_exit = app.page.close
            if all(p.simulated for p in config.usable_providers):
                logger.warning("no real providers configured, only the offline simulated "
                               "one (models sim/<name>): set OPENAI_API_KEY, "
                               "ANTHROPIC_API_KEY or OPENROUTER_API_KEY, or pass --config")
            for warning in oversized_limits(config.tools, model_windows(config)):
                logger.warning("{}", warning)
            if remote:
                logger.warning("listening on non-loopback {}: anyone who can reach it and "
                               "holds the token can spend your keys", host)
            shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
            logger.info("sessionwarden listening on http://{}:{}/v1 (db {})", shown, port, db)
            source = f"file {token_path}" if token_path else f"${TOKEN_ENV}"
            logger.info("clients authenticate with the bearer token from {}", source)
            # Where a command beside the daemon (``keys list``) asks what only its memory
            # holds; announced once the actors run, so it is asked of a daemon that serves.
            lock.announce(f"http://{_reachable(host)}:{port}")
            server.run(sockets=[sock])
        finally:
            logger.info("stopping actors and flushing the log")
            runtime.stop()
    finally:
        lock.release()
    logger.info("stopped cleanly")
    logger.complete()
    return 0
