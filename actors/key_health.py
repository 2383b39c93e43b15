"""The health of a provider's keys and its breaker, as the CredentialPoolActor holds them.

A thin holder over the pure policy (``domain.keys.key_states``, ``domain.keys.breaker``): it keeps
one provider's folded :class:`KeyStates` and :class:`Breaker`, asks the domain what a
lease, a failure or a served call means at ``now``, folds the events the domain decided
and hands them back for the actor to append. It does no I/O: the actor appends (the
key's events and the breaker's share one append, so a restart never sees one without
the other) and recovers both from the provider's streams (:meth:`ProviderHealth.recover`).

Why the breaker lives with the keys rather than in the rate guard: its decision is a
function of every key's state (no usable key opens it; a key back early closes it), and
the lease is the moment to decide — one message per call instead of two.
"""

from collections.abc import Iterable
from datetime import datetime

from sessionwarden.domain.errors import KeysBenched
from sessionwarden.domain.keys.breaker import (
    Breaker,
    claim_probe,
    decide,
    on_call_failed,
    on_call_succeeded,
    on_keys_changed,
    probe_abandoned,
)
from sessionwarden.domain.keys.key_states import (
    KeyFailure,
    KeyStates,
    on_failure,
    on_request_fault,
    on_reset,
    on_success,
    usable,
)
from sessionwarden.events import (
    CODEC,
    BreakerChanged,
    CredentialAdded,
    CredentialRemoved,
    Event,
    KeyStateChanged,
)
from sessionwarden.store import RecordedEvent

__all__ = ["HEALTH_TAGS", "OPERATOR", "ProviderHealth", "health_streams", "in_order",
           "operator_event"]

#: The reason (and source) of every event the ``keys``/``breaker`` commands write: a
#: running pool takes events so marked from the log (its own it has already folded).
OPERATOR = "operator"


#: Every stored tag a pool's health folds: its keys, their transitions, its breaker.
HEALTH_TAGS = (CODEC.tags_of(CredentialAdded) | CODEC.tags_of(CredentialRemoved)
               | CODEC.tags_of(KeyStateChanged) | CODEC.tags_of(BreakerChanged))


def health_streams(provider: str) -> tuple[str, str]:
    """The two streams a provider's health is folded from: its pool's and its limits'."""
    return f"credentials-{provider}", f"ratelimits-{provider}"


def in_order(records: Iterable[RecordedEvent]) -> list[Event]:
    """The health events among ``records`` (from both streams), decoded, in log order."""
    found = sorted((r for r in records if r.type in HEALTH_TAGS), key=lambda r: r.seq)
    return [CODEC.decode(r.type, r.data) for r in found]


def operator_event(event: Event) -> bool:
    """Whether ``event`` was written by an operator's command, not by the pool itself."""
    if isinstance(event, CredentialAdded):
        return event.source == OPERATOR
    if isinstance(event, CredentialRemoved | KeyStateChanged | BreakerChanged):
        return event.reason == OPERATOR
    return False


