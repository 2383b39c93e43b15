"""CredentialPoolActor: the keys of each provider, leased one call at a time.

Keys are configured as references (``env:NAME``); the secret is resolved at start, kept
only in memory, registered with the redactor, and identified everywhere else by its
fingerprint. At start the actor reconciles the configuration with the log: a key not yet
in ``view_credentials`` is recorded as CredentialAdded, a recorded key no longer
configured as CredentialRemoved. Each lease and release is an event on
``credentials-<provider>``, so ``usage --by credential`` and the audit trail name the key
that served every call.

Strategies (pure, in :func:`pick`): ``fill_first`` uses the first usable key until it
is unusable, ``round_robin`` rotates, ``random`` picks uniformly, ``least_used`` picks the
key with the fewest active then total leases. ``max_concurrent_leases`` is a soft cap:
keys under it are preferred, but a call is never refused only because all are busy.
"""

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loguru import logger
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.actors.errors import NoCredential
from sessionwarden.actors.messages import Lease, Leased, Release, new_event
from sessionwarden.cmd.config import ProviderConfig, resolve_key
from sessionwarden.cmd.errors import ConfigError
from sessionwarden.events import CredentialAdded, CredentialRemoved, LeaseAcquired, LeaseReleased
from sessionwarden.redact import default_redactor, fingerprint
from sessionwarden.store import ANY, EventLog, NewEvent, StreamAppend

__all__ = ["CredentialPoolActor", "KeyState", "credentials_stream", "pick"]


def credentials_stream(provider: str) -> str:
    """The stream of a provider's pool."""
    return f"credentials-{provider}"


class KeyState:
    """One key of a pool: its reference, secret, fingerprint and lease counters."""

    __slots__ = ("active", "fingerprint", "leases", "ref", "secret")

    def __init__(self, ref: str, secret: str) -> None:
        """Hold ``secret`` (resolved from ``ref``); never printed."""
        self.ref = ref
        self.secret = secret
        self.fingerprint = fingerprint(secret)
        self.active = 0
        self.leases = 0

    def __repr__(self) -> str:
        return f"KeyState({self.ref!r}, {self.fingerprint!r}, active={self.active})"


def pick(
    keys: Sequence[KeyState], strategy: str, cursor: int, cap: int, rng: random.Random
) -> tuple[KeyState, int]:
    """Choose a key by ``strategy``; returns it and the next round-robin cursor."""
    if not keys:
        raise NoCredential("no usable key")
    under_cap = [k for k in keys if k.active < cap] or list(keys)
    if strategy == "round_robin":
        for step in range(len(keys)):
            key = keys[(cursor + step) % len(keys)]
            if key in under_cap:
                return key, (cursor + step + 1) % len(keys)
    if strategy == "random":
        return rng.choice(under_cap), cursor
    if strategy == "least_used":
        return min(under_cap, key=lambda k: (k.active, k.leases)), cursor
    return under_cap[0], cursor  # fill_first


class _Pool:
    __slots__ = ("cap", "cursor", "keys", "strategy")

    def __init__(self, strategy: str, cap: int) -> None:
        self.keys: list[KeyState] = []
        self.strategy = strategy
        self.cap = cap
        self.cursor = 0


class CredentialPoolActor(GovernedActor):
    """Leases keys to calls and records every lease."""

    def __init__(
        self,
        log: EventLog,
        providers: Sequence[ProviderConfig],
        environ: Mapping[str, str],
        *,
        rng: random.Random | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Pool the keys of ``providers``, resolving references from ``environ``."""
        super().__init__(on_failure)
        self._log = log
        self._providers = list(providers)
        self._environ = dict(environ)
        self._rng = rng or random.Random()
        self._pools: dict[str, _Pool] = {}

    def on_start(self) -> None:
        """Resolve keys and reconcile the configuration with the recorded pool."""
        appends = []
        conn = self._log.read_connection()
        for provider in self._providers:
            pool = _Pool(provider.strategy, provider.max_concurrent_leases)
            self._pools[provider.name] = pool
            for ref in provider.keys:
                try:
                    secret = resolve_key(ref, self._environ)
                except ConfigError as exc:
                    logger.warning("provider {}: {}; key skipped", provider.name, exc)
                    continue
                try:
                    default_redactor.add(secret)
                except ValueError:
                    logger.warning("provider {}: key {} is too short to be a real key; skipped",
                                   provider.name, ref)
                    continue
                pool.keys.append(KeyState(ref, secret))
            recorded = {
                fp: ref for fp, ref in conn.execute(
                    "SELECT fingerprint, ref FROM view_credentials"
                    " WHERE provider = ? AND state = 'active'", (provider.name,))
            }
            events: list[NewEvent] = []
            for key in pool.keys:
                if key.fingerprint not in recorded:
                    events.append(new_event(CredentialAdded(
                        provider=provider.name, ref=key.ref, fingerprint=key.fingerprint)))
            configured = {k.fingerprint for k in pool.keys}
            for fp in recorded:
                if fp not in configured:
                    events.append(new_event(CredentialRemoved(
                        provider=provider.name, fingerprint=fp, reason="not configured")))
            if events:
                appends.append(StreamAppend(credentials_stream(provider.name), tuple(events)))
        configured = {p.name for p in self._providers}
        orphans: dict[str, list[str]] = {}
        for name, fp in conn.execute(
            "SELECT provider, fingerprint FROM view_credentials WHERE state = 'active'"
        ):
            if name not in configured:
                orphans.setdefault(name, []).append(fp)
        for name, fps in orphans.items():
            removed = tuple(
                new_event(CredentialRemoved(provider=name, fingerprint=fp,
                                            reason="provider not configured"))
                for fp in fps
            )
            appends.append(StreamAppend(credentials_stream(name), removed))
        if appends:
            self._log.append_batch(appends)

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch Lease and Release."""
        if isinstance(message, Lease):
            return self._lease(message)
        if isinstance(message, Release):
            self._release(message)
            return None
        raise TypeError(f"CredentialPoolActor cannot handle {type(message).__name__}")

    def _lease(self, lease: Lease) -> Leased:
        pool = self._pools.get(lease.provider)
        if pool is None or not pool.keys:
            raise NoCredential(f"provider {lease.provider!r} has no usable key")
        key, pool.cursor = pick(pool.keys, pool.strategy, pool.cursor, pool.cap, self._rng)
        key.active += 1
        key.leases += 1
        self._submit(lease.provider, LeaseAcquired(
            provider=lease.provider, fingerprint=key.fingerprint, call_id=lease.call_id))
        return Leased(lease.provider, key.fingerprint, key.secret)

    def _release(self, release: Release) -> None:
        pool = self._pools.get(release.provider)
        for key in pool.keys if pool else ():
            if key.fingerprint == release.fingerprint:
                key.active = max(0, key.active - 1)
        self._submit(release.provider, LeaseReleased(
            provider=release.provider, fingerprint=release.fingerprint,
            call_id=release.call_id, status=release.status))

    def _submit(self, provider: str, event: Any) -> None:
        self._log.submit([StreamAppend(credentials_stream(provider), (new_event(event),), ANY)])

    def snapshot(self) -> dict[str, list[tuple[str, int, int]]]:
        """Per provider: (fingerprint, active, leases) of each key, for status and tests."""
        return {
            name: [(k.fingerprint, k.active, k.leases) for k in pool.keys]
            for name, pool in self._pools.items()
        }

