"""The root of every error sessionwarden raises on purpose.

Each package keeps its own ``errors.py`` whose classes derive from
:class:`SessionwardenError`, so a caller (above all the CLI) can catch one type and turn
it into a short message instead of a traceback::

    SessionwardenError
    ├── sessionwarden.store.errors.StoreError      (the event log)
    ├── sessionwarden.events.errors.EventError     (event types and codec)
    └── sessionwarden.cmd.errors.CommandError      (CLI usage and configuration)
"""

__all__ = ["SessionwardenError"]


class SessionwardenError(Exception):
    """Base of all deliberate sessionwarden errors; its message is safe to show a user."""
