"""``sessionwarden daemon``'s arguments; the daemon itself loads only when it runs.

The daemon's modules (uvicorn, aiohttp, the actors) take about 0.4 s to import here, more
than every other command needs in all: registering the command must not cost the CLI's
read-only commands (``usage``, ``status``, ``events``, ``replay``) that import, so
:mod:`sessionwarden.cmd.daemon.start` is imported by the command's ``run``, not here.
"""

import argparse
from pathlib import Path

__all__ = ["add_daemon_command"]


def add_daemon_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``daemon`` on the CLI's subparsers."""
    p = sub.add_parser("daemon", help="run the proxy until SIGINT/SIGTERM")
    p.add_argument("--config", type=Path, default=None,
                   help="TOML config (default: $SESSIONWARDEN_CONFIG, else the environment)")
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8787; 0 picks one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow binding a non-loopback address (clients still need the token)")
    p.add_argument("--log-json", action="store_true", help="log JSON lines")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace, db: Path) -> int:
    from sessionwarden.cmd.daemon.start import run_daemon

    return run_daemon(args, db)
