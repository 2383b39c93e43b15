"""Errors of the upstream package: wire formats that cannot be read, streams out of bounds.

The tree::

    SessionwardenError
    └── UpstreamError
        ├── MalformedRequest     a client's body is not the wire format it claims (400)
        ├── MalformedResponse    an upstream's answer is not the wire format it claims
        └── EventTooLarge        an upstream stream event exceeds the bound on its size
"""

from sessionwarden.errors import SessionwardenError

__all__ = ["EventTooLarge", "MalformedRequest", "MalformedResponse", "UpstreamError"]


class UpstreamError(SessionwardenError):
    """Base of the errors of the upstream package."""


class MalformedRequest(UpstreamError):
    """A client's request body cannot be read in its wire format.

    Attributes:
        code: the error code the client is told (``"invalid_model"``), or "".
    """

    def __init__(self, message: str, code: str = "") -> None:
        """``message`` is short and safe to show the client."""
        super().__init__(message)
        self.code = code


class MalformedResponse(UpstreamError):
    """An upstream's successful answer cannot be read in its wire format.

    The message is short and quotes nothing of the answer (it may echo the prompt).
    """


class EventTooLarge(UpstreamError):
    """An upstream server-sent event grew past the bound without ending."""

    def __init__(self, limit: int) -> None:
        """Name the bound that was exceeded."""
        super().__init__(f"an upstream stream event exceeded {limit:,} bytes")
        self.limit = limit
