"""The demo's client: the daemon being demonstrated, over plain HTTP (no SDK needed).

:class:`Demo` holds the daemon's address and token, the demo's session and the
conversation so far; each step of ``sessionwarden demo`` calls the daemon through it.
"""

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sessionwarden.cmd.errors import CommandError

__all__ = ["Demo"]


@dataclass
class Demo:
    """The daemon being demonstrated, the demo's session, and what earlier steps left."""

    base_url: str
    token: str
    #: The log the daemon writes (read-only here: the long session reads its decisions).
    db: Path
    session: str = field(default_factory=lambda: f"demo-{secrets.token_hex(4)}")
    #: The conversation so far (steps that continue it append to it).
    messages: list[dict[str, Any]] = field(default_factory=list)

    def _request(self, path: str, body: object = None, method: str | None = None,
                 session: str | None = None) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        headers = {"authorization": f"Bearer {self.token}",
                   "x-session-id": session or self.session,
                   "content-type": "application/json"}
        return urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                      method=method)

    def _open(self, request: urllib.request.Request) -> IO[bytes]:
        # No proxy: the daemon is on loopback, and an HTTP(S)_PROXY must not see the token.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            response: IO[bytes] = opener.open(request, timeout=30)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            raise CommandError(f"the daemon answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise CommandError(f"cannot reach the demo's daemon: {exc}") from None
        return response

    def send(self, method: str, path: str, body: object = None,
             session: str | None = None) -> tuple[int, Any]:
        """Any request: its status and decoded answer, an error answer too (no raise).

        ``session``: the ``X-Session-Id`` to send, when not the demo's session.
        """
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self._request(path, body, method, session),
                             timeout=30) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    return exc.code, json.load(exc)
                except ValueError:
                    raise CommandError(f"the daemon answered {exc.code} with no JSON body"
                                       ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CommandError(f"cannot reach the demo's daemon: {exc}") from None

    def get(self, path: str) -> Any:
        """GET ``/v1`` + ``path``, decoded."""
        with self._open(self._request(path)) as response:
            return json.load(response)

    def chat(self, **body: Any) -> Any:
        """A plain chat completion, decoded."""
        with self._open(self._request("/chat/completions", body)) as response:
            return json.load(response)

    def stream(self, **body: Any) -> Iterator[Any]:
        """A streamed chat completion: each event's decoded data, up to ``[DONE]``."""
        body["stream"] = True
        with self._open(self._request("/chat/completions", body)) as response:
            for line in response:
                data = line.decode().strip().removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                if line.startswith(b"data:"):
                    yield json.loads(data)
