"""What a classified upstream failure means for the key that got it, and for the call.

The error classifier (``domain.classify.classifier``) says what a failure is; the key state
machine (``domain.keys.key_states``) takes a
:class:`~sessionwarden.domain.keys.key_states.KeyFailure`.
:func:`key_failure` maps one onto the other, and :func:`fails_over` says whether the
same request should go at once to another key of the provider.

Failing over (issue 13, "failover inside the call") is only for a failure of *this key*
(a limit, billing, an auth failure) — an overload, a server error or a bad request would
fail the same on any key.

**A failure that repeats identically on a second key is the request's fault** (issue 21
§1). A key's failure is judged from the answer's words and codes, and an answer may quote
the request (the prompt, the model's name): a client could then bench every key in turn.
:func:`request_fault` says when the second key's failure, the same status and class as
the first's, shows that: for a billing or auth verdict, unless the status says it by
itself (401: the credentials; 402: the account's payment — a status no request text
forges). A rate limit is never one: an organisation's keys often share its buckets, and
the headers that say so are the provider's own. The proxy then stops failing over,
records nothing against the second key and lifts the first key's bench
(``domain.keys.key_states.on_request_fault``).

**The Retry-After a client gets with a relayed answer** (issue 21 §3) is the pool's, not
the upstream's: :func:`client_retry_after` turns the moment the provider takes a call
again (its earliest key's return, its breaker's end) into whole seconds within
[:data:`MIN_RETRY_AFTER_S`, :data:`MAX_RETRY_AFTER_S`]. An upstream's value was relayed
verbatim once (ten years, ``-5``, a date in 2015) while its keys cooled for seconds; a
value that cannot be read is never sent on, and one that can only counts for a provider
without keys (nothing else knows when it takes calls again).
"""

import math
from datetime import datetime

from sessionwarden.domain.classify.classification import Classification
from sessionwarden.domain.keys.key_states import FailureKind, KeyFailure

__all__ = ["MAX_RETRY_AFTER_S", "MIN_RETRY_AFTER_S", "client_retry_after", "fails_over",
           "key_failure", "request_fault"]

#: A relayed answer's ``Retry-After`` is at least this…
MIN_RETRY_AFTER_S = 1
#: …and at most this: a client told "come back in an hour" asks again then, and gets
#: the daemon's own refusal with the time left (its keys' return, believed whole).
MAX_RETRY_AFTER_S = 3600

#: Any other class is ``other``: nothing about the key, and nothing the breaker counts —
#: ``unreachable`` among them (no connection was made: a dead host is not the key's
#: fault, nor an overload; see ``domain.keys.breaker``).
_KINDS: dict[str, FailureKind] = {
    "billing": "billing", "overloaded": "overloaded", "server_error": "server_error",
    "timeout": "timeout",
}


def key_failure(found: Classification, status: int, now: datetime,
                shared_limits: bool = False) -> KeyFailure:
    """The key's failure as ``domain.keys.key_states`` judges it."""
    kind: FailureKind
    if found.error_class == "rate_limit":
        kind = "genuine_limit" if found.limit == "genuine" else "transient_limit"
    elif found.error_class == "auth":
        # The classifier says what the key's state becomes: dead only when revoked; a
        # plain auth failure rests it (the pool's auth TTL); a 403 "forbidden" (the key
        # may serve other models) rotates without benching it.
        if found.key_state == "dead":
            kind = "auth_revoked"
        else:
            kind = "auth" if found.key_state is not None else "other"
    else:
        kind = _KINDS.get(found.error_class, "other")
    return KeyFailure(kind=kind, status=status or None, reset_at=found.until(now),
                      shared_limits=shared_limits)


def fails_over(found: Classification) -> bool:
    """Whether another key could succeed where this one failed (rotate at once)."""
    return found.key_specific and found.error_class in ("rate_limit", "billing", "auth")


#: The statuses whose own meaning is the key's (or its account's), whatever the words.
_KEY_STATUSES = frozenset({401, 402})


def request_fault(found: Classification, status: int) -> bool:
    """Whether ``found``, seen again on a second key, is the request's fault, not the keys'.

    ``status`` is the answer's error status (0 for an error event in a 200 stream). The
    caller has checked that the first key's attempt had the same status and class.
    """
    return found.error_class in ("billing", "auth") and status not in _KEY_STATUSES


def client_retry_after(pool_seconds: float | None, upstream_seconds: float | None,
                       keyed: bool) -> int | None:
    """The ``Retry-After`` a relayed error answer carries, in whole seconds, or None.

    Args:
        pool_seconds: when the provider's pool takes a call again (0: now; None: no key
            returns by itself, or it is unknown).
        upstream_seconds: the upstream's own Retry-After, read (None: absent, or not a
            well-formed, believable value).
        keyed: the provider has keys (then the pool knows; the upstream's word is only
            the key's, which the pool has already taken into account).

    Returns:
        Seconds within [:data:`MIN_RETRY_AFTER_S`, :data:`MAX_RETRY_AFTER_S`], or None:
        no return is foreseeable (every key dead), so no header at all.
    """
    wait = pool_seconds if keyed else upstream_seconds
    if wait is None:
        return None if keyed else MIN_RETRY_AFTER_S
    if not math.isfinite(wait):
        return MAX_RETRY_AFTER_S if wait > 0 else MIN_RETRY_AFTER_S
    return min(max(math.ceil(wait), MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)
