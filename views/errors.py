"""Errors of the read side: what a view cannot answer from the log.

The tree::

    SessionwardenError
    └── ViewError
        └── NotReplayable   no such session or call, or its recorded chain is broken

Messages are safe to show a user (escaped, never a secret).
"""

from sessionwarden.errors import SessionwardenError

__all__ = ["NotReplayable", "ViewError"]


class ViewError(SessionwardenError):
    """Base of the read side's errors."""


class NotReplayable(ViewError):
    """The call asked for cannot be rebuilt from the log (unknown, refused, or broken)."""
