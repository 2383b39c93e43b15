"""The daemon's ASGI application: security checks first, then a dict of routes.

Every request is checked before routing (the size of its head, its Host, its token, the
size of its body); any error that escapes a handler becomes a 500 with a one-line message,
so a client never sees a traceback. Every request ends with one access line
(``sessionwarden.cmd.daemon.access``).

The checks, in this order: its line and headers are within
``max_header_kib`` (counted while they arrive, ``cmd/daemon/protocol.py``: 431 otherwise); there
is exactly one Host header, it parses as host[:port] and names this machine (a loopback
name, or the explicitly allowed bind address), which defeats DNS rebinding from a
browser; every path but ``/healthz`` (and ``/metrics``, see ``cmd/daemon/metrics.py``,
and the live page under ``/ui``, which signs in with a cookie: ``cmd/daemon/ui``)
needs the daemon's token, as ``Authorization:
Bearer <token>`` or, the way Anthropic clients send a key, ``x-api-key: <token>``
(compared in constant time); a body larger than the cap is refused with 413 as soon as
its declared or received size exceeds it, without reading it whole.

The proxy's doors (``proxy/doors.py``) are a dict by path; a request at a door is
answered in the door's error shape from its first check on (an Anthropic client that
sends the wrong key gets Anthropic's 401).
"""

import hmac
import re
import time
from collections.abc import MutableMapping
from typing import Any

from loguru import logger
from sessionwarden import __version__
from sessionwarden.cmd.daemon.access import access_logged
from sessionwarden.cmd.daemon.control import CONTROL_PREFIX, KEYS_PATH, control, keys
from sessionwarden.cmd.daemon.http import (
    ASGIReceive,
    ASGISend,
    door_errors,
    header_map,
    read_body,
    send_error,
    send_json,
)
from sessionwarden.cmd.daemon.metrics import METRICS_PATH, may_scrape, serve_metrics
from sessionwarden.cmd.daemon.prepare import preparation_performers
from sessionwarden.cmd.daemon.proxy.doors import Door, doors
from sessionwarden.cmd.daemon.proxy.relay import serve_door
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.daemon.summarise import summary_performers
from sessionwarden.cmd.daemon.ui.page import CODES_PATH, UI_PREFIX, Page
from sessionwarden.cmd.errors import BodyTooLarge
from sessionwarden.upstream.sim import SIM_MODELS

__all__ = ["LOOPBACK_NAMES", "DaemonApp", "host_name"]

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


# RFC 9110 host[:port]: a bracketed IPv6 literal or a name of letters, digits, dots and
# hyphens. Anything else (userinfo as in "127.0.0.1:1@evil.com", a path, spaces, two
# colons) is not a host this daemon can be, whatever a lenient split would make of it.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::[0-9]{1,5})?")


def host_name(raw_headers: list[tuple[bytes, bytes]]) -> str | None:
    """The one Host header's host, lower-cased (``[::1]:8787`` → ``[::1]``).

    None unless there is exactly one Host header and it parses as host[:port].
    """
    values = [v for k, v in raw_headers if k.lower() == b"host"]
    if len(values) != 1:
        return None
    match = _HOST.fullmatch(values[0].decode("latin-1"))
    if match is None:
        return None
    return f"[{match['v6']}]".lower() if match["v6"] else match["name"].lower()


def _bracketed(hosts: frozenset[str]) -> frozenset[str]:
    """``hosts`` with each bare IPv6 address also in its Host-header form, ``[addr]``."""
    return hosts | {f"[{h}]" for h in hosts if ":" in h and not h.startswith("[")}


