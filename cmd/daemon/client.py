"""Asks the daemon running beside a command what only it holds: leases, sign-in codes.

How many calls each key serves *right now* is the running pool's memory (the log records
calls, not leases), and a one-time code that signs a browser in to the live page
(:func:`sign_in_link`, for ``sessionwarden ui``) is the daemon's to give.

Rules:

- A command finds the daemon that holds its log through the lock file's announcement
  (``store.lock.read_announcement``: a live pid and its URL) and asks it (``GET
  /v1/keys``, ``POST /v1/ui/codes``) with the clients' bearer token
  (``$SESSIONWARDEN_TOKEN``, else the token file beside the log, read as the daemon
  reads it). No daemon holding the log means no call in flight: every count is 0.
- The lock file is believed only as the daemon writes it (``store.lock``: a regular file
  of this user's that no one else may write), and the token goes only where a daemon can
  listen: ``http://HOST:PORT`` with HOST ``localhost`` or an IP address of this machine
  (loopback, or the address a daemon started with ``--allow-remote`` binds) — never a
  name to resolve, credentials, a path or a query. Any other address is not asked.
- Whatever goes wrong — no token here, such an address, a daemon that does not answer
  within :data:`TIMEOUT_S` (the whole exchange, however slowly it trickles), a refusal, a
  body that is not the daemon's — the counts are unknown, with one short reason for the
  command to print (nothing raises; :func:`sign_in_link` raises a CommandError saying
  it), and the token is never printed.
"""

import http.client
import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import msgspec
from sessionwarden.cmd.daemon.private import TOKEN_ENV, read_private_file, token_file
from sessionwarden.cmd.errors import CommandError, UnsafeFile
from sessionwarden.store import read_announcement

__all__ = ["TIMEOUT_S", "InFlight", "daemon_url", "leases_in_flight", "sign_in_link"]

#: How long a command waits for the daemon's answer, in seconds.
TIMEOUT_S = 2.0
#: The answer lists every key of every pool: a few KiB; more is not the daemon's.
_MAX_ANSWER = 1 << 20
#: A bearer token as a header carries it and the daemon compares it: printable ASCII.
_TOKEN = re.compile(r"[\x20-\x7e]{1,4096}")


class _Key(msgspec.Struct, frozen=True):
    provider: str
    fingerprint: str
    in_flight: int


class _Keys(msgspec.Struct, frozen=True):
    keys: list[_Key]


_decode = msgspec.json.Decoder(_Keys).decode
#: The path of a sign-in link as the daemon makes it (``cmd/daemon/ui/signin.py``).
_CODE_PATH = re.compile(r"/ui/signin\?code=[A-Za-z0-9_-]{16,64}")


class InFlight(NamedTuple):
    """Leases in flight per ``(provider, fingerprint)``, or None with why they are unknown.

    ``counts`` is empty (every key at 0) when no daemon holds the log.
    """

    counts: dict[tuple[str, str], int] | None
    why_unknown: str = ""


def _token(db: Path, environ: Mapping[str, str]) -> str | None:
    explicit = environ.get(TOKEN_ENV, "").strip()
    if explicit:
        return explicit
    path = token_file(db)
    if not path.exists():
        return None
    try:
        return read_private_file(path, lambda _: None, what="the token file").strip() or None
    except UnsafeFile:
        return None


def _address(url: str) -> tuple[str, int] | None:
    """The host and port of a daemon's announced ``url``, if the token may go there.

    Only what :meth:`~sessionwarden.store.InstanceLock.announce` writes:
    ``http://HOST:PORT``, no credentials, path, query or fragment, HOST ``localhost``
    or an IP address of this machine (loopback, or the address a daemon started with
    ``--allow-remote`` was told to bind). Never a name to resolve: DNS could send the
    token anywhere.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    host = parts.hostname
    if (parts.scheme != "http" or not host or not port or parts.username is not None
            or parts.password is not None or parts.path not in ("", "/") or parts.query
            or parts.fragment or "@" in parts.netloc):
        return None
    if host == "localhost":
        return host, port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return (host, port) if address.is_loopback or _on_this_machine(address) else None


def _on_this_machine(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is one of this machine's: only those can be bound."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


class _Answer(NamedTuple):
    """A daemon's 200 answer: its body, who answered, and where it listens."""

    body: bytes
    who: str
    where: str


