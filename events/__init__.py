"""Typed events: the tagged union of every fact sessionwarden records, and their codec.

``CODEC`` knows every current event class and every upcaster; stores and projections
decode with it. To add an event type, see "How to add an event type" in ARCHITECTURE.md.
"""

from sessionwarden.events.base import Event, parse_tag
from sessionwarden.events.codec import EncodedEvent, EventCodec, Upcaster
from sessionwarden.events.credentials import (
    CredentialAdded,
    CredentialRemoved,
    LeaseAcquired,
    LeaseReleased,
)
from sessionwarden.events.errors import EventDecodeError, EventError, UnknownEventType
from sessionwarden.events.session import (
    SESSION_UPCASTERS,
    CallAdmitted,
    RateLimitBucketSeen,
    SessionStarted,
    UpstreamResponded,
)
from sessionwarden.events.store_events import WalCheckpointed
from sessionwarden.events.usage import UsageRecorded

__all__ = [
    "ALL_EVENTS",
    "CODEC",
    "SESSION_UPCASTERS",
    "CallAdmitted",
    "CredentialAdded",
    "CredentialRemoved",
    "EncodedEvent",
    "Event",
    "EventCodec",
    "EventDecodeError",
    "EventError",
    "LeaseAcquired",
    "LeaseReleased",
    "RateLimitBucketSeen",
    "SessionStarted",
    "UnknownEventType",
    "Upcaster",
    "UpstreamResponded",
    "UsageRecorded",
    "WalCheckpointed",
    "parse_tag",
]

#: Every current event class; a class missing here cannot be written or read.
ALL_EVENTS: tuple[type[Event], ...] = (
    SessionStarted,
    CallAdmitted,
    UpstreamResponded,
    CredentialAdded,
    CredentialRemoved,
    LeaseAcquired,
    LeaseReleased,
    UsageRecorded,
    WalCheckpointed,
)

CODEC = EventCodec(ALL_EVENTS, SESSION_UPCASTERS)
