"""Events of the credential pool: keys are stored as a reference plus a fingerprint.

No event ever carries a secret: ``ref`` is where the key comes from (``env:NAME``) and
``fingerprint`` is a salted hash prefix that identifies it in views and logs. Leases are
not events: which key served a call is a field of the call's completion, and the number
of leases in flight is the pool's memory (zero after a restart).
"""

from typing import Any, ClassVar

from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster

__all__ = ["CREDENTIAL_UPCASTERS", "CredentialAdded", "CredentialRemoved"]


class CredentialAdded(Event, frozen=True):
    """A key reference joined a provider's pool (stream ``credentials-<provider>``)."""

    TAG: ClassVar[str] = "credential.added.v2"

    provider: str
    ref: str
    fingerprint: str
    source: str = "config"


class CredentialRemoved(Event, frozen=True):
    """A key left a provider's pool."""

    TAG: ClassVar[str] = "credential.removed.v2"

    provider: str
    fingerprint: str
    reason: str = ""


def _same(fields: dict[str, Any]) -> dict[str, Any]:
    return fields  # v2 only stopped storing the tag inside the payload


CREDENTIAL_UPCASTERS = (
    Upcaster("credential.added.v1", "credential.added.v2", _same),
    Upcaster("credential.removed.v1", "credential.removed.v2", _same),
)
