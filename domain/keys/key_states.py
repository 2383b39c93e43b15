"""The health of each key of a pool: a state machine folded from events (pure; time is an argument).

Each key is ``ok``, ``cooling``, ``exhausted`` or ``dead``; the outcomes of its calls and
the operator's commands, recorded as events, move it between these states as below.

Rules:

The overview: docs/architecture/keys-and-failover.md, 'Key states and the breaker'.

States (hermes-behaviour.md §4.1, §4.3; peers.md "a key pool that knows each key's quota
horizon"):

- ``ok``: usable.
- ``cooling``: a transient limit (a bare 429, a short reset, upstream capacity) rests the key
  briefly: until the reset the provider gave, clamped to 1–60 s, else 5 s doubling with each
  consecutive cool (5, 10, 20, 40, 60 s). Never longer than :data:`COOLING_MAX_SECONDS`:
  one DeepSeek capacity 429 once blocked every model for 45 minutes (Hermes PR #15898).
- ``exhausted``: a genuine limit, billing/quota, or a plain auth failure (a 401, or a bad
  key in a 400, whose body does not say the key is revoked), until the reset the provider
  gave (headers or body), else a TTL by kind: genuine limit 1 h, billing 24 h, auth
  300 s. **Sole-key rule** (§4.3): when the pool has at most one key that is not dead
  and the failure is not billing, the TTL is at most 60 s — guessing
  an hour would lock the user out of their only key; a billing failure does not heal in a
  minute. A reset the provider gave is always believed (§4.3 "reset_at override").
- ``dead``: a revoked key (a 401/403 whose body says it is revoked, disabled, deleted or
  leaked, §4.3 terminal auth). It never comes back by time: only ``keys reset``
  (:func:`on_reset`) or the key leaving the pool (``credential.removed``; re-adding it
  then starts ``ok``). A plain 401 is not enough (issue 21 §2): an upstream whose 401s
  flap would otherwise kill every key for good.

A bench ends by itself: a key whose ``until`` has passed is usable (``effective`` state
``ok``) without any event; the first success after it records ``ok`` (reason
``recovered``). A success only clears a bench set *before* that call was sent: a long stream
started earlier must not lift a limit another call just hit.

**Keys are identified by fingerprint.** Two pool entries holding the same secret have the
same fingerprint, hence one :class:`KeyHealth`: a 402 on either benches both (§4.4 step 4,
"so billing loops converge"). A new failure never shortens or softens a bench: the result is
the more severe state and the later ``until`` of the two (an in-flight call's late transient
429 must not cut a 1 h limit to 5 s).

**Shared limits.** For a provider whose keys draw on one account (``shared_limits``), a
genuine limit or a billing failure benches every key that is not dead (reason
``shared_limit`` on the others); a success on any key clears them. Transient limits and
auth failures stay per key.

**The request's fault** (issue 21 §1). When a call's second key fails exactly as its
first did, the failure was the request's (its words quoted back by the upstream), not the
keys': :func:`on_request_fault` lifts the first key's bench of that kind (``ok``, reason
``request_fault``), the second key is never benched. Only a bench the call could have
set is lifted: one in force now (the key was usable when the call leased it), of the
failure's kind, set before the second attempt went out.

Decisions where the issue is silent: the TTLs are by failure kind rather than by status
(a 403 "spending limit" or a 429 "monthly quota reached" is billing: 24 h); cooling backs off
by doubling on consecutive transient limits, capped at 60 s; the state is per provider (the
same secret configured for two providers has two states); operator reset and removal clear
everything, including a bench the provider imposed.

Input: :class:`KeyFailure`, a small struct of its own. The lead maps the error classifier's
output onto it (``sessionwarden.domain.classify.failover.key_failure`` builds it for 429s).
"""

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import msgspec
from sessionwarden.events import CredentialRemoved, Event, KeyStateChanged
from sessionwarden.events.times import format_time, parse_time

