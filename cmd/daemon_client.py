"""Asks the daemon running beside a command what only its memory holds: leases in flight.

The log records calls, not leases: how many calls each key serves *right now* is the
running pool's memory. ``sessionwarden keys list`` finds the daemon that holds its log
through the lock file's announcement (``store.lock.read_announcement``: a live pid and
its URL) and asks the control API's ``GET /v1/keys`` with the clients' bearer token
(``$SESSIONWARDEN_TOKEN``, else the token file beside the log, read as the daemon
reads it). No daemon holding the log means no call in flight: every count is 0.

Whatever goes wrong — no token here, a daemon that does not answer within
:data:`TIMEOUT_S`, a refusal, a body that is not the daemon's — the counts are unknown,
with one short reason for the command to print; nothing raises, and the token is never
printed.
"""

import http.client
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import msgspec
from sessionwarden.cmd.errors import UnsafeFile
from sessionwarden.cmd.private import read_private_file
from sessionwarden.store import read_announcement

__all__ = ["TIMEOUT_S", "InFlight", "leases_in_flight"]

#: How long a command waits for the daemon's answer, in seconds.
TIMEOUT_S = 2.0
#: The answer lists every key of every pool: a few KiB; more is not the daemon's.
_MAX_ANSWER = 1 << 20
_TOKEN_ENV = "SESSIONWARDEN_TOKEN"


class _Key(msgspec.Struct, frozen=True):
    provider: str
    fingerprint: str
    in_flight: int


class _Answer(msgspec.Struct, frozen=True):
    keys: list[_Key]


_decode = msgspec.json.Decoder(_Answer).decode


class InFlight(NamedTuple):
    """Leases in flight per ``(provider, fingerprint)``, or None with why they are unknown.

    ``counts`` is empty (every key at 0) when no daemon holds the log.
    """

    counts: dict[tuple[str, str], int] | None
    why_unknown: str = ""


def _token(db: Path, environ: Mapping[str, str]) -> str | None:
    explicit = environ.get(_TOKEN_ENV, "").strip()
    if explicit:
        return explicit
    path = db.parent / "token"
    if not path.exists():
        return None
    try:
        return read_private_file(path, lambda _: None, what="the token file").strip() or None
    except UnsafeFile:
        return None


def leases_in_flight(db: Path, environ: Mapping[str, str] | None = None) -> InFlight:
    """The leases in flight of every key of the daemon holding ``db``."""
    running = read_announcement(db)
    if running is None:
        return InFlight({})
    who = f"the daemon (pid {running.pid})"
    token = _token(db, os.environ if environ is None else environ)
    if token is None:
        return InFlight(None, f"{who} runs, but its token is not readable here "
                              f"(set {_TOKEN_ENV})")
    parts = urlsplit(running.url)
    if not parts.hostname:
        return InFlight(None, f"{who} announced no usable address")
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", "/v1/keys", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read(_MAX_ANSWER + 1)
    except (OSError, http.client.HTTPException) as exc:
        return InFlight(None, f"{who} did not answer at {running.url} "
                              f"({type(exc).__name__})")
    finally:
        connection.close()
    if response.status != 200:
        why = "the token here is not the daemon's" if response.status == 401 else ""
        return InFlight(None, f"{who} answered {response.status}" + (f": {why}" if why else ""))
    try:
        answer = _decode(body) if len(body) <= _MAX_ANSWER else None
    except msgspec.DecodeError:
        answer = None
    if answer is None:
        return InFlight(None, f"{who} answered something that is not its key list")
    return InFlight({(k.provider, k.fingerprint): k.in_flight for k in answer.keys})
