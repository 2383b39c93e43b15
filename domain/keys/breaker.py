"""The provider breaker: fail fast while a provider cannot serve, then one probe (pure).

peers.md §9 asks for a real breaker, observable, whose half-open state lets only a few
probes through; hermes-behaviour.md §5 for a guard shared by every session that survives
restarts. Which 429s count as genuine limits is ``sessionwarden.domain.classify.limits``; which
keys are usable is ``sessionwarden.domain.keys.key_states``.

Rules:

The overview: docs/architecture/keys-and-failover.md, 'Key states and the breaker'.

- *Opens* (event ``ratelimit.breaker_changed.v1``) when no key of the provider is usable
  (:func:`on_keys_changed`, reason ``no_usable_key``, until the earliest return of a key;
  None when every key is dead), or on sustained overload: :data:`OVERLOAD_FAILURES`
  consecutive overloaded/5xx/timeout failures within :data:`OVERLOAD_WINDOW_SECONDS`, no
  success between (reason ``overload``, for 30 s, or the upstream's ``Retry-After`` if
  longer, capped at 300 s). The threshold follows LiteLLM's Redis breaker (5 failures) and
  counts the daemon's own bounded retries (≤ 2 per call), so two client calls failing
  in full open it. An *unreachable* provider (a refused connection, a failed DNS lookup
  or TLS handshake: class ``unreachable``, kind ``other``) does not count: it is neither
  a limit nor an overload, and nothing is spared by refusing — finding out costs a
  connection attempt, not a call's tokens — while a breaker would go on refusing for
  its whole cool-down after the server is back. Each call tries, and says why it could
  not (the proxy's 502 ``provider_unreachable``). A timeout, connecting or reading, does
  count: each costs the client the whole wait.
- *Open*: :func:`decide` refuses at once with a truthful ``Retry-After`` (whole seconds,
  rounded up): the breaker's ``until``, which for ``no_usable_key`` is the earliest moment a
  key returns.
- *Half-open* once ``until`` has passed: exactly one call is let through as the probe
  (:func:`claim_probe`); the others are refused with a 1 s ``Retry-After`` while it is out.
  Its success closes the breaker (reason ``recovered``); an overload failure re-opens it for
  twice the last cool-down (60, 120, 240, 300 s); a key failure re-benches that key and
  :func:`on_keys_changed` re-opens it until the next key returns. A probe whose outcome
  never arrives frees the slot after :data:`PROBE_TIMEOUT_SECONDS`.
- A key coming back early (``keys reset``, a key added) closes a ``no_usable_key`` breaker
  (reason ``key_available``); ``breaker reset`` closes it by hand (:func:`reset`).

What survives a restart is what the events say (state, until, reason, consecutive overload
openings). The overload streak and the probe slot are memory, like a key's leases: after a
restart no probe is in flight, and an overload streak starts again from zero.

How the caller drives it: before a call, :func:`decide`; on ``probe``, :func:`claim_probe`
and send the call on a usable key. After it, fold the key events (``key_states``), then
:func:`on_call_failed` or :func:`on_call_succeeded` (any upstream answer that is neither a
key failure nor an overload — a 400 too — shows the provider serving), then
:func:`on_keys_changed`; append and fold every event returned. A call that ends with no
answer at all (its client left) is :func:`probe_abandoned`: if it was the probe, the next
call may probe at once. A provider without keys
(simulated) has no breaker to ask.
"""

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import msgspec
from sessionwarden.domain.keys.key_states import (
    KeyStates,
    earliest_return,
    format_time,
    parse_time,
    usable,
)
from sessionwarden.events import BreakerChanged, Event

__all__ = [
    "OVERLOAD_COOLDOWN_MAX_SECONDS",
    "OVERLOAD_COOLDOWN_SECONDS",
    "OVERLOAD_FAILURES",
    "OVERLOAD_KINDS",
    "OVERLOAD_WINDOW_SECONDS",
    "PROBE_TIMEOUT_SECONDS",
    "PROBE_WAIT_SECONDS",
    "Breaker",
    "Decision",
    "claim_probe",
    "decide",
    "on_call_failed",
    "on_call_succeeded",
    "on_keys_changed",
    "probe_abandoned",
    "reset",
]

OVERLOAD_FAILURES = 5
OVERLOAD_WINDOW_SECONDS = 60.0
OVERLOAD_COOLDOWN_SECONDS = 30.0
OVERLOAD_COOLDOWN_MAX_SECONDS = 300.0
PROBE_TIMEOUT_SECONDS = 30.0
PROBE_WAIT_SECONDS = 1
#: Failure kinds that say the provider, not the key, is struggling.
OVERLOAD_KINDS = frozenset({"overloaded", "server_error", "timeout"})


