"""``sessionwarden daemon`` and ``sessionwarden ui``; the daemon itself loads only when it runs.

``ui [--no-browser]`` signs a browser in to the running daemon's live page: it asks the
daemon holding ``--db`` for a one-time link (``cmd/daemon/client.sign_in_link``), prints
it, and opens it unless ``--no-browser`` is given or this machine shows no browser (a
Linux session without ``$DISPLAY`` or ``$WAYLAND_DISPLAY``: a console browser would take
over the terminal). The link signs in once, within two minutes; it never holds the token.

The daemon's modules (uvicorn, aiohttp, the actors) take about 0.4 s to import here, more
than every other command needs in all: registering the command must not cost the CLI's
read-only commands (``usage``, ``status``, ``events``, ``replay``) that import, so
:mod:`sessionwarden.cmd.daemon.start` is imported by the command's ``run``, not here.
"""

import argparse
import os
import sys
import webbrowser
from pathlib import Path

__all__ = ["add_daemon_command", "add_ui_command"]


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


def add_ui_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``ui`` on the CLI's subparsers."""
    p = sub.add_parser("ui", help="open the running daemon's live page, signed in")
    p.add_argument("--no-browser", action="store_true",
                   help="print the one-time link only; do not open a browser")
    p.set_defaults(run=_run_ui)


def _can_open_browser() -> bool:
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _run_ui(args: argparse.Namespace, db: Path) -> int:
    from sessionwarden.cmd.daemon.client import sign_in_link

    link, expires = sign_in_link(db)
    print(link)
    print(f"signs in once, until {expires[11:19]} UTC", file=sys.stderr)
    if not args.no_browser and _can_open_browser():
        try:
            webbrowser.open(link)
        except webbrowser.Error:
            pass  # the link is printed: open it by hand
    return 0