__all__ = [
    "AUTH_TTL_SECONDS",
    "BILLING_TTL_SECONDS",
    "COOLING_DEFAULT_SECONDS",
    "COOLING_MAX_SECONDS",
    "COOLING_MIN_SECONDS",
    "GENUINE_TTL_SECONDS",
    "REQUEST_FAULT",
    "SOLE_KEY_TTL_SECONDS",
    "FailureKind",
    "KeyFailure",
    "KeyHealth",
    "KeyStates",
    "State",
    "earliest_return",
    "format_time",
    "on_failure",
    "on_request_fault",
    "on_reset",
    "on_success",
    "parse_time",
    "usable",
]

State = Literal["ok", "cooling", "exhausted", "dead"]
FailureKind = Literal[
    "transient_limit", "genuine_limit", "billing", "auth", "auth_revoked",
    "overloaded", "server_error", "timeout", "other",
]

COOLING_DEFAULT_SECONDS = 5.0
COOLING_MIN_SECONDS = 1.0
COOLING_MAX_SECONDS = 60.0
GENUINE_TTL_SECONDS = 3600.0
BILLING_TTL_SECONDS = 86400.0
AUTH_TTL_SECONDS = 300.0
SOLE_KEY_TTL_SECONDS = 60.0

_SEVERITY: dict[str, int] = {"ok": 0, "cooling": 1, "exhausted": 2, "dead": 3}
_TTL: dict[str, float] = {
    "genuine_limit": GENUINE_TTL_SECONDS, "billing": BILLING_TTL_SECONDS, "auth": AUTH_TTL_SECONDS,
}
_SHARED_KINDS = frozenset({"genuine_limit", "billing"})
#: The failures that say something about the key (the others bench nothing).
_KEY_KINDS = frozenset({"transient_limit", "genuine_limit", "billing", "auth", "auth_revoked"})
#: The reason of the event that lifts a bench the request, not the key, caused.
REQUEST_FAULT = "request_fault"


class KeyFailure(msgspec.Struct, frozen=True, kw_only=True):
    """What an upstream failure says about the key that got it (mapped from the classifier).

    Attributes:
        kind: ``transient_limit`` (bare/short 429, capacity), ``genuine_limit`` (a bucket
            out with a reset ≥ 60 s, ``domain.classify.limits``),
            ``billing`` (402, quota, spending limit), ``auth`` (401/403 not known to be
            terminal), ``auth_revoked`` (revoked/invalid token). ``overloaded``,
            ``server_error``, ``timeout`` and ``other`` say nothing about the key (the
            breaker counts the first three).
        status: the HTTP status, if any.
        reset_at: when the provider said the limit resets (headers or body), if it did.
        shared_limits: the provider's keys draw on one account (its config).
    """

    kind: FailureKind
    status: int | None = None
    reset_at: datetime | None = None
    shared_limits: bool = False


class KeyHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One key's folded state. ``since`` is when it entered ``state``."""

    state: State = "ok"
    since: datetime | None = None
    until: datetime | None = None
    reason: str = ""
    status: int | None = None
    cool_streak: int = 0

    def effective(self, now: datetime) -> State:
        """The state at ``now``: a cooling or exhausted key whose time is up is ``ok``."""
        if self.state in ("cooling", "exhausted") and self.until is not None and now >= self.until:
            return "ok"
        return self.state

    def benched_until(self, now: datetime) -> datetime | None:
        """``until`` if the key is cooling or exhausted at ``now``, else None."""
        return self.until if self.effective(now) in ("cooling", "exhausted") else None


_OK = KeyHealth()


