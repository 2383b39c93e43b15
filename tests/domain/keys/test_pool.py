"""Key pools (domain/keys/pool.py): the strategies, pure."""

import random
from collections import Counter

import pytest
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.keys.pool import KeyState, Pool, pick


def keys(n: int) -> list[KeyState]:
    return [KeyState(f"env:K{i}", f"secret-value-{i}-xxxxxxxx") for i in range(n)]


def test_pick_fill_first_uses_the_first_key_until_it_is_at_the_cap() -> None:
    ks = keys(3)
    rng = random.Random(0)
    assert pick(ks, "fill_first", 0, 2, rng) == (ks[0], 0)
    ks[0].active = 2
    assert pick(ks, "fill_first", 0, 2, rng)[0] is ks[1]
    ks[1].active = 5
    assert pick(ks, "fill_first", 0, 2, rng)[0] is ks[2]
    ks[2].active = 2
    # Soft cap: every key busy, the call is still served (by the first key).
    assert pick(ks, "fill_first", 0, 2, rng)[0] is ks[0]


def test_pick_round_robin_rotates_and_skips_keys_at_the_cap() -> None:
    ks = keys(3)
    rng = random.Random(0)
    cursor, seen = 0, []
    for _ in range(7):
        key, cursor = pick(ks, "round_robin", cursor, 4, rng)
        seen.append(ks.index(key))
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    assert cursor == 1
    ks[1].active = 4  # at the cap: skipped
    key, cursor = pick(ks, "round_robin", 1, 4, rng)
    assert (ks.index(key), cursor) == (2, 0)
    for k in ks:
        k.active = 4
    key, cursor = pick(ks, "round_robin", 2, 4, rng)  # all busy: still rotates
    assert (ks.index(key), cursor) == (2, 0)


def test_pick_random_is_uniform_reproducible_and_prefers_keys_under_the_cap() -> None:
    ks = keys(4)

    def draws(seed: int, n: int) -> list[int]:
        rng = random.Random(seed)
        return [ks.index(pick(ks, "random", 0, 4, rng)[0]) for _ in range(n)]

    first = draws(7, 400)
    assert first == draws(7, 400)
    assert first != draws(8, 400)
    counts = Counter(first)
    assert set(counts) == {0, 1, 2, 3}
    assert all(60 < c < 140 for c in counts.values()), counts
    ks[0].active = ks[2].active = 4
    rng = random.Random(7)
    assert {ks.index(pick(ks, "random", 0, 4, rng)[0]) for _ in range(100)} == {1, 3}
    assert pick(ks, "random", 3, 4, rng)[1] == 3  # the cursor is left alone


def test_pick_least_used_prefers_fewest_active_then_fewest_leases() -> None:
    ks = keys(3)
    rng = random.Random(0)
    ks[0].active, ks[0].leases = 1, 1
    ks[1].active, ks[1].leases = 0, 9
    ks[2].active, ks[2].leases = 0, 3
    assert pick(ks, "least_used", 0, 4, rng)[0] is ks[2]
    ks[2].active = 1
    assert pick(ks, "least_used", 0, 4, rng)[0] is ks[1]
    ks[1].active = 4  # at the cap: a key under it wins even with more active leases
    ks[0].active, ks[2].active = 3, 2
    assert pick(ks, "least_used", 0, 4, rng)[0] is ks[2]


def test_pick_with_no_keys_raises_no_credential() -> None:
    with pytest.raises(NoCredential):
        pick([], "fill_first", 0, 4, random.Random(0))




def test_a_pool_counts_leases_and_releases() -> None:
    pool = Pool("least_used", 4)
    pool.keys.extend(keys(2))
    rng = random.Random(0)
    got = [pool.lease(rng).fingerprint for _ in range(4)]
    assert Counter(got) == {pool.keys[0].fingerprint: 2, pool.keys[1].fingerprint: 2}
    pool.release(pool.keys[0].fingerprint)
    pool.release("fp:unknown")  # a key removed meanwhile: nothing to count down
    assert [(k.active, k.leases) for k in pool.keys] == [(1, 2), (2, 2)]
    assert pool.lease(rng) is pool.keys[0]