Mode = Literal["closed", "open", "half_open"]


class Breaker(msgspec.Struct, frozen=True, kw_only=True):
    """One provider's breaker: folded state, plus the memory-only streak and probe slot.

    Attributes:
        state: ``closed`` or ``open`` (half-open is ``open`` with ``until`` passed).
        until: when an open breaker lets a probe through; None: no foreseeable end.
        reason: why it last changed (see the event).
        openings: overload openings since it last closed (the cool-down doubles with them).
        failures: memory: times of the current streak of overload failures.
        probe_at: memory: when the probe in flight was let through.
        probe_call: memory: the attempt that is the probe, as its caller names it (a call
            and its key), ``""`` when not named.
    """

    provider: str
    state: Literal["closed", "open"] = "closed"
    until: datetime | None = None
    reason: str = ""
    openings: int = 0
    failures: tuple[datetime, ...] = ()
    probe_at: datetime | None = None
    probe_call: str = ""

    def mode(self, now: datetime) -> Mode:
        """``closed``, ``open``, or ``half_open`` (open and its ``until`` has passed)."""
        if self.state == "closed":
            return "closed"
        if self.until is None or now < self.until:
            return "open"
        return "half_open"

    def fold(self, event: Event) -> "Breaker":
        """The breaker after ``event``; other providers' and types' events change nothing."""
        if not isinstance(event, BreakerChanged) or event.provider != self.provider:
            return self
        if event.state == "open":
            openings = self.openings + 1 if event.reason == "overload" else self.openings
            return msgspec.structs.replace(
                self, state="open", until=parse_time(event.until), reason=event.reason,
                openings=openings, failures=(), probe_at=None,
            )
        return msgspec.structs.replace(
            self, state="closed", until=None, reason=event.reason, openings=0,
            failures=(), probe_at=None,
        )

    @classmethod
    def replay(cls, provider: str, events: Iterable[Event]) -> "Breaker":
        """Fold ``events`` in order from a closed breaker (what a restart does)."""
        breaker = cls(provider=provider)
        for event in events:
            breaker = breaker.fold(event)
        return breaker


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """Whether a call to the provider may go now.

    Attributes:
        action: ``pass`` (a normal call), ``probe`` (the one half-open call: the caller
            must :func:`claim_probe` and report its outcome) or ``refuse``.
        retry_after: for a refusal, whole seconds until it is worth trying again; None
            when no end is foreseeable (every key dead).
        until: the moment behind ``retry_after``.
        reason: ``no_usable_key``, ``overload``, ``probing``, or ``""`` for a pass.
    """

    action: Literal["pass", "probe", "refuse"]
    retry_after: int | None = None
    until: datetime | None = None
    reason: str = ""


def _refuse(until: datetime | None, now: datetime, reason: str) -> Decision:
    if until is None:
        return Decision(action="refuse", reason=reason)
    wait = max(1, math.ceil((until - now).total_seconds()))
    return Decision(action="refuse", retry_after=wait, until=until, reason=reason)


def decide(breaker: Breaker, keys: KeyStates, pool: Sequence[str], now: datetime) -> Decision:
    """Whether a call may go to the provider at ``now`` (no state changes; see module doc).

    ``pool`` is the provider's entries' fingerprints. The keys are the truth about
    ``no_usable_key``: a key usable now (reset by hand) lets calls pass even if the
    breaker has not recorded its closing yet.
    """
    free = usable(keys, pool, now)
    mode = breaker.mode(now)
    if mode == "open" and not (breaker.reason == "no_usable_key" and free):
        return _refuse(breaker.until, now, breaker.reason or "no_usable_key")
    if not free:
        return _refuse(earliest_return(keys, pool, now), now, "no_usable_key")
    if mode == "half_open":
        if breaker.probe_at is not None \
                and (now - breaker.probe_at).total_seconds() < PROBE_TIMEOUT_SECONDS:
            return _refuse(now + timedelta(seconds=PROBE_WAIT_SECONDS), now, "probing")
        return Decision(action="probe")
    return Decision(action="pass")


def claim_probe(breaker: Breaker, now: datetime, attempt: str = "") -> Breaker:
    """The breaker with its probe slot taken at ``now`` by ``attempt`` (after ``probe``)."""
    return msgspec.structs.replace(breaker, probe_at=now, probe_call=attempt)


