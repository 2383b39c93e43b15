"""Errors raised by the actors' pure domain logic.

The tree::

    SessionwardenError
    └── ActorError
        ├── UsageRejected     a provider usage block that cannot be trusted (the caller
        │                     records the rejection and estimates the usage instead)
        ├── ActorUnavailable  an actor did not answer in time (it may be restarting)
        └── NoCredential      a provider has no usable key in its pool
"""

from sessionwarden.errors import SessionwardenError

__all__ = ["ActorError", "ActorUnavailable", "NoCredential", "UsageRejected"]


class ActorError(SessionwardenError):
    """Base of the errors of the actors package."""


class UsageRejected(ActorError):
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


class ActorUnavailable(ActorError):
    """An actor did not answer within the deadline: it is overloaded or being restarted."""


class NoCredential(ActorError):
    """A provider's pool has no key that can serve a call."""
