"""CredentialPoolActor: the keys of each provider, leased one call at a time.

Keys are configured as references (``env:NAME``); the secret is resolved at start, kept
only in memory, registered with the redactor, and identified everywhere else by its
fingerprint. A key that cannot be resolved (its variable unset, or too short to be a
key) is skipped with a warning; a provider left without any is unusable: a warning at
start names the variables to set, :class:`UnusableProviders` lists it with that reason,
and a lease for it fails with the same reason.

Rules:

At start the actor reconciles the configuration with the log: a key not yet in
``view_credentials`` is recorded as CredentialAdded, a recorded key no longer
configured as CredentialRemoved; that append is synchronous, so a store failure stops
the actor's start (and the daemon's) instead of being lost. A configured key the
operator removed (``keys remove``) stays out, with a warning, until ``keys add`` puts
it back: the config naming it does not undo the operator's removal.

Leases are memory only: which key served a call is recorded in the call's completion,
and the number of leases in flight restarts at zero with the process (no call of the
previous process is still in flight). :class:`LeasesInFlight` reads them, for the
control API's ``GET /v1/keys`` (``sessionwarden keys list`` beside a running daemon).

Each key's health and the provider's breaker (``actors/key_health.py`` over
``domain.keys.key_states`` and ``domain.keys.breaker``) decide which keys a lease may take: a
benched key is never leased, and when none may be, the lease fails at once
(``KeysBenched``: the proxy answers 429 with ``Retry-After`` without touching the
upstream). :class:`KeyFailed` benches a key (folded before the reply, so the call's
failover lease, asked next, avoids it); a :class:`Release` of a served call ends
benches set before it was sent. :class:`RequestFault` lifts a bench a call's first key
got for a failure its second key repeated (the request's fault, issue 21 §1), and
:class:`NextReturn` tells when the provider takes calls again (the ``Retry-After`` of a
relayed answer, issue 21 §3); both are this actor's alone, hence defined here. Every
transition is a KeyStateChanged on
``credentials-<provider>`` (a BreakerChanged on ``ratelimits-<provider>``), recovered
at start by folding those streams, so a restarted daemon keeps failing fast until the
reset. Strategies are the domain's
(``sessionwarden.domain.keys.pool``). A simulated provider (the built-in ``sim``) is keyless:
every lease of it is granted, with no secret and no fingerprint.
"""

import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import msgspec
from loguru import logger
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.actors.errors import ActorCrash
from sessionwarden.actors.key_health import (
    OPERATOR,
    ProviderHealth,
    health_streams,
    in_order,
    operator_event,
)
from sessionwarden.actors.messages import (
    KeyFailed,
    Lease,
    Leased,
    LeasesInFlight,
    Release,
    UnusableProviders,
    new_event,
)
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.config import ConfigError, ProviderConfig, resolve_key
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.keys.key_states import KeyFailure
from sessionwarden.domain.keys.pool import KeyState, Pool
from sessionwarden.events import (
    BreakerChanged,
    CredentialAdded,
    CredentialRemoved,
    Event,
)
from sessionwarden.redact import default_redactor, fingerprint
from sessionwarden.store import ANY, EventLog, StreamAppend
from sessionwarden.store.errors import StoreError
from sessionwarden.store.writer import AppendRequest

__all__ = ["POLL_INTERVAL_S", "CredentialPoolActor", "NextReturn", "RequestFault",
           "credentials_stream"]


#: How often the lease path looks for the operator's changes in the log, in seconds.
POLL_INTERVAL_S = 0.5
#: Why a provider whose last key the operator removed takes no call (a client reads it).
_ALL_REMOVED = ("every key was removed with `sessionwarden keys remove` "
                "(`sessionwarden keys add PROVIDER env:NAME` puts one back)")


class RequestFault(msgspec.Struct, frozen=True):
    """A call's key ``fingerprint`` failed, and its next key failed the same way.

    ``failure`` is the later key's (it is not recorded: the request is at fault), sent
    at ``before``. Reply: whether ``fingerprint``'s state agrees with that failure —
    then its bench of that kind is lifted (``ok``, reason ``request_fault``, appended
    as :class:`KeyFailed`'s events are) — or not (False: the two failures differ).
    """

    provider: str
    fingerprint: str
    failure: KeyFailure
    before: datetime


class NextReturn(msgspec.Struct, frozen=True):
    """When the provider takes a call again: reply whole seconds, 0 now, None never.

    The moment the pool's own refusal would name (the earliest key's return, the
    breaker's end); None for an unknown or keyless provider, or every key dead.
    """

    provider: str


