"""The floor of a relay on the daemon's stack: what any implementation pays per call.

Run by ``bench/floor.py``, not by hand: ``floor_relay.py UPSTREAM_URL [--log DB]``. A raw
ASGI app under uvicorn with the daemon's settings (uvloop, httptools, no proxy headers, no
access log) that checks the bearer token, reads the body, POSTs it to the upstream with one
aiohttp session configured as the daemon's, and relays status, headers and body. With
``--log`` it also appends two events per call to an ``EventLog`` (one before sending and
one after the response, each awaited until durable, about 130 and 250 bytes of
JSON, the sizes of the daemon's admitted and completed events): the floor of a relay that records
each call before and after sending, with no actors, no policy and no parsing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from sessionwarden.store import ANY, EventLog, NewEvent, StreamAppend, StreamsView

_DROP_DOWN = {"content-length", "connection", "keep-alive", "transfer-encoding",
              "content-encoding", "server", "date"}


class Relay:
    """A raw ASGI app: POST /v1/chat/completions relayed, optionally logged."""

    def __init__(self, upstream: str, log: EventLog | None) -> None:
        self.upstream = upstream.rstrip("/") + "/chat/completions"
        self.log = log
        self.session: aiohttp.ClientSession | None = None
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if headers.get("authorization") != "Bearer tok":
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.session is None:
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, ttl_dns_cache=300),
                auto_decompress=False, skip_auto_headers=("User-Agent",))
        self.calls += 1
        stream = f"session-bench-{self.calls % 16}"
        if self.log is not None:
            admitted = NewEvent("bench.admitted", b'{"call":"' + os.urandom(8).hex().encode()
                                + b'","model":"gpt-test","provider":"fake","messages":2,'
                                b'"chars":60,"tools":0}' + b" " * 40)
            await self.log.append_batch_async([StreamAppend(stream, (admitted,), ANY)])
        out = {"authorization": "Bearer sk-bench-a-1111", "content-type": "application/json",
               "accept-encoding": "identity"}
        async with self.session.post(self.upstream, data=body, headers=out,
                                     allow_redirects=False) as response:
            data = await response.read()
            if self.log is not None:
                completed = NewEvent("bench.completed", b'{"call":"x","outcome":"ok",'
                                     b'"status":200,"input":12,"output":9,"credential":'
                                     b'"fp-0123456789","latency_ms":1.234}' + b" " * 120)
                await self.log.append_batch_async([StreamAppend(stream, (completed,), ANY)])
            hdrs = [(k.encode("latin-1"), v.encode("latin-1"))
                    for k, v in response.headers.items() if k.lower() not in _DROP_DOWN]
            hdrs.append((b"content-length", str(len(data)).encode()))
            await send({"type": "http.response.start", "status": response.status,
                        "headers": hdrs})
            await send({"type": "http.response.body", "body": data})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("upstream")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    log = EventLog(args.log, projections=[StreamsView()]) if args.log else None
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = sock.getsockname()[1]
    print(f"floor listening on http://127.0.0.1:{port}/v1", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(Relay(args.upstream, log), lifespan="on",
                                           log_config=None, access_log=False,
                                           server_header=False, proxy_headers=False))
    try:
        server.run(sockets=[sock])
    finally:
        if log is not None:
            log.close()


if __name__ == "__main__":
    main()
