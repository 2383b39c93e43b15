"""Key pools: which key of a provider serves the next call (pure; no I/O, no clock).

Strategies (:func:`pick`): ``fill_first`` uses the first usable key until it is
unusable, ``round_robin`` rotates, ``random`` picks uniformly (with an injected RNG),
``least_used`` picks the key with the fewest active then total leases.
``max_concurrent_leases`` is a soft cap: keys under it are preferred, but a call is never
refused only because all are busy.

The key state machine (ok → cooling → exhausted → ok, dead) is
``sessionwarden.domain.keys.key_states``, by fingerprint; selection is to take only the keys
its ``usable`` returns (not wired yet). :class:`KeyState` here is a pool entry's secret and
leases.
"""

import random
from collections.abc import Collection, Sequence

from sessionwarden.domain.errors import NoCredential
from sessionwarden.redact import fingerprint

__all__ = ["KeyState", "Pool", "pick"]


class KeyState:
    """One key of a pool: its reference, secret, fingerprint and lease counters.

    ``active`` (leases in flight) is memory only: after a restart it starts at zero, since
    no call of the previous process is still in flight.
    """

    __slots__ = ("active", "fingerprint", "leases", "ref", "secret")

    def __init__(self, ref: str, secret: str, leases: int = 0) -> None:
        """Hold ``secret`` (resolved from ``ref``); never printed."""
        self.ref = ref
        self.secret = secret
        self.fingerprint = fingerprint(secret)
        self.active = 0
        self.leases = leases

    def __repr__(self) -> str:
        return f"KeyState({self.ref!r}, {self.fingerprint!r}, active={self.active})"


class Pool:
    """A provider's keys, its strategy, its soft cap and the round-robin cursor."""

    __slots__ = ("cap", "cursor", "keys", "strategy")

    def __init__(self, strategy: str, cap: int) -> None:
        """An empty pool using ``strategy`` with at most ``cap`` preferred leases per key."""
        self.keys: list[KeyState] = []
        self.strategy = strategy
        self.cap = cap
        self.cursor = 0

    def fingerprints(self) -> list[str]:
        """The fingerprint of each entry (two entries with one secret appear twice)."""
        return [k.fingerprint for k in self.keys]

    def lease(self, rng: random.Random, allowed: Collection[str] | None = None) -> KeyState:
        """Choose a key among ``allowed`` fingerprints (None: any), count the lease, return it.

        Benched keys are left out by the caller through ``allowed``; the round-robin cursor
        runs over the whole pool, so a key that returns takes its turn again.

        Raises:
            NoCredential: no key is allowed.
        """
        if allowed is None:
            key, self.cursor = pick(self.keys, self.strategy, self.cursor, self.cap, rng)
        elif self.strategy == "round_robin":
            size = len(self.keys)
            order = [self.keys[(self.cursor + i) % size] for i in range(size)]
            candidates = [k for k in order if k.fingerprint in allowed]
            if not candidates:
                raise NoCredential("no usable key")
            key = next((k for k in candidates if k.active < self.cap), candidates[0])
            self.cursor = (self.keys.index(key) + 1) % size
        else:
            key, _ = pick([k for k in self.keys if k.fingerprint in allowed], self.strategy,
                          0, self.cap, rng)
        key.active += 1
        key.leases += 1
        return key

    def release(self, fp: str) -> None:
        """A call is done with the key ``fp``."""
        for key in self.keys:
            if key.fingerprint == fp:
                key.active = max(0, key.active - 1)
                return


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
