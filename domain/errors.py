"""Errors raised by the pure domain layer.

The tree::

    SessionwardenError
    └── DomainError
        ├── UsageRejected     a provider usage block that cannot be trusted (the caller
        │                     records the rejection and estimates the usage instead)
        ├── NoCredential      a provider has no usable key in its pool
        ├── UnknownCall       a completion or resumption names a call that is not open
        ├── BrokenChain       a recorded request refers to a call whose record is missing
        └── BadPatterns       configured error-classifier phrases that cannot be used
"""

from sessionwarden.errors import SessionwardenError

__all__ = [
    "BadPatterns",
    "BrokenChain",
    "DomainError",
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


class UnknownCall(DomainError):
    """A call id that is not open in its session (already completed, or never admitted)."""

    def __init__(self, call_id: str, state: str) -> None:
        """Name the call and what is known of it (``"completed"``, ``"not admitted"``)."""
        super().__init__(f"call {call_id}: {state}")
        self.call_id = call_id
        self.state = state


class BrokenChain(DomainError):
    """A recorded request refers to a call whose own record is missing or too short."""


class BadPatterns(DomainError):
    """Error-classifier phrases that cannot be used: an unknown list, an empty or huge phrase."""