def probe_abandoned(breaker: Breaker, attempt: str) -> Breaker:
    """The breaker once ``attempt`` ended without an answer from the upstream.

    If that attempt was the probe (the client left while it was out, or it was never
    sent), the slot is free at once: waiting out :data:`PROBE_TIMEOUT_SECONDS` would
    refuse every call of the provider for nothing in flight. Naming the attempt, not
    only the call, matters: a call that failed over may hold the probe again with its
    next key while the failed key is released. Another attempt's end frees nothing.
    """
    if breaker.probe_at is None or not attempt or breaker.probe_call != attempt:
        return breaker
    return msgspec.structs.replace(breaker, probe_at=None, probe_call="")


def _opened(breaker: Breaker, until: datetime | None, reason: str) -> BreakerChanged:
    return BreakerChanged(
        provider=breaker.provider, state="open",
        until=format_time(until) if until is not None else None, reason=reason,
    )


def _apply(breaker: Breaker, events: tuple[BreakerChanged, ...]) -> Breaker:
    for event in events:
        breaker = breaker.fold(event)
    return breaker


def on_call_failed(
    breaker: Breaker, kind: str, now: datetime, *, reset_at: datetime | None = None
) -> tuple[Breaker, tuple[BreakerChanged, ...]]:
    """Record a failed call of ``kind`` (a ``KeyFailure`` kind) at ``now``.

    Only overload kinds (overloaded, server_error, timeout) count here; key failures go
    through ``key_states`` and then :func:`on_keys_changed`. ``reset_at`` is the upstream's
    ``Retry-After``, if any. The probe slot is freed whatever the outcome.

    Returns:
        The new breaker (events already folded in) and the events to append.
    """
    mode = breaker.mode(now)
    breaker = msgspec.structs.replace(breaker, probe_at=None, probe_call="")
    if kind not in OVERLOAD_KINDS:
        return breaker, ()
    window = timedelta(seconds=OVERLOAD_WINDOW_SECONDS)
    failures = (*(t for t in breaker.failures if now - t < window), now)
    breaker = msgspec.structs.replace(breaker, failures=failures)
    reopen = mode == "half_open"
    if not reopen and not (mode == "closed" and len(failures) >= OVERLOAD_FAILURES):
        return breaker, ()
    cooldown = min(OVERLOAD_COOLDOWN_SECONDS * 2 ** min(breaker.openings, 16),
                   OVERLOAD_COOLDOWN_MAX_SECONDS)
    until = now + timedelta(seconds=cooldown)
    if reset_at is not None:
        until = max(until, min(reset_at, now + timedelta(seconds=OVERLOAD_COOLDOWN_MAX_SECONDS)))
    events = (_opened(breaker, until, "overload"),)
    return _apply(breaker, events), events


def on_call_succeeded(
    breaker: Breaker, now: datetime
) -> tuple[Breaker, tuple[BreakerChanged, ...]]:
    """Record a successful call: the overload streak ends, and a half-open breaker closes.

    A success while the breaker is still open (a call let through before it opened)
    closes nothing: only the probe, after ``until``, speaks for the provider now.
    """
    mode = breaker.mode(now)
    breaker = msgspec.structs.replace(breaker, failures=(), probe_at=None, probe_call="")
    if mode != "half_open":
        return breaker, ()
    events = (BreakerChanged(provider=breaker.provider, state="closed", reason="recovered"),)
    return _apply(breaker, events), events


def on_keys_changed(
    breaker: Breaker, keys: KeyStates, pool: Sequence[str], now: datetime
) -> tuple[BreakerChanged, ...]:
    """The breaker events that the keys' states (just folded) call for at ``now``.

    Opens (or moves ``until``) when no key is usable; closes a ``no_usable_key`` breaker
    when a key is usable before its ``until`` (a key reset or added). Call it after
    folding key events; fold what it returns into the breaker.
    """
    if usable(keys, pool, now):
        if breaker.reason == "no_usable_key" and breaker.mode(now) == "open":
            return (BreakerChanged(provider=breaker.provider, state="closed",
                                   reason="key_available"),)
        return ()
    back = earliest_return(keys, pool, now)
    if breaker.state == "open":
        if breaker.until == back:
            return ()
        if breaker.reason == "overload" and breaker.until is not None and back is not None \
                and breaker.until >= back:
            return ()  # the overload cool-down outlasts every key's bench
    return (_opened(breaker, back, "no_usable_key"),)


def reset(breaker: Breaker, reason: str = "operator_reset") -> tuple[BreakerChanged, ...]:
    """The event closing the breaker by hand (``breaker reset``); empty if closed.

    Keys stay as they are: a provider whose keys are all benched still refuses
    (``keys reset`` lifts a key's bench).
    """
    if breaker.state == "closed":
        return ()
    return (BreakerChanged(provider=breaker.provider, state="closed", reason=reason),)
