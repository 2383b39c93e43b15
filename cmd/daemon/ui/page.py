"""``/ui``: the live page's routes — the page, its reads, its event stream, its sign-in.

Every route here answers GET (or HEAD) only: the page changes nothing. Routes (after the
Host check every path passes, ``cmd/daemon/server.py``):

- ``POST /v1/ui/codes``, with the daemon's token (``sessionwarden ui`` sends it): a new
  one-time code, as ``{"path": "/ui/signin?code=…", "expires_at"}``.
- ``GET /ui/signin?code=…``: spends a one-time code (``signin.py``), sets the cookie and
  redirects (303) to ``/ui``; a used, unknown or expired code gets 403 and a page saying
  to run ``sessionwarden ui`` again.
- ``GET /ui/app.js``, ``/ui/app.css``, ``/ui/favicon.svg``: the page's script, style and
  icon, from the package (nothing is ever loaded from elsewhere); open, they hold nothing
  of the log.
- With the cookie: ``GET /ui`` (the page), ``/ui/api/board`` (sessions, keys, breakers,
  spend by day: ``views/board.py``), ``/ui/api/sessions/{id}[?after=V]`` (its
  timeline, or what came after stream version V: ``views/timeline.py``),
  ``/ui/api/replay/{session}/{call}`` (the call's request, as ``replay --call --json``
  prints it), ``/ui/events`` (server-sent events: ``board`` with the board's JSON
  whenever the log has grown, at most once a second). Without it, 401 and a page saying
  how to sign in.

What the page shows passes the redactor (as ``replay`` does). Every answer carries a
strict Content-Security-Policy (``default-src 'none'``; script,
style, images and connections from the daemon only; no frames, forms or base URL),
``nosniff``, ``no-referrer`` and ``no-store``. The reads run in worker threads: the
event loop never waits on SQLite; one board fold serves every page open.
"""

import asyncio
import time
from collections.abc import MutableMapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import msgspec
from sessionwarden.cmd.daemon.control import SESSION_ID
from sessionwarden.cmd.daemon.http import (
    ASGIReceive,
    ASGISend,
    header_map,
    send_error,
    send_json,
)
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.daemon.ui.signin import SignIn
from sessionwarden.errors import SessionwardenError
from sessionwarden.redact import default_redactor
from sessionwarden.text import printable
from sessionwarden.views.board import LiveBoard
from sessionwarden.views.ledger_rollup import spend_by_day
from sessionwarden.views.sent_requests import rebuild, render_json
from sessionwarden.views.timeline import MAX_ENTRIES, read_timeline

__all__ = ["CODES_PATH", "UI_PREFIX", "Page"]

