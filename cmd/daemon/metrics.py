"""``GET /metrics``: the daemon's Prometheus metrics, for a scraper.

Who may scrape (checked in ``cmd/daemon/server.py`` after the Host check, like every
path): a client with the daemon's token, or with ``[metrics] token`` (a second token, for
a scraper that must not hold the proxy's), or anyone when ``[metrics] public = true`` and
the daemon listens on loopback only. The text is the Prometheus exposition format, made
by ``prometheus-client`` from ``views/metrics.py``'s registry after it caught up with the
log — in a worker thread: the event loop never waits on SQLite.
"""

import asyncio
import hmac

from prometheus_client import CONTENT_TYPE_LATEST
from sessionwarden.cmd.daemon.http import ASGISend, send_error
from sessionwarden.cmd.daemon.runtime import Runtime

__all__ = ["METRICS_PATH", "may_scrape", "serve_metrics"]

#: The path Prometheus scrapes.
METRICS_PATH = "/metrics"


def may_scrape(rt: Runtime, authorization: bytes, token_ok: bool, loopback_only: bool) -> bool:
    """Whether this request may read the metrics (module doc)."""
    settings = rt.config.metrics
    if token_ok or (settings.public and loopback_only):
        return True
    if not settings.token:
        return False
    return hmac.compare_digest(authorization, f"Bearer {settings.token}".encode())


async def serve_metrics(rt: Runtime, method: str, send: ASGISend) -> None:
    """Answer a scrape: the metrics, caught up with the log."""
    if method not in ("GET", "HEAD"):
        await send_error(send, 405, "use GET", headers=[(b"allow", b"GET")])
        return
    body = await asyncio.to_thread(lambda: rt.metrics().render())
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", CONTENT_TYPE_LATEST.encode()),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
