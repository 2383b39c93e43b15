"""The rate guard's policy: genuine vs transient limits, and the provider breaker (pure).

**Genuine or transient** (hermes-behaviour.md §5, ``is_genuine_nous_rate_limit``). A 429 is a
genuine limit only if some bucket has ``remaining ≤ 0`` and a reset ≥ 60 s — read from the
429's own headers, or from the last known state of that key (buckets with a limit > 0, their
reset counted down to ``now``). Anything else — a bare 429, a short reset, upstream capacity
("overloaded") — is transient: it cools the key briefly (``key_states``) and benches nothing
for long. Before this rule (Hermes PR #15898) one DeepSeek capacity 429 blocked every model
for 45+ minutes.

**When the limit ends** (§5 reset priority): the hourly request bucket, the request bucket,
``Retry-After``, the body's reset, else 300 s. Two corrections, decided here: a bucket's
reset counts only if that bucket is exhausted (OpenAI sends ``reset-requests: 120ms`` next to
an exhausted token bucket; believing it would retry at once), so other exhausted buckets
(the longest) come right after the request buckets and the last known state after the body;
and a genuine limit is never benched shorter than the bucket that made it genuine.
:func:`limit_failure` turns the verdict into the ``KeyFailure`` the key state machine takes
(a transient verdict with no reset anywhere leaves the cooling to its own backoff).

**The provider breaker** (peers.md §9: a real breaker, observable, one probe):

- *Opens* (event ``ratelimit.breaker_changed.v1``) when no key of the provider is usable
  (:func:`on_keys_changed`, reason ``no_usable_key``, until the earliest return of a key;
  None when every key is dead), or on sustained overload: :data:`OVERLOAD_FAILURES`
  consecutive overloaded/5xx/timeout failures within :data:`OVERLOAD_WINDOW_SECONDS`, no
  success between (reason ``overload``, for 30 s, or the upstream's ``Retry-After`` if
  longer, capped at 300 s). The threshold follows LiteLLM's Redis breaker (5 failures) and
  counts the daemon's own bounded retries (≤ 2 per call), so two client calls failing
  in full open it.
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
"""

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import msgspec
from sessionwarden.domain.key_states import (
    KeyFailure,
    KeyStates,
    earliest_return,
    format_time,
    parse_time,
    usable,
)
from sessionwarden.domain.ratelimits import RateLimitBucket, RateLimitSnapshot
from sessionwarden.events import BreakerChanged, Event

__all__ = [
    "DEFAULT_RESET_SECONDS",
    "MIN_GENUINE_RESET_SECONDS",
    "OVERLOAD_COOLDOWN_MAX_SECONDS",
    "OVERLOAD_COOLDOWN_SECONDS",
    "OVERLOAD_FAILURES",
    "OVERLOAD_KINDS",
    "OVERLOAD_WINDOW_SECONDS",
    "PROBE_TIMEOUT_SECONDS",
    "PROBE_WAIT_SECONDS",
    "Breaker",
    "Decision",
    "LimitVerdict",
    "claim_probe",
    "decide",
    "is_genuine",
    "limit_failure",
    "limit_verdict",
    "on_call_failed",
    "on_call_succeeded",
    "on_keys_changed",
    "reset",
]

MIN_GENUINE_RESET_SECONDS = 60.0
DEFAULT_RESET_SECONDS = 300.0
OVERLOAD_FAILURES = 5
OVERLOAD_WINDOW_SECONDS = 60.0
OVERLOAD_COOLDOWN_SECONDS = 30.0
OVERLOAD_COOLDOWN_MAX_SECONDS = 300.0
PROBE_TIMEOUT_SECONDS = 30.0
PROBE_WAIT_SECONDS = 1
#: Failure kinds that say the provider, not the key, is struggling.
OVERLOAD_KINDS = frozenset({"overloaded", "server_error", "timeout"})


class LimitVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What a 429 says: genuine or not, and when it ends.

    Attributes:
        genuine: a bucket is out with a reset ≥ 60 s (§5).
        reset_at: when the limit ends by the priority rule (``now`` + 300 s by default).
        source: where ``reset_at`` came from: ``requests_1h``, ``requests``,
            ``bucket:<name>``, ``retry_after``, ``body``, ``last_known:<name>`` or ``default``.
    """

    genuine: bool
    reset_at: datetime
    source: str


def _last_known(
    last_known: RateLimitSnapshot | None, observed_at: datetime | None, now: datetime
) -> list[tuple[str, float]]:
    """Exhausted last-known buckets (limit > 0) and the seconds left until their reset."""
    if last_known is None or observed_at is None:
        return []
    elapsed = (now - observed_at).total_seconds()
    return [
        (b.name, b.reset_seconds - elapsed) for b in last_known.buckets
        if b.exhausted and b.limit is not None and b.limit > 0 and b.reset_seconds is not None
    ]


def _own(snapshot: RateLimitSnapshot) -> list[RateLimitBucket]:
    return [b for b in snapshot.buckets if b.exhausted and b.reset_seconds is not None]


def is_genuine(
    snapshot: RateLimitSnapshot, now: datetime, *,
    last_known: RateLimitSnapshot | None = None, last_known_at: datetime | None = None,
) -> bool:
    """Whether a 429 with ``snapshot`` (its headers) is a genuine limit (§5).

    ``last_known`` is the key's last recorded snapshot, observed at ``last_known_at``.
    """
    return _genuine_seconds(snapshot, now, last_known, last_known_at) is not None


def _genuine_seconds(
    snapshot: RateLimitSnapshot, now: datetime,
    last_known: RateLimitSnapshot | None, last_known_at: datetime | None,
) -> float | None:
    """The longest reset (s) among the buckets that make the limit genuine, or None."""
    resets = [b.reset_seconds for b in _own(snapshot) if b.reset_seconds is not None]
    resets += [left for _, left in _last_known(last_known, last_known_at, now)]
    genuine = [r for r in resets if r >= MIN_GENUINE_RESET_SECONDS]
    return max(genuine) if genuine else None


def limit_verdict(
    snapshot: RateLimitSnapshot, now: datetime, *,
    last_known: RateLimitSnapshot | None = None, last_known_at: datetime | None = None,
    body_reset_at: datetime | None = None,
) -> LimitVerdict:
    """Judge a 429: genuine or transient, and when it ends (module docstring).

    Args:
        snapshot: the 429's rate-limit headers (``parse_rate_limits``).
        now: when the 429 arrived.
        last_known: the key's last recorded buckets.
        last_known_at: when ``last_known`` was observed.
        body_reset_at: a reset the error body gave (the classifier's), if any.
    """
    own = {b.name: b.reset_seconds for b in _own(snapshot) if b.reset_seconds}
    candidates: list[tuple[str, float | None]] = [
        ("requests_1h", own.pop("requests_1h", None)),
        ("requests", own.pop("requests", None)),
    ]
    if own:
        name = max(own, key=lambda n: own[n] or 0.0)
        candidates.append((f"bucket:{name}", own[name]))
    candidates.append(("retry_after", snapshot.retry_after_seconds))
    if body_reset_at is not None:
        candidates.append(("body", (body_reset_at - now).total_seconds()))
    known = _last_known(last_known, last_known_at, now)
    if known:
        name, left = max(known, key=lambda item: item[1])
        candidates.append((f"last_known:{name}", left))
    source, seconds = next(
        ((s, v) for s, v in candidates if v is not None and v > 0),
        ("default", DEFAULT_RESET_SECONDS),
    )
    genuine = _genuine_seconds(snapshot, now, last_known, last_known_at)
    if genuine is not None and genuine > seconds:
        seconds = genuine
    return LimitVerdict(
        genuine=genuine is not None, reset_at=now + timedelta(seconds=seconds), source=source,
    )


def limit_failure(verdict: LimitVerdict, status: int | None = 429, *,
                  shared_limits: bool = False) -> KeyFailure:
    """The key failure a judged 429 is: a genuine limit, or a transient one (cooling)."""
    return KeyFailure(
        kind="genuine_limit" if verdict.genuine else "transient_limit", status=status,
        reset_at=None if verdict.source == "default" and not verdict.genuine else verdict.reset_at,
        shared_limits=shared_limits,
    )


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
    """

    provider: str
    state: Literal["closed", "open"] = "closed"
    until: datetime | None = None
    reason: str = ""
    openings: int = 0
    failures: tuple[datetime, ...] = ()
    probe_at: datetime | None = None

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


def claim_probe(breaker: Breaker, now: datetime) -> Breaker:
    """The breaker with its probe slot taken at ``now`` (after a ``probe`` decision)."""
    return msgspec.structs.replace(breaker, probe_at=now)


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
    breaker = msgspec.structs.replace(breaker, probe_at=None)
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
    breaker = msgspec.structs.replace(breaker, failures=(), probe_at=None)
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
