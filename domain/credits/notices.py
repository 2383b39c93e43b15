"""The credits tracker's notice policy: which credit notices to raise or clear, and when.

Pure: the caller (the usage-ledger actor) keeps one :class:`CreditState` per provider
account, folds each :class:`~sessionwarden.domain.credits.readings.CreditReading` into it
with :func:`observe`, and turns the returned :class:`Notice` values into events and the
``x-sessionwarden-notice`` response header. Time is an argument. The rules are Hermes's
credits tracker (hermes-behaviour.md §6), each with the fault it prevents:

Rules:

The overview: docs/architecture/credits.md, 'Notices to clients'.

- **Usage gauge** (key ``credits.usage``): bands at 50 % (info), 75 % and 90 % (warn) of
  the subscription cap; only the highest band reached is shown, and a band change (up or
  down) clears the old notice and shows the new one, so a band is announced once per
  crossing, never on every call. Boundaries are inclusive and exact (90 % of any cap
  fires the 90 % band: the fraction is a ``Fraction``, not a float).
- **The crossing latch**: bands fire only once the account was seen below the lowest
  band (Hermes's ``seen_below_90``), so a session that opens already at 80 % stays
  silent: that is a steady state, which ``status`` shows, not news. A seed reading
  (``seed=True``, e.g. an account lookup at session start) primes this latch, so opening
  in a band warns at once, and it never overrides a reading already taken.
- **Top-up suppression**: with purchased credit the gauge is off (90 % of the grant is
  noise when a top-up pays; in Hermes it once stuck forever beside ``grant_spent``).
  The gauge also clears when use falls below 50 % or the cap disappears.
- **Grant spent** (``credits.grant_spent``): the cap is fully used (``subscription_cap``
  kind) and purchased credit remains. Shown only after this account was seen with the
  grant unspent (under 100 % and at least :data:`GRANT_UNSPENT_MIN_MICROS` left), and
  showing consumes that latch: one announcement per crossing. A seed does not prime it
  (priming would revive the nag at every session start: only a reading that shows the
  grant unspent arms it), and the 1-cent floor keeps sub-cent residue from converted
  dollars from arming it either. Cleared when the condition ends.
  *Version drift*: an older Hermes test fired it on the first observation; we follow
  the newer code.
- **Depleted** (``credits.depleted``, error, sticky): paid access is off. Never inferred
  from a zero balance (zero with access live is a pending renewal). Not shown while the
  call's model is free (inference still works; the caller decides what is free, from
  local data only: Hermes's ``:free`` suffix and ``stealth/`` prefix, or a zero price);
  switching to a free model clears it *without* "restored". A genuine return of paid
  access clears it and raises ``credits.restored`` (success, lasting
  :data:`RESTORED_TTL_MS`); a recovery never shown as depleted restores nothing.

Decisions where §6 is silent: a reading older than the last one from the same source
(``as_of_ms`` going back, as parallel responses may arrive out of order) is ignored, so
notices do not flap, unless the last one is dated more than :data:`AS_OF_SKEW_MS` ahead
of our clock (one answer dated years ahead must not freeze the notices); messages are
ASCII (they travel in an HTTP header), one line, without ``;`` (it separates notices in
the header), and carry only validated figures (never a header's free text, never a key).
Balance endpoints are polled at most once a minute per account (:func:`next_poll`):
notices move in 15-25 point bands, so a minute's lag changes nothing, while each poll is
a request against the same key's rate limit.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Literal

import msgspec
from sessionwarden.domain.credits.readings import CreditReading

__all__ = [
    "AS_OF_SKEW_MS",
    "BANDS",
    "GRANT_UNSPENT_MIN_MICROS",
    "POLL_INTERVAL",
    "RESTORED_TTL_MS",
    "CreditState",
    "Notice",
    "NoticeKind",
    "header_value",
    "next_poll",
    "observe",
    "shown",
]

#: The usage bands, ascending: (share of the cap, percent, level).
BANDS: tuple[tuple[Fraction, int, Literal["info", "warn"]], ...] = (
    (Fraction(1, 2), 50, "info"),
    (Fraction(3, 4), 75, "warn"),
    (Fraction(9, 10), 90, "warn"),
)
#: A grant counts as unspent from 1 cent up: sub-cent residue is rounding, not a grant.
GRANT_UNSPENT_MIN_MICROS = 10_000
#: How far ahead of our clock a reading's ``as_of_ms`` may be and still order readings.
AS_OF_SKEW_MS = 5 * 60 * 1000
#: How long the "restored" notice lasts.
RESTORED_TTL_MS = 8000
#: The least time between two polls of one account's balance endpoint.
POLL_INTERVAL = timedelta(minutes=1)

#: What a notice is about.
NoticeKind = Literal["band", "grant_spent", "depleted", "restored"]
_KEYS: dict[str, str] = {
    "band": "credits.usage",
    "grant_spent": "credits.grant_spent",
    "depleted": "credits.depleted",
    "restored": "credits.restored",
}
_CENT = Decimal("0.01")


class Notice(msgspec.Struct, frozen=True, kw_only=True):
    """A credit notice to raise (``action="show"``) or take down (``action="clear"``).

    Attributes:
        kind: ``"band"``, ``"grant_spent"``, ``"depleted"`` or ``"restored"``.
        action: ``"show"`` or ``"clear"``; within one result clears come first.
        key: the notice's stable key (``"credits.usage"``, …): a clear names what it clears.
        level: ``"info"``, ``"warn"``, ``"error"`` or ``"success"``.
        message: one short ASCII line for a person.
        band: the percent band (50, 75, 90) of a band notice, else None.
        expires_at: when a passing notice (``restored``) lapses; None: until cleared.
    """

    kind: NoticeKind
    action: Literal["show", "clear"]
    key: str
    level: Literal["info", "warn", "error", "success"]
    message: str
    band: int | None = None
    expires_at: datetime | None = None


class CreditState(msgspec.Struct, frozen=True, kw_only=True):
    """What the policy remembers of one account between readings.

    Attributes:
        reading: the last reading taken into account (None: none yet).
        observed_at: when it was observed.
        seen_below_lowest: the crossing latch: usage was once seen under the lowest band.
        seen_grant_unspent: the grant-spent latch: the grant was seen unspent since the
            last announcement.
        band: the usage band shown (50, 75, 90), or None.
        grant_spent_shown: whether the grant-spent notice is up.
        depleted_shown: whether the depleted notice is up.
    """

    reading: CreditReading | None = None
    observed_at: datetime | None = None
    seen_below_lowest: bool = False
    seen_grant_unspent: bool = False
    band: int | None = None
    grant_spent_shown: bool = False
    depleted_shown: bool = False


def _money(micros: int) -> str:
    return f"{(Decimal(micros) / 1_000_000).quantize(_CENT, ROUND_HALF_EVEN):f}"


def _band_notice(reading: CreditReading, band: int) -> Notice:
    used = reading.used_micros
    level = next(lvl for _, pct, lvl in BANDS if pct == band)
    return Notice(
        kind="band",
        action="show",
        key=_KEYS["band"],
        level=level,
        band=band,
        message=(
            f"used ${'?' if used is None else _money(used)} of the "
            f"${reading.subscription_limit_usd or '?'} credit cap ({band}%)"
        ),
    )


def _grant_notice(reading: CreditReading) -> Notice:
    return Notice(
        kind="grant_spent",
        action="show",
        key=_KEYS["grant_spent"],
        level="info",
        message=f"credit grant spent, ${reading.purchased_usd} top-up left",
    )


_DEPLETED = Notice(
    kind="depleted",
    action="show",
    key=_KEYS["depleted"],
    level="error",
    message="paid credit access paused, top up the account to use paid models",
)


def _clear(kind: NoticeKind) -> Notice:
    return Notice(
        kind=kind,
        action="clear",
        key=_KEYS[kind],
        level="info",
        message=f"{_KEYS[kind]} cleared",
    )


def _stale(state: CreditState, reading: CreditReading, now: datetime) -> bool:
    last = state.reading
    return (
        last is not None
        and last.source == reading.source
        and reading.as_of_ms > 0
        and reading.as_of_ms < last.as_of_ms
        # A last reading dated in the future is no order to keep: one answer dated
        # years ahead would otherwise make every later one "older", ignored for good.
        and last.as_of_ms <= now.timestamp() * 1000 + AS_OF_SKEW_MS
    )


def observe(
    state: CreditState,
    reading: CreditReading,
    *,
    model_is_free: bool,
    now: datetime,
    seed: bool = False,
) -> tuple[CreditState, tuple[Notice, ...]]:
    """Fold ``reading`` into ``state``: the new state and the notices to clear, then show.

    Args:
        state: the account's state so far (``CreditState()`` for a new one).
        reading: what the provider just reported.
        model_is_free: whether the call's model costs nothing (suppresses ``depleted``).
        now: the observation time (the ``restored`` notice's expiry counts from it).
        seed: the reading is a start-of-session lookup, not a live one: ignored once a
            reading was taken; otherwise it primes the crossing latch (only that one).

    Returns:
        The new state and the notices, clears before shows. A reading older than the last
        one of its source changes nothing.
    """
    if (seed and state.reading is not None) or _stale(state, reading, now):
        return state, ()
    uf = reading.used_fraction
    below = state.seen_below_lowest or (uf is not None and (seed or uf < BANDS[0][0]))
    unspent = state.seen_grant_unspent or (
        uf is not None and uf < 1 and reading.subscription_micros >= GRANT_UNSPENT_MIN_MICROS
    )
    clears: list[Notice] = []
    shows: list[Notice] = []

    band: int | None = None
    if uf is not None and reading.purchased_micros <= 0 and below:
        band = next((pct for share, pct, _ in reversed(BANDS) if uf >= share), None)
    if band != state.band:
        if state.band is not None:
            clears.append(_clear("band"))
        if band is not None:
            shows.append(_band_notice(reading, band))

    grant = (
        reading.denominator_kind == "subscription_cap"
        and uf is not None
        and uf >= 1
        and reading.purchased_micros > 0
    )
    grant_shown = state.grant_spent_shown
    if grant and not grant_shown and unspent:
        shows.append(_grant_notice(reading))
        grant_shown, unspent = True, False
    elif grant_shown and not grant:
        clears.append(_clear("grant_spent"))
        grant_shown = False

    show_depleted = reading.depleted and not model_is_free
    if show_depleted and not state.depleted_shown:
        shows.append(_DEPLETED)
    elif state.depleted_shown and not show_depleted:
        clears.append(_clear("depleted"))
        if not reading.depleted:  # a genuine return; a switch to a free model is not one
            shows.append(
                Notice(
                    kind="restored",
                    action="show",
                    key=_KEYS["restored"],
                    level="success",
                    message="paid credit access restored",
                    expires_at=now + timedelta(milliseconds=RESTORED_TTL_MS),
                )
            )
    new = CreditState(
        reading=reading,
        observed_at=now,
        seen_below_lowest=below,
        seen_grant_unspent=unspent,
        band=band,
        grant_spent_shown=grant_shown,
        depleted_shown=show_depleted,
    )
    return new, (*clears, *shows)


def shown(state: CreditState) -> tuple[Notice, ...]:
    """The sticky notices up for this account now (what ``status`` lists), in key order."""
    reading = state.reading
    if reading is None:
        return ()
    up: list[Notice] = []
    if state.band is not None:
        up.append(_band_notice(reading, state.band))
    if state.grant_spent_shown:
        up.append(_grant_notice(reading))
    if state.depleted_shown:
        up.append(_DEPLETED)
    return tuple(sorted(up, key=lambda n: n.key))


def header_value(notices: Iterable[Notice]) -> str | None:
    """The ``x-sessionwarden-notice`` value for some notices: the shown ones, ``; ``-joined.

    Each is ``<level> <key>: <message>``; None when none is shown. ASCII, one line.
    """
    parts = [f"{n.level} {n.key}: {n.message}" for n in notices if n.action == "show"]
    return "; ".join(parts) or None


def next_poll(last: datetime, now: datetime) -> datetime:
    """When an account's balance endpoint may next be polled, given the ``last`` poll.

    At most once per :data:`POLL_INTERVAL`: ``last + POLL_INTERVAL``, or ``now`` when that
    is already past. A ``last`` in the future (the clock was set back) waits at most one
    interval from ``now``, never longer.
    """
    due = last + POLL_INTERVAL
    return min(max(due, now), now + POLL_INTERVAL)
