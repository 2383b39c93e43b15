"""Events of the credits tracker: what a provider's credit balance did, and the notices.

Stream ``credits-<provider>``; every event names its key by fingerprint (``credential``),
because a balance belongs to the account behind a key. Written inside the append of the
completion whose response carried the credit headers (or by the rate guard itself for a
polled balance endpoint), and only when something changed that matters:

- :class:`CreditsObserved`: the tracker's state after a reading changed a latch, a band
  or a notice (``sessionwarden.domain.credits.notices.worth_recording``). It carries the reading
  and the latches, so the tracker recovers its exact state from the last one; a balance
  that merely counts down is not written on every call.
- :class:`CreditNoticeRaised` / :class:`CreditNoticeCleared`: a notice put up or taken
  down, with the message a person sees (validated ASCII figures, never a provider's free
  text, never a key).
"""

from typing import ClassVar

from sessionwarden.events.base import Event

__all__ = ["CreditNoticeCleared", "CreditNoticeRaised", "CreditsObserved"]


class CreditsObserved(Event, frozen=True):
    """A key's credit reading, and the tracker's latches after it (money in micros)."""

    TAG: ClassVar[str] = "credits.observed.v1"

    credential: str
    source: str = "header"
    remaining_micros: int = 0
    remaining_usd: str = "0.00"
    subscription_micros: int = 0
    subscription_usd: str = "0.00"
    rollover_micros: int = 0
    purchased_micros: int = 0
    purchased_usd: str = "0.00"
    as_of_ms: int = 0
    subscription_limit_micros: int | None = None
    subscription_limit_usd: str | None = None
    denominator_kind: str = "none"
    paid_access: bool = True
    seen_below_lowest: bool = False
    seen_grant_unspent: bool = False
    band: int | None = None
    grant_spent_shown: bool = False
    depleted_shown: bool = False


class CreditNoticeRaised(Event, frozen=True):
    """A credit notice went up for the key ``credential``.

    ``ttl_ms`` is how long a passing notice lasts from the event's ``recorded_at`` (the
    ``restored`` one); 0 means until a :class:`CreditNoticeCleared` takes it down.
    """

    TAG: ClassVar[str] = "credits.notice_raised.v1"

    credential: str
    key: str
    level: str
    message: str
    band: int | None = None
    ttl_ms: int = 0


class CreditNoticeCleared(Event, frozen=True):
    """The notice ``key`` of the key ``credential`` came down."""

    TAG: ClassVar[str] = "credits.notice_cleared.v1"

    credential: str
    key: str