#: Every path of the page starts so.
UI_PREFIX = "/ui"
#: Where ``sessionwarden ui``, with the daemon's token, asks for a one-time code.
CODES_PATH = "/v1/ui/codes"
#: How often an open event stream looks at the log's commits, in seconds.
_TICK_S = 1.0
#: A comment line keeps an idle stream open through proxies, this often.
_KEEPALIVE_S = 15.0
#: An event stream ends after this long; the browser reconnects at once (bounds a stop).
_STREAM_S = 300.0
#: A request replayed in the page is cut after this many bytes.
_MAX_REPLAY = 1 << 20
_CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY = [(b"content-security-policy", _CSP), (b"x-content-type-options", b"nosniff"),
             (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-store"),
             (b"x-frame-options", b"DENY")]
_STATIC = {name: resources.files(__package__).joinpath("static", name).read_bytes()
           for name in ("index.html", "app.js", "app.css", "favicon.svg")}
_TYPES = {"html": b"text/html; charset=utf-8", "js": b"text/javascript; charset=utf-8",
          "css": b"text/css; charset=utf-8", "svg": b"image/svg+xml", "json": b"application/json",
          "text": b"text/plain; charset=utf-8"}
_encode = msgspec.json.Encoder().encode


def _notice(title: str, text: str) -> bytes:
    """A small page of its own (no script), for a refused sign-in or a missing cookie."""
    return (f"<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport "
            f"content='width=device-width'><title>{title}</title><link rel=stylesheet "
            f"href=/ui/app.css><main class=notice><h1>{title}</h1><p>{text}</p></main>"
            ).encode()


_SIGN_IN = _notice("Sign in to sessionwarden", "Run <code>sessionwarden ui</code> on this "
                   "machine: it opens this page signed in.")
_SPENT = _notice("This sign-in link is spent", "A link signs in once, within two minutes. "
                 "Run <code>sessionwarden ui</code> again for a new one.")


class Page:
    """The page's routes, its sign-in, and the board every open page shares."""

    def __init__(self, runtime: Runtime, token: str) -> None:
        """Serve the page of ``runtime``'s log; codes and cookies keyed by ``token``."""
        self.rt = runtime
        self.signin = SignIn(token, runtime.clock)
        self._board = LiveBoard(runtime.log, runtime.config.budgets.session_usd)
        self._commits = 0
        self._seen = -1
        #: The board stopped short of the log's head (a long log's first page): folded
        #: again at the next tick even with no new commit, until it is caught up.
        self._behind = False
        self._snapshot = b""
        self._lock = asyncio.Lock()
        #: Set when the daemon stops: open event streams end within a tick.
        self.closing = False
        #: How often an open event stream looks for new commits, in seconds.
        self.tick_s = _TICK_S
        runtime.log.add_commit_listener(self._committed)

    def close(self) -> None:
        """The daemon stops: open event streams end at their next tick."""
        self.closing = True

    def _committed(self, events: int) -> None:
        # The writer's thread, after each commit: one integer, so an open page costs
        # the call path nothing more; the stream reads it at its next tick.
        self._commits += 1

    async def serve(self, scope: MutableMapping[str, Any], receive: ASGIReceive,
                    send: ASGISend) -> None:
        """Answer a request whose path starts with :data:`UI_PREFIX` (Host already checked)."""
        path, method = scope["path"], scope["method"]
        if method not in ("GET", "HEAD"):
            await _send(send, 405, "text", b"the page only reads: use GET",
                        [(b"allow", b"GET, HEAD")])
            return
        if method == "HEAD":
            send = _headless(send)
        if path in ("/ui/app.js", "/ui/app.css", "/ui/favicon.svg"):
            await _send(send, 200, path.rsplit(".", 1)[1], _STATIC[path[4:]])
            return
        if path == "/ui/signin":
            await self._sign_in(scope, send)
            return
        if not self._signed_in(scope):
            await _send(send, 401, "html", _SIGN_IN)
            return
        if path in ("/ui", "/ui/"):
            await _send(send, 200, "html", _STATIC["index.html"])
        elif path == "/ui/api/board":
            await _send(send, 200, "json", await self.board())
        elif path == "/ui/events" and method == "GET":
            await self._events(receive, send)
        elif path.startswith("/ui/api/sessions/"):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            after = query.get("after", ["0"])[0]
            await self._timeline(path[len("/ui/api/sessions/"):],
                                 int(after) if after.isdigit() and len(after) < 16 else 0,
                                 send)
        elif path.startswith("/ui/api/replay/"):
            session, _, call = path[len("/ui/api/replay/"):].rpartition("/")
            await self._replay(session, call, send)
        else:
            await _send(send, 404, "text", b"no such page")

    async def issue_code(self, method: str, send: ASGISend) -> None:
        """Answer ``POST`` :data:`CODES_PATH` (already authorised): a new one-time code."""
        if method != "POST":
            await send_error(send, 405, "use POST", headers=[(b"allow", b"POST")])
            return
        code, expires = self.signin.issue()
        await send_json(send, 200, {"path": f"/ui/signin?code={code}",
                                    "expires_at": expires.isoformat()})

    def _cookie_name(self, scope: MutableMapping[str, Any]) -> str:
        server = scope.get("server") or (None, None)
        return self.signin.cookie_name(server[1])

    def _signed_in(self, scope: MutableMapping[str, Any]) -> bool:
        cookies = header_map(scope["headers"]).get("cookie", "")
        wanted = self._cookie_name(scope)
        for part in cookies.split(";"):
            name, _, value = part.strip().partition("=")
            if name == wanted and self.signin.valid(value):
                return True
        return False

    async def _sign_in(self, scope: MutableMapping[str, Any], send: ASGISend) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        cookie = self.signin.redeem(query.get("code", [""])[0])
        if cookie is None:
            await _send(send, 403, "html", _SPENT)
            return
        await _send(send, 303, "text", b"signed in", [
            (b"location", b"/ui"),
            (b"set-cookie", f"{self._cookie_name(scope)}={cookie}; Max-Age="
                            f"{self.signin.max_age()}; Path=/ui; HttpOnly; "
                            "SameSite=Strict".encode())])

    async def board(self) -> bytes:
        """The board's JSON, folded again only if the log grew since the last one."""
        async with self._lock:  # every open page shares one fold
            if self._commits != self._seen or self._behind or not self._snapshot:
                self._seen = self._commits
                self._snapshot = await asyncio.to_thread(self._read_board)
            return self._snapshot

    def _read_board(self) -> bytes:
        now = self.rt.clock.now()
        board = self._board.snapshot(now)
        self._behind = not board["caught_up"]
        board["days"] = spend_by_day(self.rt.log.read_connection(), now.date())
        for provider in self.rt.config.usable_providers:  # a provider with no key yet too
            entry = board["providers"].setdefault(provider.name, {"keys": [], "breaker": None})
            entry["simulated"] = provider.simulated
        board["now"] = now.isoformat()
        return _redacted(board)

    async def _events(self, receive: ASGIReceive, send: ASGISend) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), *_SECURITY]})
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        started = last_sent = time.monotonic()
        seen = -1
        try:
            await send({"type": "http.response.body", "body": b"retry: 1000\n\n",
                        "more_body": True})
            while not gone.is_set() and not self.closing:
                now = time.monotonic()
                if now - started > _STREAM_S:
                    break
                if self._commits != seen or self._behind:
                    seen = self._commits
                    body = b"event: board\ndata: " + await self.board() + b"\n\n"
                    await send({"type": "http.response.body", "body": body,
                                "more_body": True})
                    last_sent = now
                elif now - last_sent > _KEEPALIVE_S:
                    await send({"type": "http.response.body", "body": b": alive\n\n",
                                "more_body": True})
                    last_sent = now
                try:
                    await asyncio.wait_for(gone.wait(), self.tick_s)
                except TimeoutError:
                    pass
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b""})
        finally:
            watcher.cancel()

    async def _timeline(self, session_id: str, after: int, send: ASGISend) -> None:
        found = None
        if SESSION_ID.fullmatch(session_id):
            found = await asyncio.to_thread(read_timeline, self.rt.log, session_id,
                                            MAX_ENTRIES, after)
        if found is None:
            await _send(send, 404, "json", _encode({"error": "no such session"}))
        else:
            await _send(send, 200, "json", _redacted(found))

    async def _replay(self, session_id: str, call: str, send: ASGISend) -> None:
        if not SESSION_ID.fullmatch(session_id):
            await _send(send, 404, "text", b"no such session")
            return
        try:
            text = await asyncio.to_thread(
                lambda: render_json(rebuild(self.rt.log, session_id, call)))
        except SessionwardenError as exc:
            await _send(send, 404, "text", printable(str(exc)).encode())
            return
        body = text.encode()
        if len(body) > _MAX_REPLAY:
            body = body[:_MAX_REPLAY] + (f"\n… cut at {_MAX_REPLAY:,} bytes of {len(body):,}; "
                                         "`sessionwarden replay --session … --call …` "
                                         "prints it whole\n").encode()
        await _send(send, 200, "text", body)


async def _send(send: ASGISend, status: int, kind: str, body: bytes,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", _TYPES[kind]), (b"content-length", str(len(body)).encode()),
        *_SECURITY, *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def _redacted(value: object) -> bytes:
    """``value`` as JSON, with anything that looks like a key replaced.

    The log holds text clients chose (a model name, a User-Agent, a tool's name): the
    page never shows a key, whatever a client put there. The placeholder holds no quote,
    so the JSON stays whole.
    """
    return default_redactor.redact(_encode(value).decode()).encode()


def _headless(send: ASGISend) -> ASGISend:
    """``send`` for a HEAD request: the headers as GET's, no body."""
    async def headless(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            message = {"type": "http.response.body", "body": b""}
        await send(message)
    return headless
