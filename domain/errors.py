"""Errors raised by the pure domain layer.

The tree::

    SessionwardenError
    └── DomainError
        ├── UsageRejected     a provider usage block that cannot be trusted (the caller
        │                     records the rejection and estimates the usage instead)
        ├── NoCredential      a provider has no usable key in its pool
        │   └── KeysBenched   every key is benched (or the breaker is open): fail fast,
        │                     with when to retry
        ├── UnknownCall       a completion or resumption names a call that is not open
        ├── BrokenChain       a recorded request refers to a call whose record is missing
        ├── ListingRejected   a provider's price listing that cannot be used as a whole
        │                     (the caller keeps the prices it had)
        └── BadPatterns       configured error-classifier phrases that cannot be used
"""

from datetime import datetime

from sessionwarden.errors import SessionwardenError
from sessionwarden.events.times import format_time as _format_time

__all__ = [
    "BadPatterns",
    "BrokenChain",
    "DomainError",
    "KeysBenched",
    "ListingRejected",
    "NoCredential",
    "UnknownCall",
    "UsageRejected",
]


class DomainError(SessionwardenError):
    """Base of the errors of the domain layer."""


class UsageRejected(DomainError):
    """A usage block has a field that is negative, non-integer, absurd or of the wrong type.

    The message never repeats the offending value (a hostile provider controls it).

    Attributes:
        field: the dotted field that was rejected (``"prompt_tokens_details.cached_tokens"``),
            or ``""`` for the block as a whole.
        reason: a short reason such as ``"negative"`` or ``"expected an integer, got str"``.
    """

    def __init__(self, field: str, reason: str) -> None:
        """Create the error for ``field`` (dotted path, ``""`` for the whole block)."""
        super().__init__(f"usage rejected: {field or 'usage'}: {reason}")
        self.field = field
        self.reason = reason


class NoCredential(DomainError):
    """A provider's pool has no key that can serve a call."""


class KeysBenched(NoCredential):
    """No key of a provider may be used now: every one is benched, or its breaker is open.

    The message says why and until when, with the moment written as ``sessionwarden
    breaker list`` and ``keys list`` write it, so the answer can be matched to either.

    Attributes:
        provider: the provider's name.
        retry_after: whole seconds until a key returns (or the breaker lets a probe
            through); None when no end is foreseeable (every key is dead).
        reason: ``no_usable_key``, ``overload`` or ``probing``.
        until: the moment behind ``retry_after``, if known.
    """

    def __init__(self, provider: str, retry_after: int | None, reason: str,
                 until: datetime | None = None) -> None:
        """Say which provider, why, and when it is worth trying again."""
        if retry_after is None:
            when = "none will return by itself (replace a key, or `keys reset` one)"
        else:
            when = f"retry in {retry_after} s"
            if until is not None and reason != "probing":
                when += f", at {_format_time(until)}"
        why = {"overload": "it kept failing (overloaded, 5xx or timing out), so its breaker "
                           "is open (`sessionwarden breaker list`)",
               "probing": "one call is probing it after a pause"}.get(
                   reason, "every key is rate-limited or out of credit (`sessionwarden "
                   "keys list`)" if retry_after is not None
                   else "every key is revoked")
        super().__init__(f"provider {provider!r} cannot take calls now: {why}; {when} "
                         "(nothing was sent upstream)")
        self.provider = provider
        self.retry_after = retry_after
        self.reason = reason
        self.until = until


class UnknownCall(DomainError):
    """A call id that is not open in its session (already completed, or never admitted)."""

    def __init__(self, call_id: str, state: str) -> None:
        """Name the call and what is known of it (``"completed"``, ``"not admitted"``)."""
        super().__init__(f"call {call_id}: {state}")
        self.call_id = call_id
        self.state = state


class BrokenChain(DomainError):
    """A recorded request refers to a call whose own record is missing or too short."""


class ListingRejected(DomainError):
    """A price listing is not usable at all: not JSON, not a listing, too big, no price.

    The message is one short line and never quotes the listing (its server controls it).
    """


class BadPatterns(DomainError):
    """Error-classifier phrases that cannot be used: an unknown list, an empty or huge phrase."""
