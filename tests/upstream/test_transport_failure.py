"""Why no answer came (upstream/client.py ``transport_failure``): the cause in the user's words.

A refused connection and a DNS failure are ``connect`` (the class ``unreachable``), a
timeout is ``timeout`` and says which wait ran out, and no cause is ever called a timeout
that is not one. The refused connection goes through the daemon in
``tests/cmd/test_unreachable_provider.py``; the failures a test cannot provoke the same
way on every machine (a DNS lookup, a TLS certificate, the system's own connect timeout)
are the exceptions aiohttp raises for them, built here.
"""

import errno
import socket
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from sessionwarden.config import ProviderConfig
from sessionwarden.upstream.client import TransportFailure, transport_failure

PROVIDER = ProviderConfig(name="acme", base_url="https://api.example.com/v1",
                          keys=["env:ACME_KEY"], connect_timeout_s=10.0, read_timeout_s=300.0)
KEY = ConnectionKey("api.example.com", 443, True, True, None, None, None, None)


@pytest.mark.parametrize(("exc", "expected"), [
    (aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(errno.ECONNREFUSED, "x")),
     ("connect", "connection refused at api.example.com:443")),
    # asyncio's "Multiple exceptions" (every address refused) has no errno of its own
    (aiohttp.ClientConnectorError(KEY, OSError(
        f"Multiple exceptions: [Errno {errno.ECONNREFUSED}] Connect call failed")),
     ("connect", "connection refused at api.example.com:443")),
    (aiohttp.ClientConnectorDNSError(KEY, socket.gaierror(-2, "Name or service not known")),
     ("connect", "DNS lookup of api.example.com failed (name or service not known)")),
    (aiohttp.ClientConnectorError(KEY, OSError(errno.EHOSTUNREACH, "x")),
     ("connect", "cannot connect to api.example.com:443 (no route to host)")),
    (aiohttp.ClientConnectorError(KEY, OSError(errno.ETIMEDOUT, "x")),
     ("timeout", "connecting to api.example.com:443 timed out")),
    (aiohttp.ClientConnectorCertificateError(
        KEY, ssl.SSLCertVerificationError(1, "certificate verify failed")),
     ("tls", "the TLS certificate of api.example.com:443 was not accepted")),
    (aiohttp.ClientConnectorSSLError(KEY, ssl.SSLError(1, "wrong version number")),
     ("tls", "TLS handshake with api.example.com:443 failed")),
    (aiohttp.ConnectionTimeoutError("Connection timeout to host"),
     ("timeout", "no connection to api.example.com:443 within 10 s")),
    (aiohttp.SocketTimeoutError("Timeout on reading data from socket"),
     ("timeout", "no bytes from it for 300 s (read_timeout_s)")),
    (aiohttp.ServerDisconnectedError(),
     ("reset", "it closed the connection without answering")),
    (aiohttp.ClientOSError(errno.ECONNRESET, "x"),
     ("reset", "the connection broke (connection reset by peer)")),
    (aiohttp.ClientPayloadError("broken"),
     ("protocol", "its answer could not be read (ClientPayloadError)")),
], ids=["refused", "refused-everywhere", "dns", "no-route", "os-timeout", "certificate",
        "tls", "connect-timeout", "read-timeout", "disconnected", "reset", "payload"])
def test_each_failure_is_named_for_what_it_is(exc: BaseException,
                                              expected: tuple[str, str]) -> None:
    assert transport_failure(exc, PROVIDER) == TransportFailure(*expected)  # type: ignore[arg-type]


def test_an_ipv6_address_keeps_its_port_apart() -> None:
    key = ConnectionKey("::1", 8080, False, True, None, None, None, None)
    found = transport_failure(aiohttp.ClientConnectorError(
        key, ConnectionRefusedError(errno.ECONNREFUSED, "x")), PROVIDER)
    assert found.cause == "connection refused at [::1]:8080"
    local = ProviderConfig(name="local", base_url="http://[::1]/v1", keys=["env:K"])
    assert transport_failure(aiohttp.ConnectionTimeoutError(), local).cause == (
        "no connection to [::1]:80 within 10 s")
