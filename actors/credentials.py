"""CredentialPoolActor: the keys of each provider, leased one call at a time.

Keys are configured as references (``env:NAME``); the secret is resolved at start, kept
only in memory, registered with the redactor, and identified everywhere else by its
fingerprint. A key that cannot be resolved (its variable unset, or too short to be a
key) is skipped with a warning; a provider left without any is unusable: a warning at
start names the variables to set, :class:`UnusableProviders` lists it with that reason,
and a lease for it fails with the same reason.

At start the actor reconciles the configuration with the log: a key not yet in
``view_credentials`` is recorded as CredentialAdded, a recorded key no longer
configured as CredentialRemoved; that append is synchronous, so a store failure stops
the actor's start (and the daemon's) instead of being lost.

Leases are memory only: which key served a call is recorded in the call's completion,
and the number of leases in flight restarts at zero with the process (no call of the
previous process is still in flight). Strategies are the domain's
(``sessionwarden.domain.pool``). A simulated provider (the built-in ``sim``) is keyless:
every lease of it is granted, with no secret and no fingerprint.
"""

import random
from collections.abc import Callable, Mapping, Sequence

from loguru import logger
from sessionwarden.actors.bridge import GovernedActor, Reply
from sessionwarden.actors.messages import Lease, Leased, Release, UnusableProviders, new_event
from sessionwarden.config import ConfigError, ProviderConfig, resolve_key
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.pool import KeyState, Pool
from sessionwarden.events import CredentialAdded, CredentialRemoved, Event
from sessionwarden.redact import default_redactor
from sessionwarden.store import EventLog, StreamAppend

__all__ = ["CredentialPoolActor", "credentials_stream"]


def credentials_stream(provider: str) -> str:
    """The stream of a provider's pool."""
    return f"credentials-{provider}"


class CredentialPoolActor(GovernedActor):
    """Leases keys to calls."""

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
        """Resolve keys and reconcile the configuration with the recorded pool."""
        recorded = self.load()
        appends: list[StreamAppend] = []
        for provider in self._providers:
            pool = Pool(provider.strategy, provider.max_concurrent_leases)
            self._pools[provider.name] = pool
            known = recorded.pop(provider.name, {})
            problems: list[str] = []
            for ref in provider.keys:
                secret = self._resolve(ref, problems)
                if secret is not None:
                    key = KeyState(ref, secret)
                    key.leases = known.get(key.fingerprint, ("", 0))[1]
                    pool.keys.append(key)
            if not provider.simulated:  # keyless by design: nothing to report
                self._report(provider, len(pool.keys), problems)
            events: list[Event] = [
                CredentialAdded(provider=provider.name, ref=k.ref, fingerprint=k.fingerprint)
                for k in pool.keys if k.fingerprint not in known
            ]
            configured = {k.fingerprint for k in pool.keys}
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
            why = "; ".join(problems) + " (set a key and restart sessionwarden)"
        else:
            why = 'it has no keys (add keys = ["env:NAME"] to its [[providers]] entry)'
        self._unusable[provider.name] = why
        logger.warning("provider {} is unusable, calls to it get 503: {}", provider.name, why)

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch Lease, Release and UnusableProviders."""
        if isinstance(message, Lease):
            if message.provider in self._keyless:
                return Leased(message.provider, "", "")
            pool = self._pools.get(message.provider)
            if pool is None or not pool.keys:
                why = self._unusable.get(message.provider)
                raise NoCredential(f"provider {message.provider!r} has no usable key"
                                   + (f": {why}" if why else ""))
            key: KeyState = pool.lease(self._rng)
            return Leased(message.provider, key.fingerprint, key.secret)
        if isinstance(message, Release):
            pool = self._pools.get(message.provider)
            if pool is not None:
                pool.release(message.fingerprint)
            return None
        if isinstance(message, UnusableProviders):
            return dict(self._unusable)
        raise TypeError(f"CredentialPoolActor cannot handle {type(message).__name__}")

    def snapshot(self) -> dict[str, list[tuple[str, int, int]]]:
        """Per provider: (fingerprint, active, leases) of each key, for status and tests."""
        return {
            name: [(k.fingerprint, k.active, k.leases) for k in pool.keys]
            for name, pool in self._pools.items()
        }