class DaemonApp:
    """The proxy, the control API (``cmd/daemon/control.py``) and the health check: one ASGI app."""

    def __init__(
        self,
        runtime: Runtime,
        token: str,
        *,
        max_body_bytes: int,
        allowed_hosts: frozenset[str] = LOOPBACK_NAMES,
    ) -> None:
        """Serve ``runtime`` to clients presenting ``token``."""
        self.runtime = runtime
        # The model summariser's performer makes calls through the proxy's own path
        # (admission, a pooled key, completion), which sits above the runtime: it is
        # installed here, where both are known, rather than by the runtime itself.
        runtime.performers.update(summary_performers(runtime))
        runtime.performers.update(preparation_performers(runtime))
        self._auth = f"Bearer {token}".encode()
        self._token = token.encode()
        self._doors = doors()
        self._max_body = max_body_bytes
        self._hosts = _bracketed(frozenset(h.lower() for h in allowed_hosts))
        # ``[metrics] public`` opens /metrics only on a daemon nobody else can reach.
        self._loopback_only = self._hosts <= _bracketed(LOOPBACK_NAMES)
        self._started = time.time()
        self.page = Page(runtime, token)

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend
    ) -> None:
        """ASGI entry point."""
        if scope["type"] != "http":
            return
        door = self._doors.get(scope["path"])
        with access_logged(scope, send) as send, door_errors(
                door.adapter if door is not None else None):
            try:
                await self._serve(scope, receive, send, door)
            except Exception as exc:
                logger.error("request {} failed: {}: {}", scope.get("path"),
                             type(exc).__name__, exc)
                try:
                    await send_error(send, 500, "internal error in sessionwarden",
                                     kind="server_error")
                except Exception:
                    pass  # the response had already started; the connection will be dropped

    async def _serve(
        self, scope: MutableMapping[str, Any], receive: ASGIReceive, send: ASGISend,
        door: Door | None,
    ) -> None:
        if host_name(scope["headers"]) not in self._hosts:
            await send_error(send, 403, "Host header does not name this machine (exactly "
                             "one Host header, host[:port], naming a loopback address)",
                             code="host_not_allowed")
            return
        headers = header_map(scope["headers"])
        path, method = scope["path"], scope["method"]
        if path == "/" and method in ("HEAD", "GET"):
            # Claude Code probes its base URL with ``HEAD /`` before its first call and
            # gives up on an error; the answer tells nothing a Host-checked caller lacks.
            await send_json(send, 200, {"ok": True})
            return
        if path == "/healthz":
            await send_json(send, 200, {"ok": True, "version": __version__,
                                        "uptime_s": round(time.time() - self._started, 1)})
            return
        if path == UI_PREFIX or path.startswith(UI_PREFIX + "/"):
            # The page signs in with its own cookie (``ui/signin.py``): a browser cannot
            # send the bearer token, and the token must never be in a URL.
            await self.page.serve(scope, receive, send)
            return
        supplied = headers.get("authorization", "").encode("latin-1")
        api_key = headers.get("x-api-key", "").encode("latin-1")
        # Both compared, always: which one matched must not show in the time taken.
        bearer_ok = hmac.compare_digest(supplied, self._auth)
        key_ok = hmac.compare_digest(api_key, self._token)
        if path == METRICS_PATH and may_scrape(self.runtime, supplied, bearer_ok or key_ok,
                                               self._loopback_only):
            await serve_metrics(self.runtime, method, send)
            return
        if not (bearer_ok or key_ok):
            await send_error(send, 401, "missing or wrong bearer token", kind="auth_error",
                             code="unauthorized",
                             headers=[(b"www-authenticate", b'Bearer realm="sessionwarden"')])
            return
        if path == "/v1/models":
            if method != "GET":
                await send_error(send, 405, "use GET")
                return
            await send_json(send, 200, self._models())
            return
        if door is not None:
            if method != "POST":
                await send_error(send, 405, "use POST")
                return
            declared = headers.get("content-length", "0")
            if not declared.isdigit():
                await send_error(send, 400, "malformed Content-Length header")
                return
            if int(declared) > self._max_body:
                await send_error(send, 413, f"body exceeds {self._max_body} bytes",
                                 code="body_too_large")
                return
            try:
                body = await read_body(receive, self._max_body)
            except BodyTooLarge:
                await send_error(send, 413, f"body exceeds {self._max_body} bytes",
                                 code="body_too_large")
                return
            except ConnectionAbortedError:
                return
            query = scope.get("query_string", b"").decode("latin-1")
            await serve_door(self.runtime, door, headers, body, query, receive, send)
            return
        if path.startswith(CONTROL_PREFIX):
            await control(self.runtime, method, path, receive, send)
            return
        if path == KEYS_PATH:
            await keys(self.runtime, method, send)
            return
        if path == CODES_PATH:
            await self.page.issue_code(method, send)
            return
        await send_error(send, 404, f"no route for {method} {path}", code="not_found")

    def _models(self) -> dict[str, Any]:
        """Every model name a client may send, and every provider's open-ended form.

        Each ``[[models]]`` entry is listed under its name and as ``<provider>/<name>``
        (both route to it). A provider also takes any ``<provider>/<model>``, which no
        list can enumerate: ``providers`` says so. ``usable`` is false, with the
        ``reason``, for a provider with no usable key (a call to it gets 503).
        """
        config, unusable = self.runtime.config, self.runtime.unusable
        data: list[dict[str, Any]] = []
        seen: set[str] = set()
        for m in config.models:
            for name in (m.name, f"{m.provider}/{m.name}"):
                if name not in seen:
                    seen.add(name)
                    data.append(_availability({
                        "id": name, "object": "model", "owned_by": m.provider,
                        "context_length": m.context_length}, unusable.get(m.provider)))
        providers = [
            _availability({"name": p.name, "models": f"{p.name}/<model>",
                           "api_mode": p.api_mode}, unusable.get(p.name))
            for p in config.usable_providers
        ]
        data += [  # the simulated provider's named models (any sim/<name> is accepted)
            _availability({"id": f"{p.name}/{name}", "object": "model", "owned_by": p.name,
                           "context_length": None}, None)
            for p in config.usable_providers if p.simulated for name in SIM_MODELS
        ]
        return {"object": "list", "data": data, "providers": providers}


def _availability(entry: dict[str, Any], unusable: str | None) -> dict[str, Any]:
    entry["usable"] = unusable is None
    if unusable is not None:
        entry["reason"] = unusable
    return entry
