"""Errors of the event log, classified by what the caller should do about them.

The tree::

    SessionwardenError
    └── StoreError
        ├── ConflictError              the log is not in the state the caller assumed:
        │   │                          re-read, decide again; retrying blindly is wrong
        │   ├── WrongExpectedVersion   a stream's head differs from the expected version
        │   ├── IdempotencyConflict    an idempotency key was stored with other content
        │   └── TrackingConflict       a tracking position did not strictly advance
        ├── RetriableError             nothing is wrong with the request; try again later
        │   └── StoreBusy              the write lock could not be had within the budget
        ├── StoreUnavailable           the database cannot be opened or written (missing
        │   │                          file, permissions, read-only or full disk)
        │   ├── StoreClaimed           another daemon holds the database's instance lock
        │   └── SpillUnavailable       a spill file cannot be written (the directory is
        │                              a symlink or another user's, permissions, full
        │                              disk): the caller truncates the result inline
        ├── CorruptStore               SQLite reports corruption or the schema is foreign
        ├── StoreClosed                the log was closed before the operation ran
        └── StoreProgrammingError      a bug: bad arguments, or a projection that raised

A conflict is never retriable and a retriable error is never a conflict: this is the
split eventsourcing makes between ``IntegrityError`` and ``OperationalError``.
"""

from sessionwarden.errors import Unavailable

__all__ = [
    "ConflictError",
    "CorruptStore",
    "IdempotencyConflict",
    "RetriableError",
    "SpillUnavailable",
    "StoreBusy",
    "StoreClaimed",
    "StoreClosed",
    "StoreError",
    "StoreProgrammingError",
    "StoreUnavailable",
    "TrackingConflict",
    "WrongExpectedVersion",
]


class StoreError(Unavailable):
    """Base of every error of the event log.

    An :class:`~sessionwarden.errors.Unavailable`: seen from a call, a log that cannot
    record is a daemon that cannot serve.
    """


class ConflictError(StoreError):
    """The log is not in the state the caller assumed; nothing was written."""


class WrongExpectedVersion(ConflictError):
    """A stream's head version differs from the version the append expected."""

    def __init__(self, stream: str, expected: object, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, append expected {expected}"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class IdempotencyConflict(ConflictError):
    """An idempotency key already names an event with different content."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"idempotency key {key!r} {reason}")
        self.key = key


class TrackingConflict(ConflictError):
    """A tracking position was not strictly greater than the stored one."""

    def __init__(self, name: str, position: int, current: int) -> None:
        super().__init__(
            f"tracking {name!r} is at position {current}; {position} does not advance it"
        )
        self.name = name
        self.position = position
        self.current = current


class RetriableError(StoreError):
    """A transient condition; the same request may succeed later."""


class StoreBusy(RetriableError):
    """The write lock could not be acquired within the retry budget."""


class StoreUnavailable(StoreError):
    """The database cannot be opened or written: missing, unreadable, read-only or full."""


class StoreClaimed(StoreUnavailable):
    """Another daemon holds the single-instance lock of this database."""


class SpillUnavailable(StoreUnavailable):
    """A spill file cannot be written; the caller falls back to inline truncation."""


class CorruptStore(StoreError):
    """SQLite reports corruption, or the file is not a sessionwarden event log."""


class StoreClosed(StoreError):
    """The event log was closed before the operation could run."""


class StoreProgrammingError(StoreError):
    """A bug in the caller or in a projection; retrying will not help."""