def _operator_keys(history: list[Event]) -> dict[str, str]:
    """The keys ``keys add`` put in the pool and nothing removed since: ``{fp: ref}``."""
    keys: dict[str, str] = {}
    for event in history:
        if isinstance(event, CredentialAdded) and event.source == OPERATOR:
            keys[event.fingerprint] = event.ref
        elif isinstance(event, CredentialRemoved):
            keys.pop(event.fingerprint, None)
    return keys


def _operator_removed(history: list[Event]) -> set[str]:
    """The keys ``keys remove`` took out and nothing added back since."""
    removed: set[str] = set()
    for event in history:
        if isinstance(event, CredentialRemoved) and event.reason == OPERATOR:
            removed.add(event.fingerprint)
        elif isinstance(event, CredentialAdded):
            removed.discard(event.fingerprint)
    return removed


def credentials_stream(provider: str) -> str:
    """The stream of a provider's pool."""
    return f"credentials-{provider}"


class _NotRecorded:
    """Told by the writer's thread: a health append failed (the state is ahead of the log)."""

    __slots__ = ("error", "provider")

    def __init__(self, provider: str, error: BaseException) -> None:
        self.provider = provider
        self.error = error


class CredentialPoolActor(GovernedActor):
    """Leases keys to calls."""

    def __init__(
        self,
        log: EventLog,
        providers: Sequence[ProviderConfig],
        environ: Mapping[str, str],
        *,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Pool the keys of ``providers``, resolving references from ``environ``."""
        super().__init__(on_failure)
        self._clock = clock or SystemClock()
        self._health: dict[str, ProviderHealth] = {}
        #: Per stream, the last version read; per provider, when the log was last polled.
        self._seen: dict[str, int] = {}
        self._polled: dict[str, float] = {}
        self._log = log
        self._providers = list(providers)
        self._environ = dict(environ)
        self._rng = rng or random.Random()
        self._pools: dict[str, Pool] = {}
        self._keyless = {p.name for p in self._providers if p.simulated}
        #: Providers without a single usable key, and why (for clients and the operator).
        self._unusable: dict[str, str] = {}

    def load(self) -> dict[str, dict[str, tuple[str, int]]]:
        """The one loader: recorded active keys, ``{provider: {fingerprint: (ref, calls)}}``."""
        recorded: dict[str, dict[str, tuple[str, int]]] = {}
        for provider, fp, ref, calls in self._log.read_connection().execute(
            "SELECT provider, fingerprint, ref, calls FROM view_credentials"
            " WHERE state = 'active'"
        ):
            recorded.setdefault(provider, {})[fp] = (ref, calls)
        return recorded

    def on_start(self) -> None:
        """Resolve keys and reconcile the configuration with the recorded pool.

        Keys an operator added with ``keys add`` are the operator's: they stay in the
        pool (resolved from this process's environment) though the config omits them.
        """
        recorded = self.load()
        appends: list[StreamAppend] = []
        for provider in self._providers:
            pool = Pool(provider.strategy, provider.max_concurrent_leases)
            self._pools[provider.name] = pool
            health = ProviderHealth(provider.name, provider.shared_limits)
            history = self._recorded_health(provider.name)
            health.recover(history)
            self._health[provider.name] = health
            self._polled[provider.name] = time.monotonic()
            known = recorded.pop(provider.name, {})
            problems: list[str] = []
            taken_out = _operator_removed(history)
            for ref in provider.keys:
                secret = self._resolve(ref, problems)
                if secret is not None:
                    key = KeyState(ref, secret)
                    if key.fingerprint in taken_out:
                        # The operator's removal outlives a restart: a leaked key taken
                        # out by hand must not come back because the config still names it.
                        problems.append(f"{ref} ({key.fingerprint}) was removed with "
                                        "`sessionwarden keys remove` (`keys add` puts it back)")
                        continue
                    key.leases = known.get(key.fingerprint, ("", 0))[1]
                    pool.keys.append(key)
            added = _operator_keys(history)
            for fp, ref in added.items():
                self._take(provider.name, ref, fp, known.get(fp, ("", 0))[1])
            if not provider.simulated:  # keyless by design: nothing to report
                self._report(provider, len(pool.keys), problems)
            events: list[Event] = [
                CredentialAdded(provider=provider.name, ref=k.ref, fingerprint=k.fingerprint)
                for k in pool.keys if k.fingerprint not in known
            ]
            configured = {k.fingerprint for k in pool.keys} | set(added)
            events += [
                CredentialRemoved(provider=provider.name, fingerprint=fp, reason="not configured")
                for fp in known if fp not in configured
            ]
            if events:
                appends.append(StreamAppend(credentials_stream(provider.name),
                                            tuple(new_event(e) for e in events)))
        for name, keys in recorded.items():  # providers no longer configured at all
            removed = tuple(
                new_event(CredentialRemoved(provider=name, fingerprint=fp,
                                            reason="provider not configured"))
                for fp in keys
            )
            appends.append(StreamAppend(credentials_stream(name), removed))
        if appends:
            self._log.append_batch(appends)

    def _take(self, provider: str, ref: str, fp: str, leases: int = 0) -> bool:
        """Add the operator's key ``ref`` to ``provider``'s pool if it resolves to ``fp``.

        The ``keys`` command fingerprinted the key in its own shell; this process may see
        another value under the same name, which must not be taken for it.
        """
        pool = self._pools[provider]
        if fp in pool.fingerprints():
            return True
        problems: list[str] = []
        secret = self._resolve(ref, problems)
        if secret is None or fingerprint(secret) != fp:
            why = "; ".join(problems) or f"{ref} holds another key in the daemon's environment"
            logger.warning("provider {}: the key {} added with `keys add` is not used: {}",
                           provider, fp, why)
            return False
        pool.keys.append(KeyState(ref, secret, leases))
        return True

    def _poll(self, provider: str) -> None:
        """Take the operator's changes (``keys``/``breaker`` commands) from the log.

        Checked on the lease path at most every :data:`POLL_INTERVAL_S`, so a command
        takes effect in a running daemon within a second; the pool's own events, read
        back too, are already folded and skipped.
        """
        now = time.monotonic()
        if now - self._polled.get(provider, 0.0) < POLL_INTERVAL_S:
            return
        self._polled[provider] = now
        health = self._health[provider]
        for stream in health_streams(provider):
            records = list(self._log.read_stream(stream, self._seen.get(stream, 0)))
            if records:
                self._seen[stream] = records[-1].version
            for event in in_order(records):
                if not operator_event(event):
                    continue
                logger.info("provider {}: taking the operator's {}", provider, event.type_tag())
                pool = self._pools[provider]
                if isinstance(event, CredentialAdded):
                    if self._take(provider, event.ref, event.fingerprint):
                        self._unusable.pop(provider, None)
                elif isinstance(event, CredentialRemoved):
                    pool.keys = [k for k in pool.keys if k.fingerprint != event.fingerprint]
                    if not pool.keys:
                        self._unusable[provider] = _ALL_REMOVED
                health.fold(event)

    def _recorded_health(self, provider: str) -> list[Event]:
        """The provider's keys, their transitions and breaker changes, in recorded order.

        Notes each stream's head: :meth:`_poll` reads from there.
        """
        records = []
        for stream in health_streams(provider):
            for record in self._log.read_stream(stream):
                self._seen[stream] = record.version
                records.append(record)
        return in_order(records)

    def _resolve(self, ref: str, problems: list[str]) -> str | None:
        """The secret ``ref`` names, or None with the reason added to ``problems``."""
        variable = ref.removeprefix("env:")
        try:
            secret = resolve_key(ref, self._environ)
        except ConfigError:
            problems.append(f"{variable} is not set")
            return None
        try:
            default_redactor.add(secret)
        except ValueError:
            problems.append(f"{variable} is too short to be a real key")
            return None
        return secret

    def _report(self, provider: ProviderConfig, usable: int, problems: list[str]) -> None:
        """One warning per provider with a skipped key; an unusable one says what to do."""
        if usable:
            if problems:
                logger.warning("provider {}: {} of {} keys skipped: {}", provider.name,
                               len(problems), len(provider.keys), "; ".join(problems))
            return
        if problems:
            removed = all("keys remove" in p for p in problems)  # each says what to do
            why = "; ".join(problems) + ("" if removed else
                                         " (set a key and restart sessionwarden)")
        else:
            why = 'it has no keys (add keys = ["env:NAME"] to its [[providers]] entry)'
        self._unusable[provider.name] = why
        logger.warning("provider {} is unusable, calls to it get 503: {}", provider.name, why)

    def _pool_and_health(self, provider: str) -> tuple[Pool, ProviderHealth] | None:
        """``provider``'s pool and key health, or None for a provider we do not know."""
        pool, health = self._pools.get(provider), self._health.get(provider)
        return None if pool is None or health is None else (pool, health)

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch the pool's messages (Lease, Release, KeyFailed, RequestFault, …)."""
        if isinstance(message, Lease):
            if message.provider in self._keyless:
                return Leased(message.provider, "", "")
            pool = self._pools.get(message.provider)
            if pool is not None:
                # Before the emptiness check: `keys add` is how an empty pool refills.
                self._poll(message.provider)
            if pool is None or not pool.keys:
                why = self._unusable.get(message.provider)
                raise NoCredential(f"provider {message.provider!r} has no usable key"
                                   + (f": {why}" if why else ""))
            judge = self._health[message.provider]
            allowed = judge.allowed(pool.fingerprints(), message.exclude, self._clock.now(),
                                    message.call_id)
            key: KeyState = pool.lease(self._rng, allowed)
            judge.leased(message.call_id, key.fingerprint)
            return Leased(message.provider, key.fingerprint, key.secret)
        if isinstance(message, Release):
            pool = self._pools.get(message.provider)
            if pool is not None:
                pool.release(message.fingerprint)
                if message.served and message.sent_at is not None and message.fingerprint:
                    events = self._health[message.provider].served(
                        pool.fingerprints(), message.fingerprint, message.sent_at,
                        self._clock.now())
                    if events:
                        self._append(message.provider, events)
                elif not message.served:
                    # A probe whose client left would hold the slot until its timeout.
                    self._health[message.provider].abandoned(message.call_id,
                                                             message.fingerprint)
            return None
        if isinstance(message, KeyFailed):
            found = self._pool_and_health(message.provider)
            if found is None:
                return False
            pool, health = found
            events = health.failed(pool.fingerprints(), message.fingerprint, message.failure,
                                   self._clock.now())
            if events:
                # Folded already, so the call's next lease (asked after this reply, in
                # this actor) avoids the key: the failover waits for no commit. The
                # writer commits in order, so the bench is durable before the call's
                # own completion is; a crash in between loses a bench, never a call.
                self._append(message.provider, events)
            return True
        if isinstance(message, RequestFault):
            found = self._pool_and_health(message.provider)
            if found is None:
                return False
            pool, health = found
            same, events = health.request_fault(pool.fingerprints(), message.fingerprint,
                                                message.failure, message.before,
                                                self._clock.now())
            if events:
                self._append(message.provider, events)
            return same
        if isinstance(message, NextReturn):
            found = self._pool_and_health(message.provider)
            if found is None or not found[0].keys:
                return None
            pool, health = found
            return health.next_return(pool.fingerprints(), self._clock.now())
        if isinstance(message, _NotRecorded):
            raise ActorCrash(f"provider {message.provider}: key health not recorded: "
                             f"{message.error}")
        if isinstance(message, UnusableProviders):
            return dict(self._unusable)
        if isinstance(message, LeasesInFlight):
            return {name: {k.fingerprint: k.active for k in pool.keys}
                    for name, pool in self._pools.items()}
        raise TypeError(f"CredentialPoolActor cannot handle {type(message).__name__}")

    def _append(self, provider: str, events: list[Event]) -> None:
        """Append a provider's health events (one atomic append), not waiting for it.

        The state already folded them: should the append fail, the actor restarts and
        recovers from the log, which never had them.
        """
        keys = tuple(new_event(e) for e in events if not isinstance(e, BreakerChanged))
        breaker = tuple(new_event(e) for e in events if isinstance(e, BreakerChanged))
        parts = [StreamAppend(stream, part, ANY)
                 for stream, part in zip(health_streams(provider), (keys, breaker), strict=True)
                 if part]
        ref = self.actor_ref

        def committed(request: AppendRequest) -> None:
            if request.error is not None:
                try:  # to the actor's own thread: it restarts and recovers from the log
                    ref.tell(_NotRecorded(provider, request.error))
                except Exception:
                    pass  # already stopped: its successor recovers from the log

        try:
            self._log.submit(parts, callback=committed)
        except StoreError as exc:
            raise ActorCrash(f"cannot append: {exc}") from exc

    def snapshot(self) -> dict[str, list[tuple[str, int, int]]]:
        """Per provider: (fingerprint, active, leases) of each key, for status and tests."""
        return {
            name: [(k.fingerprint, k.active, k.leases) for k in pool.keys]
            for name, pool in self._pools.items()
        }
