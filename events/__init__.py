"""Typed events: the tagged union of every fact sessionwarden records, and their codec.

``CODEC`` knows every current event class and every upcaster; stores and projections
decode with it. To add an event type, see "How to add an event type" in docs/architecture/events.md.

``WITHDRAWN_TAGS`` are tags of the pre-release event schema that have no successor
(their facts now live in ``session.call_completed.v1``). Only logs of store schema 2 hold
them, and those are refused when opened, so the codec does not read them.
"""

from sessionwarden.events.base import Event, parse_tag
from sessionwarden.events.budgets import BUDGETS_STREAM, SessionCapSet
from sessionwarden.events.codec import EncodedEvent, EventCodec, Upcaster
from sessionwarden.events.context import (
    CONTEXT_UPCASTERS,
    SPILL_STREAM,
    CompactionRequested,
    CompactionSkipped,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContentRef,
    ContextCompressed,
    ContextLimits,
    HistoryReset,
    RequestRecord,
    SpillEvicted,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.events.credentials import (
    CREDENTIAL_UPCASTERS,
    CredentialAdded,
    CredentialRemoved,
)
from sessionwarden.events.credits import CreditNoticeCleared, CreditNoticeRaised, CreditsObserved
from sessionwarden.events.errors import EventDecodeError, EventError, UnknownEventType
from sessionwarden.events.keys import BreakerChanged, KeyStateChanged
from sessionwarden.events.prices import ListedPrice, PriceListingPublished
from sessionwarden.events.ratelimits import RateLimitBucketSeen, RateLimitsObserved
from sessionwarden.events.runaway import GuardrailTripped, IterationCounted, IterationsAdjusted
from sessionwarden.events.session import (
    OUTCOMES,
    SESSION_UPCASTERS,
    CallAdmitted,
    CallAttempt,
    CallCompleted,
    CallRefused,
    CallResent,
    SessionStarted,
)
from sessionwarden.events.store_events import STORE_UPCASTERS, WalCheckpointed

__all__ = [
    "ALL_EVENTS",
    "BUDGETS_STREAM",
    "CODEC",
    "CONTEXT_UPCASTERS",
    "CREDENTIAL_UPCASTERS",
    "OUTCOMES",
    "SESSION_UPCASTERS",
    "SPILL_STREAM",
    "STORE_UPCASTERS",
    "UPCASTERS",
    "WITHDRAWN_TAGS",
    "BreakerChanged",
    "CallAdmitted",
    "CallAttempt",
    "CallCompleted",
    "CallRefused",
    "CallResent",
    "CompactionRequested",
    "CompactionSkipped",
    "CompressionDropped",
    "CompressionPrepared",
    "CompressionPreparing",
    "ContentRef",
    "ContextCompressed",
    "ContextLimits",
    "CredentialAdded",
    "CredentialRemoved",
    "CreditNoticeCleared",
    "CreditNoticeRaised",
    "CreditsObserved",
    "EncodedEvent",
    "Event",
    "EventCodec",
    "EventDecodeError",
    "EventError",
    "GuardrailTripped",
    "HistoryReset",
    "IterationCounted",
    "IterationsAdjusted",
    "KeyStateChanged",
    "ListedPrice",
    "PriceListingPublished",
    "RateLimitBucketSeen",
    "RateLimitsObserved",
    "RequestRecord",
    "SessionCapSet",
    "SessionStarted",
    "SpillEvicted",
    "SummariserFailed",
    "ToolResultSpilled",
    "UnknownEventType",
    "Upcaster",
    "WalCheckpointed",
    "parse_tag",
]

#: Every current event class; a class missing here cannot be written or read.
ALL_EVENTS: tuple[type[Event], ...] = (
    SessionStarted,
    CallAdmitted,
    CallRefused,
    CallCompleted,
    CallResent,
    ToolResultSpilled,
    HistoryReset,
    ContextCompressed,
    SummariserFailed,
    CompactionRequested,
    CompactionSkipped,
    CompressionPreparing,
    CompressionPrepared,
    CompressionDropped,
    SpillEvicted,
    CredentialAdded,
    CredentialRemoved,
    RateLimitsObserved,
    SessionCapSet,
    WalCheckpointed,
    CreditsObserved,
    CreditNoticeRaised,
    CreditNoticeCleared,
    PriceListingPublished,
    KeyStateChanged,
    BreakerChanged,
    IterationCounted,
    GuardrailTripped,
    IterationsAdjusted,
)

#: Every upcaster from a retired tag to its successor.
UPCASTERS: tuple[Upcaster, ...] = (*SESSION_UPCASTERS, *CONTEXT_UPCASTERS, *CREDENTIAL_UPCASTERS,
                                   *STORE_UPCASTERS)

#: Pre-release tags with no successor (see the module docstring).
WITHDRAWN_TAGS = frozenset({
    "session.upstream_responded.v1",
    "usage.recorded.v1",
    "credential.lease_acquired.v1",
    "credential.lease_released.v1",
})

CODEC = EventCodec(ALL_EVENTS, UPCASTERS)
