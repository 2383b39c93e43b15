"""Errors of the actor shells.

The tree::

    SessionwardenError
    └── ActorError
        ├── ActorUnavailable  an actor is not running or did not answer in time (it may be
        │                     restarting, or its supervisor gave up on it): the daemon
        │                     answers 503
        └── ActorCrash        raised inside an actor to stop it: its state can no longer
                              be trusted (its supervisor restarts it from the log)

Policy errors (a rejected usage block, no usable key, an unknown call) are the domain's:
``sessionwarden.domain.errors``.
"""

from sessionwarden.errors import SessionwardenError, Unavailable

__all__ = ["ActorCrash", "ActorError", "ActorUnavailable"]


class ActorError(SessionwardenError):
    """Base of the errors of the actors package."""


class ActorUnavailable(ActorError, Unavailable):
    """An actor is not running, or did not answer within the deadline."""


class ActorCrash(ActorError):
    """Raised inside an actor to stop it: its state can no longer be trusted."""