class KeyStates(msgspec.Struct, frozen=True, kw_only=True):
    """The health of every key of one provider, by fingerprint (absent means ``ok``)."""

    provider: str
    keys: dict[str, KeyHealth] = msgspec.field(default_factory=dict)

    def get(self, fingerprint: str) -> KeyHealth:
        """The health of ``fingerprint`` (``ok`` if nothing was recorded)."""
        return self.keys.get(fingerprint, _OK)

    def fold(self, event: Event) -> "KeyStates":
        """The states after ``event``; events of other providers or types change nothing."""
        if isinstance(event, KeyStateChanged) and event.provider == self.provider:
            old = self.get(event.fingerprint)
            streak = (old.cool_streak + 1 if old.state == "cooling" else 1) \
                if event.state == "cooling" else 0
            health = KeyHealth(
                state=_state(event.state), since=parse_time(event.at),
                until=parse_time(event.until), reason=event.reason, status=event.status,
                cool_streak=streak,
            )
            return KeyStates(provider=self.provider, keys={**self.keys, event.fingerprint: health})
        if isinstance(event, CredentialRemoved) and event.provider == self.provider \
                and event.fingerprint in self.keys:
            keys = dict(self.keys)
            del keys[event.fingerprint]
            return KeyStates(provider=self.provider, keys=keys)
        return self

    @classmethod
    def replay(cls, provider: str, events: Iterable[Event]) -> "KeyStates":
        """Fold ``events`` in order from an empty pool (what a restart does)."""
        states = cls(provider=provider)
        for event in events:
            states = states.fold(event)
        return states


def _state(text: str) -> State:
    if text == "cooling":
        return "cooling"
    if text == "exhausted":
        return "exhausted"
    if text == "dead":
        return "dead"
    return "ok"  # an unknown future state must not bench a key forever


def usable(states: KeyStates, pool: Sequence[str], now: datetime) -> frozenset[str]:
    """The fingerprints of ``pool`` (its entries, duplicates allowed) usable at ``now``."""
    return frozenset(fp for fp in pool if states.get(fp).effective(now) == "ok")


def earliest_return(states: KeyStates, pool: Sequence[str], now: datetime) -> datetime | None:
    """The earliest ``until`` among the keys of ``pool`` benched at ``now``.

    None when none is benched (every key is usable, or dead: a dead key has no return).
    """
    times = [t for fp in pool if (t := states.get(fp).benched_until(now)) is not None]
    return min(times) if times else None


def _target(
    health: KeyHealth, failure: KeyFailure, sole: bool, now: datetime
) -> tuple[State, datetime | None]:
    """The state and ``until`` a failure asks for, before merging with the current bench."""
    if failure.kind == "auth_revoked":
        return "dead", None
    if failure.kind == "transient_limit":
        if failure.reset_at is not None:
            wait = (failure.reset_at - now).total_seconds()
            wait = min(max(wait, COOLING_MIN_SECONDS), COOLING_MAX_SECONDS)
        else:
            streak = health.cool_streak if health.state == "cooling" else 0
            wait = min(COOLING_DEFAULT_SECONDS * 2 ** min(streak, 16), COOLING_MAX_SECONDS)
        return "cooling", now + timedelta(seconds=wait)
    if failure.reset_at is not None and failure.reset_at > now:
        return "exhausted", failure.reset_at
    ttl = _TTL[failure.kind]
    if sole and failure.kind != "billing":
        ttl = min(ttl, SOLE_KEY_TTL_SECONDS)
    return "exhausted", now + timedelta(seconds=ttl)


def _transition(
    states: KeyStates, fp: str, state: State, until: datetime | None, reason: str,
    status: int | None, now: datetime,
) -> KeyStateChanged | None:
    """The event moving ``fp`` to the merge of its bench and (state, until), if it changes."""
    health = states.get(fp)
    current = health.effective(now)
    if current == "dead":
        return None
    if current != "ok" and state != "dead":
        if _SEVERITY[current] > _SEVERITY[state]:
            state = current
        if health.until is not None and until is not None and health.until > until:
            until = health.until
        if state == current and until == health.until:
            return None
    return KeyStateChanged(
        provider=states.provider, fingerprint=fp, state=state, previous=current,
        at=format_time(now), until=format_time(until) if until is not None else None,
        reason=reason, status=status,
    )


