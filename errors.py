"""The root of every error sessionwarden raises on purpose.

Each package keeps its own ``errors.py`` whose classes derive from
:class:`SessionwardenError`, so a caller (above all the CLI) can catch one type and turn
it into a short message instead of a traceback. The whole tree::

    SessionwardenError
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

__all__ = ["SessionwardenError"]


class SessionwardenError(Exception):
    """Base of all deliberate sessionwarden errors; its message is safe to show a user."""