class ProviderHealth:
    """One provider's key states and breaker; every change returns the events to append."""

    __slots__ = ("breaker", "keys", "provider", "shared_limits")

    def __init__(self, provider: str, shared_limits: bool = False) -> None:
        """Every key ``ok`` and the breaker closed, until :meth:`recover` folds the log."""
        self.provider = provider
        self.shared_limits = shared_limits
        self.keys = KeyStates(provider=provider)
        self.breaker = Breaker(provider=provider)

    def recover(self, events: Iterable[Event]) -> None:
        """Fold the provider's recorded events (its credentials and rate-limit streams)."""
        for event in events:
            self.fold(event)

    def fold(self, event: Event) -> None:
        """Fold one event into the keys and the breaker (each ignores the other's)."""
        self.keys = self.keys.fold(event)
        self.breaker = self.breaker.fold(event)

    def _fold_all(self, events: Iterable[Event]) -> list[Event]:
        done = list(events)
        for event in done:
            self.fold(event)
        return done

    def allowed(self, pool: list[str], exclude: Iterable[str], now: datetime,
                call_id: str = "") -> frozenset[str]:
        """The fingerprints call ``call_id`` may lease at ``now``, minus those it tried.

        Raises:
            KeysBenched: the breaker refuses (no usable key, overload, a probe in flight),
                or every usable key was tried by this call.
        """
        decision = decide(self.breaker, self.keys, pool, now)
        if decision.action == "refuse":
            raise KeysBenched(self.provider, decision.retry_after, decision.reason,
                              decision.until)
        free = usable(self.keys, pool, now) - frozenset(exclude)
        if not free:
            raise KeysBenched(self.provider, decision.retry_after or 1, "no_usable_key")
        if decision.action == "probe":
            self.breaker = claim_probe(self.breaker, now, call_id)
        return free

    def leased(self, call_id: str, fingerprint: str) -> None:
        """Call ``call_id`` got key ``fingerprint``: if it holds the probe, that attempt does."""
        at = self.breaker.probe_at
        if at is not None and self.breaker.probe_call == call_id:
            self.breaker = claim_probe(self.breaker, at, f"{call_id} {fingerprint}")

    def abandoned(self, call_id: str, fingerprint: str) -> None:
        """Call ``call_id`` let go of ``fingerprint`` unanswered: a probe's slot is free."""
        self.breaker = probe_abandoned(self.breaker, f"{call_id} {fingerprint}")

    def failed(self, pool: list[str], fingerprint: str, failure: KeyFailure,
               now: datetime) -> list[Event]:
        """A call with ``fingerprint`` failed: the key's and the breaker's new events."""
        if self.shared_limits and not failure.shared_limits:
            failure = KeyFailure(kind=failure.kind, status=failure.status,
                                 reset_at=failure.reset_at, shared_limits=True)
        events: list[Event] = self._fold_all(
            on_failure(self.keys, pool, fingerprint, failure, now))
        self.breaker, opened = on_call_failed(self.breaker, failure.kind, now,
                                              reset_at=failure.reset_at)
        events += opened
        events += self._fold_all(on_keys_changed(self.breaker, self.keys, pool, now))
        return events

    def request_fault(self, pool: list[str], fingerprint: str, failure: KeyFailure,
                      before: datetime, now: datetime) -> tuple[bool, list[Event]]:
        """Another key repeated ``fingerprint``'s failure: lift the bench it got for it.

        Returns whether the two failures agree (``domain.keys.key_states.on_request_fault``)
        and the events: the key's lifted bench, and the breaker closing if it had opened
        for want of a usable key.
        """
        same, lifted = on_request_fault(self.keys, fingerprint, failure, before, now)
        events: list[Event] = self._fold_all(lifted)
        if events:
            events += self._fold_all(on_keys_changed(self.breaker, self.keys, pool, now))
        return same, events

    def next_return(self, pool: list[str], now: datetime) -> int | None:
        """Whole seconds until a call may go to the provider: 0 now, None never by itself.

        The moment a benched provider's refusal names (``domain.keys.breaker.decide``): the
        earliest key's return, the breaker's end, a probe's wait.
        """
        decision = decide(self.breaker, self.keys, pool, now)
        if decision.action != "refuse":
            return 0
        return decision.retry_after

    def served(self, pool: list[str], fingerprint: str, sent_at: datetime,
               now: datetime) -> list[Event]:
        """The upstream answered a call sent at ``sent_at``: benches set before it end."""
        events: list[Event] = self._fold_all(on_success(
            self.keys, pool, fingerprint, sent_at, now, shared_limits=self.shared_limits))
        self.breaker, closed = on_call_succeeded(self.breaker, now)
        events += closed
        if events:
            events += self._fold_all(on_keys_changed(self.breaker, self.keys, pool, now))
        return events

    def reset(self, pool: list[str], fingerprint: str, now: datetime) -> list[Event]:
        """The operator lifts a key's bench (``keys reset``)."""
        events: list[Event] = self._fold_all(on_reset(self.keys, fingerprint, now))
        events += self._fold_all(on_keys_changed(self.breaker, self.keys, pool, now))
        return events
