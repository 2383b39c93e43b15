"""The vocabulary of the error classifier: classes, recoveries and the result (pure data).

:mod:`sessionwarden.domain.classify.classifier` produces a :class:`Classification`;
:mod:`sessionwarden.domain.classify.rules` holds the rules. The meaning of each
recovery is given on :data:`Recovery`.
"""

from datetime import datetime, timedelta
from typing import Literal, get_args

import msgspec

__all__ = [
    "ERROR_CLASSES",
    "GENUINE_MIN_RESET",
    "RECOVERIES",
    "TRANSPORT_FAILURES",
    "AuthKind",
    "BenchState",
    "Classification",
    "ErrorClass",
    "LimitKind",
    "Recovery",
    "Transport",
]

#: ``unreachable`` is ours, not Hermes's: no connection could be made (refused, DNS, no
#: route, TLS), so nothing reached the provider — neither its keys nor its capacity are
#: at fault, and it is never called a ``timeout``.
ErrorClass = Literal["billing", "rate_limit", "overloaded", "server_error", "timeout",
                     "context_overflow", "payload_too_large", "auth", "model_not_found",
                     "content_policy", "format_error", "unreachable", "unknown"]
ERROR_CLASSES: tuple[ErrorClass, ...] = get_args(ErrorClass)

#: ``rotate``: send the call again at once with the next key (this one failed for it);
#: ``bench_key``: bench this key until ``reset_seconds`` (or the pool's TTL), then rotate;
#: ``bench_pool``: the provider's whole pool is out (shared account): breaker, fallback;
#: ``retry``: same route after :func:`~sessionwarden.domain.classify.classifier.retry_delay`;
#: ``compress_and_retry``: once, with the context compressed to a lower target;
#: ``relay``: hand the error to the client unchanged.
Recovery = Literal["rotate", "bench_key", "bench_pool", "retry", "compress_and_retry", "relay"]
RECOVERIES: tuple[Recovery, ...] = get_args(Recovery)

#: The transport failures the proxy maps its exceptions to (aiohttp/asyncio):
#: ``timeout`` (asyncio.TimeoutError, ServerTimeoutError), ``connect``
#: (ClientConnectorError, DNS), ``reset`` (ServerDisconnectedError, ClientOSError,
#: ClientPayloadError: the connection dropped), ``tls`` (ClientSSLError and the like),
#: ``protocol`` (a malformed HTTP response).
Transport = Literal["timeout", "connect", "reset", "tls", "protocol"]
TRANSPORT_FAILURES: tuple[Transport, ...] = get_args(Transport)

#: What the key pool does to the key: cool it briefly, exhaust it until a reset, kill it.
BenchState = Literal["cooling", "exhausted", "dead"]
LimitKind = Literal["transient", "genuine"]
AuthKind = Literal["revoked", "invalid", "forbidden"]

#: A bucket must be out for at least this long for a limit to be genuine (§5).
GENUINE_MIN_RESET = 60.0


class Classification(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream failure, classified.

    Attributes:
        error_class: the class (:data:`ERROR_CLASSES`).
        recovery: what the daemon does about it (:data:`RECOVERIES`).
        key_specific: whether another key of the same provider could succeed.
        key_state: the state the failing key moves to (None: unchanged).
        limit: for a rate limit, ``transient`` or ``genuine``.
        auth: for an auth failure, ``revoked``, ``invalid`` or ``forbidden``.
        reset_seconds: when the limit lifts or how long to wait, from the classification's
            ``now``, if the headers or body said so.
        reset_source: where ``reset_seconds`` came from (a header or body field).
        reason: the rule and the phrase or code that matched (our text, never the body's).
    """

    error_class: ErrorClass
    recovery: Recovery
    key_specific: bool = False
    key_state: BenchState | None = None
    limit: LimitKind | None = None
    auth: AuthKind | None = None
    reset_seconds: float | None = None
    reset_source: str = ""
    reason: str = ""

    def until(self, now: datetime) -> datetime | None:
        """The moment the reset passes, counted from ``now``; None when unknown."""
        if self.reset_seconds is None:
            return None
        return now + timedelta(0, self.reset_seconds)