def _ask(db: Path, environ: Mapping[str, str] | None, method: str,
         path: str) -> _Answer | str | None:
    """The daemon holding ``db``'s answer to ``method path``; why not; None if none runs.

    The whole exchange, connection included, ends within :data:`TIMEOUT_S` (a little
    more only while the connection is being made): a daemon, or a program posing as one,
    that answers a byte at a time is cut off.
    """
    running = read_announcement(db)
    if running is None:
        return None
    who = f"the daemon (pid {running.pid})"
    address = _address(running.url)
    if address is None:
        return (f"{who} announced an address that is not a plain http:// "
                "address on this machine (see its lock file)")
    token = _token(db, os.environ if environ is None else environ)
    if token is None:
        return f"{who} runs, but its token is not readable here (set {TOKEN_ENV})"
    if not _TOKEN.fullmatch(token):
        # Never sent, never echoed: a line break would forge headers, and an error
        # naming the header would print the token.
        return (f"the token here is not one a daemon could have: printable "
                f"ASCII only (check {TOKEN_ENV} or the token file)")
    deadline = time.monotonic() + TIMEOUT_S
    connection = http.client.HTTPConnection(*address, timeout=TIMEOUT_S)
    cutoff: threading.Timer | None = None
    try:
        connection.connect()
        # The socket's timeout bounds each read, not their sum: past the deadline the
        # socket is shut down under the read, which then ends at once.
        cutoff = threading.Timer(max(0.0, deadline - time.monotonic()), _cut, (connection,))
        cutoff.daemon = True
        cutoff.start()
        connection.request(method, path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read(_MAX_ANSWER + 1)
        if time.monotonic() >= deadline:
            raise TimeoutError
    except (OSError, http.client.HTTPException) as exc:
        return f"{who} did not answer at {daemon_url(address)} ({type(exc).__name__})"
    finally:
        if cutoff is not None:
            cutoff.cancel()
        connection.close()
    if response.status != 200:
        why = "the token here is not the daemon's" if response.status == 401 else ""
        return f"{who} answered {response.status}" + (f": {why}" if why else "")
    if len(body) > _MAX_ANSWER:
        return f"{who} answered more than a daemon would"
    return _Answer(body, who, daemon_url(address))


def daemon_url(address: tuple[str, int]) -> str:
    """``http://host:port`` of a daemon's ``address`` (an IPv6 host in brackets)."""
    host = f"[{address[0]}]" if ":" in address[0] else address[0]
    return f"http://{host}:{address[1]}"


def leases_in_flight(db: Path, environ: Mapping[str, str] | None = None) -> InFlight:
    """The leases in flight of every key of the daemon holding ``db`` (module docstring)."""
    answer = _ask(db, environ, "GET", "/v1/keys")
    if answer is None:
        return InFlight({})
    if isinstance(answer, str):
        return InFlight(None, answer)
    try:
        keys = _decode(answer.body)
    except msgspec.DecodeError:
        return InFlight(None, f"{answer.who} answered something that is not its key list")
    return InFlight({(k.provider, k.fingerprint): k.in_flight for k in keys.keys})


class _Code(msgspec.Struct, frozen=True):
    path: str
    expires_at: str


def sign_in_link(db: Path, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """A one-time link to the live page of the daemon holding ``db``, and when it expires.

    Raises:
        CommandError: no daemon runs on ``db``, or it cannot be asked (the reason).
    """
    answer = _ask(db, environ, "POST", "/v1/ui/codes")
    if answer is None:
        raise CommandError(f"no daemon runs on {db}: start one with `sessionwarden daemon`"
                           " (the page is the daemon's)")
    if isinstance(answer, str):
        raise CommandError(answer)
    try:
        code = msgspec.json.decode(answer.body, type=_Code)
    except msgspec.DecodeError:
        code = None
    if code is None or not _CODE_PATH.fullmatch(code.path):
        raise CommandError(f"{answer.who} answered something that is not a sign-in code")
    return answer.where + code.path, code.expires_at


def _cut(connection: http.client.HTTPConnection) -> None:
    """Shut the connection's socket down: a read blocked on it returns."""
    try:
        if connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing is blocked on it
