"""Events of the credential pool: keys are stored as a reference plus a fingerprint.

No event ever carries a secret: ``ref`` is where the key comes from (``env:NAME``) and
``fingerprint`` is a salted hash prefix that identifies it in views and logs.
"""

from sessionwarden.events.base import Event

__all__ = ["CredentialAdded", "CredentialRemoved", "LeaseAcquired", "LeaseReleased"]


class CredentialAdded(Event, frozen=True, tag="credential.added.v1"):
    """A key reference joined a provider's pool."""

    provider: str
    ref: str
    fingerprint: str
    source: str = "config"


class CredentialRemoved(Event, frozen=True, tag="credential.removed.v1"):
    """A key left a provider's pool."""

    provider: str
    fingerprint: str
    reason: str = ""


class LeaseAcquired(Event, frozen=True, tag="credential.lease_acquired.v1"):
    """A key was leased to serve one call."""

    provider: str
    fingerprint: str
    call_id: str


class LeaseReleased(Event, frozen=True, tag="credential.lease_released.v1"):
    """A call finished with its key; ``status`` is the upstream HTTP status (0: none)."""

    provider: str
    fingerprint: str
    call_id: str
    status: int = 0
