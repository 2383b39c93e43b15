"""CredentialPoolActor (actors/credentials.py): strategies, reconciliation, leases, secrecy."""

import random
import secrets
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pykka
import pytest
from loguru import logger
from sessionwarden.actors.bridge import Ping, ask_blocking
from sessionwarden.actors.credentials import CredentialPoolActor, credentials_stream
from sessionwarden.actors.messages import Lease, Leased, Release, UnusableProviders
from sessionwarden.config import SIM_PROVIDER, ProviderConfig, parse_config
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.keys.pool import KeyState
from sessionwarden.events import CODEC, CredentialAdded, CredentialRemoved
from sessionwarden.redact import default_redactor, fingerprint
from sessionwarden.store import EventLog, StreamAppend
from sessionwarden.views.wiring import default_projections

from tests.actors.actor_support import no_leaked_actors

ADDED = CredentialAdded.type_tag()
REMOVED = CredentialRemoved.type_tag()



def providers(*entries: tuple[str, list[str], str, int]) -> tuple[ProviderConfig, ...]:
    """``(name, key variables, strategy, max_concurrent_leases)`` -> parsed providers."""
    text = ""
    for name, variables, strategy, cap in entries:
        keys = ", ".join(f'"env:{v}"' for v in variables)
        text += (
            "[[providers]]\n"
            f'name = "{name}"\n'
            f'base_url = "http://127.0.0.1:9/v1"\n'
            f"keys = [{keys}]\n"
            f'strategy = "{strategy}"\n'
            f"max_concurrent_leases = {cap}\n"
        )
    return parse_config(text, "test").providers


