"""What a classified upstream failure means for the key that got it, and for the call.

The error classifier (``domain.classifier``) says what a failure is; the key state
machine (``domain.key_states``) takes a :class:`~sessionwarden.domain.key_states.KeyFailure`.
:func:`key_failure` maps one onto the other, and :func:`fails_over` says whether the
same request should go at once to another key of the provider (issue 13, "failover
inside the call"): only for a failure of *this key* (a limit, billing, an auth failure)
— an overload, a server error or a bad request would fail the same on any key.
"""

from datetime import datetime

from sessionwarden.domain.classification import Classification
from sessionwarden.domain.key_states import FailureKind, KeyFailure

__all__ = ["fails_over", "key_failure"]

#: Any other class is ``other``: nothing about the key, and nothing the breaker counts —
#: ``unreachable`` among them (no connection was made: a dead host is not the key's
#: fault, nor an overload; see ``domain.breaker``).
_KINDS: dict[str, FailureKind] = {
    "billing": "billing", "overloaded": "overloaded", "server_error": "server_error",
    "timeout": "timeout",
}


def key_failure(found: Classification, status: int, now: datetime,
                shared_limits: bool = False) -> KeyFailure:
    """The key's failure as ``domain.key_states`` judges it."""
    kind: FailureKind
    if found.error_class == "rate_limit":
        kind = "genuine_limit" if found.limit == "genuine" else "transient_limit"
    elif found.error_class == "auth":
        # The classifier says what the key's state becomes: a 403 "forbidden" (the key
        # may serve other models) rotates without benching it.
        if found.key_state == "dead" or found.auth in ("revoked", "invalid"):
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
