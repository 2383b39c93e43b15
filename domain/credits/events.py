"""The credits tracker's state and notices as events, and back; which readings to record.

Pure glue between the notice policy (``sessionwarden.domain.credits.notices``) and the log
(``sessionwarden.events.credits``), used by the rate guard that owns the tracker:

- :func:`track` folds one reading into a key's
  :class:`~sessionwarden.domain.credits.notices.CreditState` and returns the events to
  append: a :class:`CreditsObserved` only when :func:`worth_recording` says so, then one
  event per notice (clears first).
- :func:`state_of` rebuilds the state from the last :class:`CreditsObserved`, which
  carries the reading and every latch, so a restart resumes exactly where the log was.
- :func:`model_is_free` is the free-model test the policy leaves to its caller (§6: local
  data only): Hermes's ``:free`` suffix and ``stealth/`` prefix, or a price book entry of
  zero for both input and output with no per-request fee. A miss (no price, an unknown
  model) means *not* free. A subscription route (``included``) is not free: its depletion
  is real news.

**Worth recording.** A balance counts down on every call; writing it each time would add
an event to every call of a provider that sends credit headers. The state is recorded
when a latch, the band or a shown flag changes (every notice changes one of them, except
``restored``, recorded by its own event), or when the key has no recorded state yet.
Between two records the reading itself is not kept: after a restart the tracker knows the
latches and the notices exactly, and the figures of the last recorded reading.
"""

from datetime import datetime

from sessionwarden.domain.cost.pricing import PriceLookup
from sessionwarden.domain.credits.notices import CreditState, Notice, observe
from sessionwarden.domain.credits.readings import CreditReading
from sessionwarden.events import CreditNoticeCleared, CreditNoticeRaised, CreditsObserved, Event

__all__ = ["model_is_free", "notice_event", "observed_event", "state_of", "track",
           "worth_recording"]

_FREE_SUFFIX = ":free"
_FREE_PREFIX = "stealth/"


def model_is_free(model: str, lookup: PriceLookup | None) -> bool:
    """Whether ``model`` costs nothing: a ``:free`` or ``stealth/`` id, or a zero price."""
    if model.endswith(_FREE_SUFFIX) or model.startswith(_FREE_PREFIX):
        return True
    price = lookup.price if lookup is not None and lookup.kind == "price" else None
    if price is None:
        return False
    return price.input == 0 and price.output == 0 and not price.request and not price.tiers


def _latches(state: CreditState) -> tuple[bool, bool, int | None, bool, bool]:
    return (state.seen_below_lowest, state.seen_grant_unspent, state.band,
            state.grant_spent_shown, state.depleted_shown)


def worth_recording(before: CreditState, after: CreditState) -> bool:
    """Whether ``after`` must be written: a first state, or a latch, band or flag changed."""
    if after.reading is None:
        return False
    return before.reading is None or _latches(before) != _latches(after)


def observed_event(credential: str, state: CreditState) -> CreditsObserved:
    """The :class:`CreditsObserved` that records ``state`` (which must hold a reading)."""
    r = state.reading
    assert r is not None
    return CreditsObserved(
        credential=credential, source=r.source, remaining_micros=r.remaining_micros,
        remaining_usd=r.remaining_usd, subscription_micros=r.subscription_micros,
        subscription_usd=r.subscription_usd, rollover_micros=r.rollover_micros,
        purchased_micros=r.purchased_micros, purchased_usd=r.purchased_usd,
        as_of_ms=r.as_of_ms, subscription_limit_micros=r.subscription_limit_micros,
        subscription_limit_usd=r.subscription_limit_usd,
        denominator_kind=r.denominator_kind, paid_access=r.paid_access,
        seen_below_lowest=state.seen_below_lowest,
        seen_grant_unspent=state.seen_grant_unspent, band=state.band,
        grant_spent_shown=state.grant_spent_shown, depleted_shown=state.depleted_shown,
    )


def state_of(event: CreditsObserved, observed_at: datetime | None) -> CreditState:
    """The tracker's state as ``event`` recorded it (``observed_at``: its recorded time)."""
    reading = CreditReading(
        remaining_micros=event.remaining_micros, remaining_usd=event.remaining_usd,
        subscription_micros=event.subscription_micros, subscription_usd=event.subscription_usd,
        rollover_micros=event.rollover_micros, purchased_micros=event.purchased_micros,
        purchased_usd=event.purchased_usd, as_of_ms=event.as_of_ms,
        subscription_limit_micros=event.subscription_limit_micros,
        subscription_limit_usd=event.subscription_limit_usd,
        denominator_kind=("subscription_cap" if event.denominator_kind == "subscription_cap"
                          else "none"),
        paid_access=event.paid_access,
        source="balance" if event.source == "balance" else "header",
    )
    return CreditState(
        reading=reading, observed_at=observed_at,
        seen_below_lowest=event.seen_below_lowest, seen_grant_unspent=event.seen_grant_unspent,
        band=event.band, grant_spent_shown=event.grant_spent_shown,
        depleted_shown=event.depleted_shown,
    )


def notice_event(credential: str, notice: Notice, now: datetime) -> Event:
    """The event of one notice: raised (with its lifetime, for a passing one) or cleared."""
    if notice.action == "clear":
        return CreditNoticeCleared(credential=credential, key=notice.key)
    ttl = 0
    if notice.expires_at is not None:
        ttl = max(1, int((notice.expires_at - now).total_seconds() * 1000))
    return CreditNoticeRaised(credential=credential, key=notice.key, level=notice.level,
                              message=notice.message, band=notice.band, ttl_ms=ttl)


def track(
    state: CreditState, credential: str, reading: CreditReading, *, model_is_free: bool,
    now: datetime, seed: bool = False,
) -> tuple[CreditState, tuple[Notice, ...], tuple[Event, ...]]:
    """Observe ``reading``: the new state, its notices and the events to append (in order).

    The events are a :class:`CreditsObserved` when :func:`worth_recording`, then one per
    notice, clears first; none when nothing changed that matters.
    """
    new, notices = observe(state, reading, model_is_free=model_is_free, now=now, seed=seed)
    events: list[Event] = []
    if worth_recording(state, new):
        events.append(observed_event(credential, new))
    events.extend(notice_event(credential, n, now) for n in notices)
    return new, notices, tuple(events)