class Pool:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.log = EventLog(path, projections=default_projections())
        self.environ = {
            f"TEST_KEY_{i}": f"sk-test-{i}-{secrets.token_hex(16)}" for i in range(1, 5)
        }

    def fp(self, variable: str) -> str:
        return fingerprint(self.environ[variable])

    def start(
        self,
        config: tuple[ProviderConfig, ...],
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> "pykka.ActorRef[Any]":
        return CredentialPoolActor.start(
            self.log, config, self.environ if environ is None else environ, **options
        )

    def settle(self, ref: "pykka.ActorRef[Any] | None" = None) -> None:
        if ref is not None and ref.is_alive():
            ref.ask(Ping(), timeout=5)
        self.log.submit([StreamAppend("test-barrier", ())]).wait(10)

    def events(self, provider: str) -> list[Any]:
        return [CODEC.decode(e.type, e.data) for e in self.log.read_stream(
            credentials_stream(provider))]

    def view(self, provider: str) -> dict[str, tuple[str, str, int, Any]]:
        rows = self.log.read_connection().execute(
            "SELECT fingerprint, ref, state, calls, last_status FROM view_credentials"
            " WHERE provider = ?", (provider,)).fetchall()
        return {fp: (ref, state, calls, status) for fp, ref, state, calls, status in rows}


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    with no_leaked_actors(lambda: p.log.close()):
        p = Pool(tmp_path / "e.db")
        yield p


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING", format="{message}")
    try:
        yield messages
    finally:
        logger.remove(sink)


# ------------------------------------------------------------------ reconciliation


def test_keys_are_recorded_once_and_removed_keys_are_recorded_as_removed(
    pool: Pool,
) -> None:
    three = providers(("p1", ["TEST_KEY_1", "TEST_KEY_2", "TEST_KEY_3"], "fill_first", 4))
    ref = pool.start(three)
    pool.settle(ref)
    added = pool.events("p1")
    assert added == [
        CredentialAdded(
            provider="p1", ref=f"env:TEST_KEY_{i}", fingerprint=pool.fp(f"TEST_KEY_{i}"))
        for i in (1, 2, 3)
    ]
    ref.stop()

    ref = pool.start(three)  # a restart: nothing new to record
    pool.settle(ref)
    assert len(pool.events("p1")) == 3
    ref.stop()

    two = providers(("p1", ["TEST_KEY_1", "TEST_KEY_3"], "fill_first", 4))
    ref = pool.start(two)
    pool.settle(ref)
    events = pool.events("p1")
    assert events[3:] == [
        CredentialRemoved(provider="p1", fingerprint=pool.fp("TEST_KEY_2"), reason="not configured")
    ]
    view = pool.view("p1")
    assert view[pool.fp("TEST_KEY_2")][1] == "removed"
    assert view[pool.fp("TEST_KEY_1")][1] == view[pool.fp("TEST_KEY_3")][1] == "active"
    ref.stop()

    ref = pool.start(two)  # removed once, not on every start
    pool.settle(ref)
    assert len(pool.events("p1")) == 4
    ref.stop()

    ref = pool.start(three)  # configured again: active again
    pool.settle(ref)
    assert pool.events("p1")[4:] == [added[1]]
    assert pool.view("p1")[pool.fp("TEST_KEY_2")][1] == "active"


def test_keys_of_a_provider_removed_from_the_config_are_recorded_as_removed(
    pool: Pool,
) -> None:
    ref = pool.start(providers(
        ("p1", ["TEST_KEY_1"], "fill_first", 4), ("p2", ["TEST_KEY_2"], "fill_first", 4)))
    pool.settle(ref)
    ref.stop()
    ref = pool.start(providers(("p1", ["TEST_KEY_1"], "fill_first", 4)))
    pool.settle(ref)
    assert pool.view("p2")[pool.fp("TEST_KEY_2")][1] == "removed"


def test_a_key_whose_variable_is_unset_is_skipped_with_a_warning(
    pool: Pool, warnings: list[str]
) -> None:
    environ = {k: v for k, v in pool.environ.items() if k != "TEST_KEY_2"}
    config = providers(("p1", ["TEST_KEY_1", "TEST_KEY_2", "TEST_KEY_3"], "round_robin", 4))
    ref = pool.start(config, environ)
    ref.ask(Ping(), timeout=5)  # on_start has run
    assert any("TEST_KEY_2" in m and "skipped" in m for m in warnings), warnings
    assert not any(pool.environ["TEST_KEY_1"] in m for m in warnings)
    leased = [ask_blocking(ref, Lease("p1", f"c{i}")).fingerprint for i in range(4)]
    assert leased == [pool.fp("TEST_KEY_1"), pool.fp("TEST_KEY_3")] * 2
    pool.settle(ref)
    assert {e.ref for e in pool.events("p1") if isinstance(e, CredentialAdded)} == {
        "env:TEST_KEY_1", "env:TEST_KEY_3"}


def test_lease_without_a_usable_key_raises_no_credential(pool: Pool) -> None:
    config = providers(
        ("empty", ["TEST_UNSET_A", "TEST_UNSET_B"], "fill_first", 4),
        ("p1", ["TEST_KEY_1"], "fill_first", 4),
    )
    ref = pool.start(config)
    with pytest.raises(NoCredential, match="'empty' has no usable key: TEST_UNSET_A is not"
                                           " set; TEST_UNSET_B is not set"):
        ask_blocking(ref, Lease("empty", "c1"))
    assert ask_blocking(ref, UnusableProviders()) == {
        "empty": "TEST_UNSET_A is not set; TEST_UNSET_B is not set"
                 " (set a key and restart sessionwarden)"}
    with pytest.raises(NoCredential, match="'nowhere' has no usable key"):
        ask_blocking(ref, Lease("nowhere", "c2"))
    assert ask_blocking(ref, Lease("p1", "c3")).fingerprint == pool.fp("TEST_KEY_1")
    pool.settle(ref)
    assert pool.events("empty") == []
    assert [type(e) for e in pool.events("p1")] == [CredentialAdded]


# ------------------------------------------------------------------ leases


def test_leases_are_memory_only_and_never_appended(pool: Pool) -> None:
    ref = pool.start(providers(("p1", ["TEST_KEY_1", "TEST_KEY_2"], "least_used", 4)))
    leases: list[Leased] = [ask_blocking(ref, Lease("p1", f"c{i}")) for i in range(6)]
    assert Counter(lease.fingerprint for lease in leases) == {
        pool.fp("TEST_KEY_1"): 3, pool.fp("TEST_KEY_2"): 3}
    assert all(lease.secret == pool.environ[
        "TEST_KEY_1" if lease.fingerprint == pool.fp("TEST_KEY_1") else "TEST_KEY_2"]
        for lease in leases)
    for lease in leases[:4]:
        ref.tell(Release("p1", lease.fingerprint))
    pool.settle(ref)
    snapshot = dict((fp, (active, total)) for fp, active, total in
                    ref.proxy().snapshot().get()["p1"])
    active = Counter(lease.fingerprint for lease in leases[4:])
    both = (pool.fp("TEST_KEY_1"), pool.fp("TEST_KEY_2"))
    assert snapshot == {fp: (active[fp], 3) for fp in both}
    # Which key served a call is part of the call's completion: the pool appends nothing.
    assert [type(e) for e in pool.events("p1")] == [CredentialAdded, CredentialAdded]
    ref.stop()
    ref = pool.start(providers(("p1", ["TEST_KEY_1", "TEST_KEY_2"], "least_used", 4)))
    restarted = ref.proxy().snapshot().get()["p1"]
    assert [active for _, active, _ in restarted] == [0, 0]  # in flight: none after a restart


def test_a_store_failure_while_reconciling_stops_the_start(pool: Pool) -> None:
    """The pool's one append is synchronous: a failure is raised, never lost."""
    pool.log.close()
    with pytest.raises(pykka.ActorDeadError):
        ref = pool.start(providers(("p1", ["TEST_KEY_1"], "fill_first", 4)))
        ref.ask(Ping(), timeout=5)


def test_round_robin_and_the_soft_cap_through_the_actor(pool: Pool) -> None:
    ref = pool.start(providers(
        ("rr", ["TEST_KEY_1", "TEST_KEY_2", "TEST_KEY_3"], "round_robin", 4),
        ("ff", ["TEST_KEY_1", "TEST_KEY_2"], "fill_first", 2),
    ))
    rr = [ask_blocking(ref, Lease("rr", f"r{i}")).fingerprint for i in range(6)]
    assert rr == [pool.fp(f"TEST_KEY_{i}") for i in (1, 2, 3)] * 2
    # fill_first with max_concurrent_leases = 2: two on the first key, then the second,
    # and once both are at the cap the call is still served.
    ff = [ask_blocking(ref, Lease("ff", f"f{i}")) for i in range(5)]
    one, two = pool.fp("TEST_KEY_1"), pool.fp("TEST_KEY_2")
    assert [lease.fingerprint for lease in ff] == [one, one, two, two, one]
    ref.tell(Release("ff", two))
    assert ask_blocking(ref, Lease("ff", "f5")).fingerprint == two


def test_random_strategy_with_a_seeded_rng_is_reproducible(pool: Pool) -> None:
    config = providers(("rnd", ["TEST_KEY_1", "TEST_KEY_2", "TEST_KEY_3"], "random", 100))

    def run() -> list[str]:
        ref = pool.start(config, rng=random.Random(1234))
        try:
            return [ask_blocking(ref, Lease("rnd", f"c{i}")).fingerprint for i in range(30)]
        finally:
            ref.stop()

    first = run()
    assert first == run()
    assert len(set(first)) == 3


# ------------------------------------------------------------------ secrecy


def test_the_secret_never_reaches_the_log_or_a_repr(pool: Pool) -> None:
    config = providers(("p1", ["TEST_KEY_1", "TEST_KEY_2"], "round_robin", 4))
    ref = pool.start(config)
    for i in range(4):
        lease = ask_blocking(ref, Lease("p1", f"c{i}"))
        for text in (repr(lease), str(lease)):
            assert lease.secret not in text and lease.fingerprint in text
        ref.tell(Release("p1", lease.fingerprint))
    ref.stop()  # restart and removal are recorded too
    ref = pool.start(providers(("p1", ["TEST_KEY_1"], "round_robin", 4)))
    pool.settle(ref)
    state = KeyState("env:TEST_KEY_1", pool.environ["TEST_KEY_1"])
    assert pool.environ["TEST_KEY_1"] not in repr(state)
    assert pool.environ["TEST_KEY_1"] not in repr([state])
    for variable in ("TEST_KEY_1", "TEST_KEY_2"):
        assert pool.environ[variable] in default_redactor  # registered for scrubbing
    assert len(pool.events("p1")) == 2 + 1

    pykka.ActorRegistry.stop_all()
    pool.log.close()
    blob = b"".join(
        f.read_bytes() for f in pool.path.parent.iterdir() if f.name.startswith("e.db"))
    assert b"TEST_KEY_1" in blob  # the reference is recorded ...
    for variable in ("TEST_KEY_1", "TEST_KEY_2"):
        secret = pool.environ[variable].encode()
        assert secret not in blob  # ... the secret never
        assert secret[8:] not in blob


def test_the_simulated_provider_is_keyless_and_records_no_key(pool: Pool) -> None:
    # A provider called sim but configured with a real address is an ordinary one.
    (ordinary,) = providers(("sim", [], "fill_first", 4))
    ref = pool.start((SIM_PROVIDER, *providers(("p1", ["TEST_KEY_1"], "fill_first", 4))))
    leases = [ask_blocking(ref, Lease("sim", f"c{i}")) for i in range(3)]
    assert {(x.provider, x.fingerprint, x.secret) for x in leases} == {("sim", "", "")}
    ref.tell(Release("sim", ""))
    pool.settle(ref)
    assert pool.events("sim") == [] and pool.view("sim") == {}
    ref.stop()
    ref = pool.start((ordinary,))
    with pytest.raises(NoCredential, match="'sim' has no usable key"):
        ask_blocking(ref, Lease("sim", "c9"))
