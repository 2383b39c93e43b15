"""Events of the credential pool: keys are stored as a reference plus a fingerprint.

No event ever carries a secret: ``ref`` is where the key comes from (``env:NAME``) and
``fingerprint`` is a salted hash prefix that identifies it in views and logs.
"""

from sessionwarden.events.base import Event

__all__ = ["CredentialAdded", "CredentialRemoved"]


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
