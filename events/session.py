"""Events of the session context: a governed agent session and the calls made in it."""

from typing import Any

from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster

__all__ = ["SESSION_UPCASTERS", "SessionStarted"]


class SessionStarted(Event, frozen=True, tag="session.started.v2"):
    """A session was seen for the first time.

    Version 2 added ``client`` (the User-Agent or integration name) and
    ``parent_session_id`` (for sub-agent sessions); version 1 events read as ``client=""``
    and no parent.
    """

    session_id: str
    model: str
    client: str = ""
    parent_session_id: str | None = None


def _session_started_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "client": "", "parent_session_id": None}


SESSION_UPCASTERS = (
    Upcaster("session.started.v1", "session.started.v2", _session_started_v1_to_v2),
)
