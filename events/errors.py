"""Errors raised while encoding and decoding events.

The tree::

    SessionwardenError
    └── EventError
        ├── UnknownEventType     a stored type tag no registered class or upcaster knows
        └── EventDecodeError     a payload that does not match its declared type
"""

from sessionwarden.errors import SessionwardenError

__all__ = ["EventDecodeError", "EventError", "UnknownEventType"]


class EventError(SessionwardenError):
    """Base of the errors of the events package."""


class UnknownEventType(EventError):
    """Raised when a stored event's type tag is not known to this version of the code.

    Stored events are never skipped silently: an unknown type means the log was written by
    a newer version, or the tag of a class was changed (which must never happen).
    """

    def __init__(self, type_tag: str) -> None:
        super().__init__(f"unknown event type {type_tag!r}")
        self.type_tag = type_tag


class EventDecodeError(EventError):
    """Raised when a payload cannot be decoded into the struct its type tag names."""

    def __init__(self, type_tag: str, reason: str) -> None:
        super().__init__(f"cannot decode event {type_tag!r}: {reason}")
        self.type_tag = type_tag
        self.reason = reason