def on_failure(
    states: KeyStates, pool: Sequence[str], fingerprint: str, failure: KeyFailure, now: datetime
) -> tuple[KeyStateChanged, ...]:
    """The events that record ``failure`` of the key ``fingerprint`` at ``now``.

    Args:
        states: the provider's folded key states.
        pool: the fingerprints of the provider's entries (for the sole-key and
            shared-limits rules).
        fingerprint: the key the failing call used.
        failure: what the failure says about the key.
        now: the time of the failure.

    Returns:
        Zero, one or (shared limits) several events; empty when nothing changes or the
        failure is not the key's (overload, 5xx, timeout, other).
    """
    if failure.kind not in _KEY_KINDS:
        return ()
    alive = {fp for fp in pool if states.get(fp).effective(now) != "dead"}
    sole = len(alive | {fingerprint}) <= 1
    events: list[KeyStateChanged] = []
    targets = [fingerprint]
    if failure.shared_limits and failure.kind in _SHARED_KINDS:
        targets += sorted(alive - {fingerprint})
    for fp in targets:
        state, until = _target(states.get(fp), failure, sole, now)
        reason = failure.kind if fp == fingerprint else "shared_limit"
        event = _transition(states, fp, state, until, reason, failure.status, now)
        if event is not None:
            events.append(event)
    return tuple(events)


def on_request_fault(
    states: KeyStates, fingerprint: str, failure: KeyFailure, before: datetime, now: datetime
) -> tuple[bool, tuple[KeyStateChanged, ...]]:
    """Lift the bench ``failure`` put on ``fingerprint``: another key failed the same way.

    Args:
        states: the provider's folded key states.
        fingerprint: the call's earlier key, whose failure the later key repeated.
        failure: the later key's failure (mapped from the same class and status).
        before: when the later attempt was sent: the bench lifted was set before it.
        now: the time of the later failure.

    Returns:
        Whether the earlier key's state agrees with that failure (its bench is of the
        same kind, or the failure benches nothing), and the event lifting the bench
        (state ``ok``, reason :data:`REQUEST_FAULT`). False: the earlier key failed
        otherwise, and the later key's failure is its own.
    """
    if failure.kind not in _KEY_KINDS:
        return True, ()
    health = states.get(fingerprint)
    current = health.effective(now)
    # A bench in force now was set during the call: the key was usable at its lease.
    # ``since`` is stored rounded up to the millisecond: ``before`` is compared so too.
    sent = datetime.fromisoformat(format_time(before))
    if current == "ok" or health.reason != failure.kind or health.since is None \
            or health.since > sent:
        return False, ()
    return True, (KeyStateChanged(
        provider=states.provider, fingerprint=fingerprint, state="ok", previous=current,
        at=format_time(now), reason=REQUEST_FAULT,
    ),)


def on_success(
    states: KeyStates, pool: Sequence[str], fingerprint: str, sent_at: datetime, now: datetime,
    *, shared_limits: bool = False,
) -> tuple[KeyStateChanged, ...]:
    """The events that record a successful call with ``fingerprint``, sent at ``sent_at``.

    A cooling or exhausted key benched at or before ``sent_at`` is ``ok`` again (reason
    ``recovered``); a bench set after the call was sent stands, and a dead key stays dead.
    With ``shared_limits``, the other keys benched by the account's limit recover too.
    Nothing is emitted for a key already ``ok`` (the hot path appends nothing).
    """
    targets = [fingerprint]
    if shared_limits:
        targets += sorted({fp for fp in pool if fp != fingerprint})
    events: list[KeyStateChanged] = []
    for fp in targets:
        health = states.get(fp)
        if health.state in ("ok", "dead") or (health.since is not None and health.since > sent_at):
            continue
        if fp != fingerprint and health.reason not in (*_SHARED_KINDS, "shared_limit"):
            continue
        events.append(KeyStateChanged(
            provider=states.provider, fingerprint=fp, state="ok",
            previous=health.state, at=format_time(now), reason="recovered",
        ))
    return tuple(events)


def on_reset(
    states: KeyStates, fingerprint: str, now: datetime, reason: str = "operator_reset"
) -> tuple[KeyStateChanged, ...]:
    """The event that returns ``fingerprint`` to ``ok`` whatever its state (``keys reset``)."""
    health = states.get(fingerprint)
    if health.state == "ok":
        return ()
    return (KeyStateChanged(
        provider=states.provider, fingerprint=fingerprint, state="ok",
        previous=health.state, at=format_time(now), reason=reason,
    ),)
