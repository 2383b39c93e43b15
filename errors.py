"""The root of every error sessionwarden raises on purpose.

Each package keeps its own ``errors.py`` whose classes derive from
:class:`SessionwardenError`, so a caller (above all the CLI) can catch one type and turn
it into a short message instead of a traceback. Errors are grouped by what the caller
should do, as httpx groups its own.

Rules:

:class:`Unavailable` is "a part of the daemon cannot serve now, retry later" (the HTTP
layer answers 503), so the call path catches that one class where it used to list
``(ActorUnavailable, StoreError)``.

The tree::

    SessionwardenError
    ├── Unavailable                                  retry later: the daemon answers 503
    │   ├── sessionwarden.store.errors.StoreError    (below, with the log's errors)
    │   └── sessionwarden.actors.errors.ActorUnavailable  (also an ActorError, below)
    ├── sessionwarden.store.errors.StoreError        the event log
    │   ├── ConflictError
    │   │   ├── WrongExpectedVersion
    │   │   ├── IdempotencyConflict
    │   │   └── TrackingConflict
    │   ├── RetriableError
    │   │   └── StoreBusy
    │   ├── StoreUnavailable
    │   │   ├── StoreClaimed
    │   │   └── SpillUnavailable
    │   ├── CorruptStore
    │   ├── StoreClosed
    │   └── StoreProgrammingError
    ├── sessionwarden.events.errors.EventError       event types and codec
    │   ├── UnknownEventType
    │   └── EventDecodeError
    ├── sessionwarden.config.errors.ConfigError      the configuration
    │   └── UnknownModel
    ├── sessionwarden.domain.errors.DomainError      policy
    │   ├── UsageRejected
    │   ├── NoCredential
    │   │   └── KeysBenched
    │   ├── UnknownCall
    │   ├── BrokenChain
    │   ├── ListingRejected
    │   └── BadPatterns
    ├── sessionwarden.actors.errors.ActorError       the actor shells
    │   ├── ActorUnavailable
    │   └── ActorCrash
    ├── sessionwarden.views.errors.ViewError         the read side
    │   └── NotReplayable
    ├── sessionwarden.upstream.errors.UpstreamError  wire formats and streams
    │   ├── MalformedRequest
    │   ├── MalformedResponse
    │   └── EventTooLarge
    └── sessionwarden.cmd.errors.CommandError        the CLI and the HTTP layer
        ├── UsageError
        ├── ListenError
        ├── UnsafeFile
        └── BodyTooLarge

``tests/test_exports.py`` checks that this drawing names every error class there is.
"""

__all__ = ["SessionwardenError", "Unavailable"]


class SessionwardenError(Exception):
    """Base of all deliberate sessionwarden errors; its message is safe to show a user."""


class Unavailable(SessionwardenError):
    """A part of the daemon cannot serve now (an actor down, the log not writable): retry.

    The HTTP layer answers 503 with a Retry-After; nothing was decided that a retry would
    contradict. Every :class:`~sessionwarden.store.errors.StoreError` is one (seen from a
    call, a log that cannot record is a daemon that cannot serve; inside the store a
    conflict says more), and :class:`~sessionwarden.actors.errors.ActorUnavailable`.
    """
