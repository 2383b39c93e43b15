import math
from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify.classifier import classify
from sessionwarden.domain.classify.failover import key_failure
from sessionwarden.domain.keys.breaker import (
    OVERLOAD_COOLDOWN_MAX_SECONDS,
    OVERLOAD_FAILURES,
    PROBE_TIMEOUT_SECONDS,
    Breaker,
    Decision,
    claim_probe,
    decide,
    on_call_failed,
    on_call_succeeded,
    on_keys_changed,
    probe_abandoned,
    reset,
)
from sessionwarden.domain.keys.key_states import (
    KeyFailure,
    KeyStates,
    earliest_return,
    on_failure,
    on_reset,
    on_success,
    usable,
)
from sessionwarden.events import CODEC, BreakerChanged, Event

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A, B = "fp:aaaaaaaaaaaa", "fp:bbbbbbbbbbbb"
POOL = (A, B)
KEYS = KeyStates(provider="deepseek")
CLOSED = Breaker(provider="deepseek")


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def fold_keys(keys: KeyStates, events: tuple[Event, ...]) -> KeyStates:
    for event in events:
        keys = keys.fold(event)
    return keys


def fold_breaker(breaker: Breaker, events: tuple[Event, ...]) -> Breaker:
    for event in events:
        breaker = breaker.fold(event)
    return breaker


def bench_429(keys: KeyStates, breaker: Breaker, fp: str, headers: dict[str, str],
              now: datetime = NOW, pool: tuple[str, ...] = POOL, shared: bool = False
              ) -> tuple[KeyStates, Breaker, list[Event]]:
    """What the rate guard does with a 429: judge it, bench the key, update the breaker."""
    found = classify(429, headers, b"", now=now, shared_limits=shared)
    key_events = on_failure(keys, pool, fp, key_failure(found, 429, now, shared), now)
    keys = fold_keys(keys, key_events)
    breaker_events = on_keys_changed(breaker, keys, pool, now)
    return keys, fold_breaker(breaker, breaker_events), [*key_events, *breaker_events]


# -- a 429 through the key states and the breaker ------------------------------------

def test_a_transient_2s_429_does_not_bench_anything_for_long() -> None:
    keys, breaker, events = bench_429(KEYS, CLOSED, A, {"retry-after": "2"}, pool=(A,))
    assert [e.state for e in events] == ["cooling", "open"]  # the sole key rests 2 s
    assert decide(breaker, keys, (A,), later(1)) == Decision(
        action="refuse", retry_after=1, until=later(2), reason="no_usable_key")
    assert decide(breaker, keys, (A,), later(3)).action == "probe"  # it works 3 s later


def test_a_capacity_429_cools_one_key_briefly_and_never_blocks_the_provider() -> None:
    # the DeepSeek case: a bare "overloaded" 429 once blocked every model for 45 minutes
    keys, breaker, _ = bench_429(KEYS, CLOSED, A, {})
    assert breaker.state == "closed"
    assert decide(breaker, keys, POOL, later(1)).action == "pass"
    assert usable(keys, POOL, later(1)) == {B}
    assert usable(keys, POOL, later(5)) == {A, B}


# -- the provider breaker --------------------------------------------------------------

def test_the_breaker_stays_closed_while_a_key_is_usable() -> None:
    keys, breaker, events = bench_429(KEYS, CLOSED, A, {"x-ratelimit-remaining-requests": "0",
                                                        "x-ratelimit-reset-requests": "30m"})
    assert [e.reason for e in events] == ["genuine_limit"]
    assert breaker.state == "closed"
    assert decide(breaker, keys, POOL, later(60)) == Decision(action="pass")


def test_every_key_benched_fails_fast_with_the_earliest_return() -> None:
    keys, breaker, _ = bench_429(KEYS, CLOSED, A, {"x-ratelimit-remaining-requests-1h": "0",
                                                   "x-ratelimit-reset-requests-1h": "1800"})
    keys, breaker, events = bench_429(keys, breaker, B, {"x-ratelimit-remaining-requests": "0",
                                                         "x-ratelimit-reset-requests": "600.5"})
    assert isinstance(events[-1], BreakerChanged)
    assert (breaker.state, breaker.until, breaker.reason) == ("open", later(600.5),
                                                              "no_usable_key")
    decision = decide(breaker, keys, POOL, later(10))
    assert decision == Decision(action="refuse", retry_after=591, until=later(600.5),
                                reason="no_usable_key")


def test_half_open_lets_exactly_one_probe_through_then_closes_on_success() -> None:
    keys, breaker, _ = bench_429(KEYS, CLOSED, A, {"retry-after": "120"}, pool=(A,),
                                 shared=True)
    keys = fold_keys(keys, on_failure(keys, (A,), A, KeyFailure(kind="genuine_limit",
                                                                reset_at=later(120)), NOW))
    breaker = fold_breaker(breaker, on_keys_changed(breaker, keys, (A,), NOW))
    assert breaker.until == later(120)
    at = later(120)
    decisions = []
    for _ in range(5):  # five sessions ask at the same moment
        decision = decide(breaker, keys, (A,), at)
        decisions.append(decision.action)
        if decision.action == "probe":
            breaker = claim_probe(breaker, at)
    assert decisions == ["probe", "refuse", "refuse", "refuse", "refuse"]
    assert decide(breaker, keys, (A,), at).retry_after == 1
    keys = fold_keys(keys, on_success(keys, (A,), A, sent_at=at, now=later(121)))
    breaker, events = on_call_succeeded(breaker, later(121))
    assert [(e.state, e.reason) for e in events] == [("closed", "recovered")]
    assert decide(breaker, keys, (A,), later(121)).action == "pass"


def test_a_failed_probe_reopens_until_the_next_key_returns() -> None:
    keys = fold_keys(KEYS, on_failure(KEYS, (A,), A, KeyFailure(kind="genuine_limit",
                                                                reset_at=later(60)), NOW))
    breaker = fold_breaker(CLOSED, on_keys_changed(CLOSED, keys, (A,), NOW))
    breaker = claim_probe(breaker, later(60))
    again = on_failure(keys, (A,), A, KeyFailure(kind="genuine_limit", reset_at=later(900)),
                       later(61))
    keys = fold_keys(keys, again)
    breaker, none = on_call_failed(breaker, "genuine_limit", later(61))
    assert none == () and breaker.probe_at is None
    (reopened,) = on_keys_changed(breaker, keys, (A,), later(61))
    breaker = breaker.fold(reopened)
    assert (breaker.mode(later(61)), breaker.until) == ("open", later(900))
    assert decide(breaker, keys, (A,), later(100)).retry_after == 800


def test_a_lost_probe_frees_its_slot_after_the_timeout() -> None:
    breaker = Breaker(provider="deepseek", state="open", until=NOW, reason="overload")
    breaker = claim_probe(breaker, NOW)
    assert decide(breaker, KEYS, POOL, later(PROBE_TIMEOUT_SECONDS - 1)).reason == "probing"
    assert decide(breaker, KEYS, POOL, later(PROBE_TIMEOUT_SECONDS)).action == "probe"


def test_an_abandoned_probe_frees_its_slot_and_no_other_attempt_does() -> None:
    breaker = Breaker(provider="deepseek", state="open", until=NOW, reason="overload")
    held = claim_probe(breaker, NOW, "call-1 fp:a")
    for other in ("call-1 fp:b", "call-2 fp:a", ""):  # the call's failed key, another call
        assert probe_abandoned(held, other) == held
        assert decide(held, KEYS, POOL, later(1)).reason == "probing"
    freed = probe_abandoned(held, "call-1 fp:a")
    assert (freed.probe_at, freed.probe_call) == (None, "")
    assert decide(freed, KEYS, POOL, later(1)).action == "probe"
    assert probe_abandoned(breaker, "call-1 fp:a") == breaker  # no probe out: nothing


def test_sustained_overload_opens_the_breaker_and_failed_probes_double_the_wait() -> None:
    breaker, now = CLOSED, NOW
    for _ in range(OVERLOAD_FAILURES - 1):
        breaker, events = on_call_failed(breaker, "overloaded", now)
        assert events == ()
        now += timedelta(seconds=5)
    breaker, (opened,) = on_call_failed(breaker, "server_error", now)
    assert (opened.state, opened.reason, breaker.until) == ("open", "overload",
                                                            now + timedelta(seconds=30))
    assert decide(breaker, KEYS, POOL, now + timedelta(seconds=29)).retry_after == 1
    waits = []
    for _ in range(4):  # every probe fails
        now = breaker.until or now
        assert decide(breaker, KEYS, POOL, now).action == "probe"
        breaker = claim_probe(breaker, now)
        breaker, events = on_call_failed(breaker, "timeout", now)
        assert len(events) == 1 and breaker.until is not None
        waits.append((breaker.until - now).total_seconds())
    assert waits == [60, 120, 240, OVERLOAD_COOLDOWN_MAX_SECONDS]


def test_a_success_ends_the_overload_streak_and_old_failures_expire() -> None:
    breaker = CLOSED
    for _ in range(OVERLOAD_FAILURES - 1):
        breaker, _ = on_call_failed(breaker, "overloaded", NOW)
    breaker, _ = on_call_succeeded(breaker, NOW)
    breaker, events = on_call_failed(breaker, "overloaded", NOW)
    assert events == () and len(breaker.failures) == 1
    for _ in range(OVERLOAD_FAILURES - 2):
        breaker, _ = on_call_failed(breaker, "overloaded", NOW)
    breaker, events = on_call_failed(breaker, "overloaded", later(61))  # the rest are stale
    assert events == ()
    breaker, events = on_call_failed(breaker, "genuine_limit", later(62))  # not an overload
    assert events == () and len(breaker.failures) == 1


def test_an_upstream_retry_after_lengthens_an_overload_opening_up_to_the_cap() -> None:
    breaker = CLOSED
    for _ in range(OVERLOAD_FAILURES - 1):
        breaker, _ = on_call_failed(breaker, "overloaded", NOW)
    opened, _ = on_call_failed(breaker, "overloaded", NOW, reset_at=later(120))
    assert opened.until == later(120)
    capped, _ = on_call_failed(breaker, "overloaded", NOW, reset_at=later(86400))
    assert capped.until == later(OVERLOAD_COOLDOWN_MAX_SECONDS)


def test_a_success_from_before_the_opening_does_not_close_it() -> None:
    breaker = Breaker(provider="deepseek", state="open", until=later(30), reason="overload")
    still, events = on_call_succeeded(breaker, later(5))
    assert events == () and still.state == "open"


def test_a_key_back_early_closes_a_no_usable_key_breaker() -> None:
    keys = KEYS
    for fp in POOL:
        keys = fold_keys(keys, on_failure(keys, POOL, fp, KeyFailure(kind="billing"), NOW))
    breaker = fold_breaker(CLOSED, on_keys_changed(CLOSED, keys, POOL, NOW))
    assert decide(breaker, keys, POOL, later(60)).action == "refuse"
    keys = fold_keys(keys, on_reset(keys, B, later(60)))  # `keys reset deepseek B`
    assert decide(breaker, keys, POOL, later(60)).action == "pass"  # before the close lands
    (closed,) = on_keys_changed(breaker, keys, POOL, later(60))
    assert (closed.state, closed.reason) == ("closed", "key_available")


def test_every_key_dead_refuses_without_a_retry_after() -> None:
    keys = KEYS
    for fp in POOL:
        keys = fold_keys(keys, on_failure(keys, POOL, fp, KeyFailure(kind="auth_revoked"), NOW))
    (opened,) = on_keys_changed(CLOSED, keys, POOL, NOW)
    breaker = CLOSED.fold(opened)
    assert (breaker.state, breaker.until) == ("open", None)
    assert decide(breaker, keys, POOL, later(86400)) == Decision(action="refuse",
                                                                 reason="no_usable_key")
    assert on_keys_changed(breaker, keys, POOL, later(5)) == ()


def test_shared_limits_bench_the_whole_pool_and_open_the_breaker() -> None:
    headers = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "15m"}
    keys, breaker, events = bench_429(KEYS, CLOSED, A, headers, shared=True)
    assert [getattr(e, "reason", "") for e in events] == [
        "genuine_limit", "shared_limit", "no_usable_key"]
    assert decide(breaker, keys, POOL, later(1)).retry_after == 899
    assert decide(breaker, keys, POOL, later(900)).action == "probe"


def test_an_overload_opening_is_replaced_when_the_keys_return_later() -> None:
    breaker = Breaker(provider="deepseek", state="open", until=later(30), reason="overload")
    keys = fold_keys(KEYS, on_failure(KEYS, (A,), A, KeyFailure(kind="billing"), NOW))
    (event,) = on_keys_changed(breaker, keys, (A,), NOW)
    assert (event.reason, event.until) == ("no_usable_key", "2026-12-03T12:00:00.000+00:00")
    short = fold_keys(KEYS, on_failure(KEYS, (A,), A, KeyFailure(kind="transient_limit"), NOW))
    assert on_keys_changed(breaker, short, (A,), NOW) == ()  # the overload wait is longer


def test_breaker_reset_closes_by_hand() -> None:
    breaker = Breaker(provider="deepseek", state="open", until=later(30), reason="overload")
    (closed,) = reset(breaker)
    assert (closed.state, closed.reason) == ("closed", "operator_reset")
    assert breaker.fold(closed).mode(NOW) == "closed"
    assert reset(CLOSED) == ()


def test_fold_ignores_other_providers() -> None:
    other = BreakerChanged(provider="openai", state="open", reason="overload")
    assert CLOSED.fold(other) is CLOSED


def test_a_restart_keeps_failing_fast_until_the_reset_then_probes() -> None:
    keys, breaker, log = bench_429(KEYS, CLOSED, A, {"x-ratelimit-remaining-requests": "0",
                                                     "x-ratelimit-reset-requests": "45m"})
    keys, breaker, more = bench_429(keys, breaker, B, {"x-ratelimit-remaining-requests-1h": "0",
                                                       "x-ratelimit-reset-requests-1h": "1h"})
    stored = [CODEC.encode(e) for e in [*log, *more]]
    decoded = [CODEC.decode(s.type, s.data) for s in stored]
    keys_after = KeyStates.replay("deepseek", decoded)
    breaker_after = Breaker.replay("deepseek", decoded)
    assert keys_after == keys and breaker_after == breaker
    assert decide(breaker_after, keys_after, POOL, later(60)) == decide(breaker, keys, POOL,
                                                                        later(60))
    assert decide(breaker_after, keys_after, POOL, later(60)).retry_after == 45 * 60 - 60
    assert decide(breaker_after, keys_after, POOL, later(45 * 60)).action == "probe"


# -- properties ------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 1.0, 30.0]) | st.floats(0, 2000),  # bursts reach the threshold
        st.sampled_from(POOL),
        st.sampled_from(["transient", "genuine", "billing", "revoked", "reset", "success",
                         "overloaded", "overloaded", "overloaded", "probe"]),
        st.floats(1, 7200),
    ),
    max_size=30,
)


def drive(ops: list[tuple[float, str, str, float]]) -> tuple[KeyStates, Breaker, list[Event],
                                                               datetime]:
    keys, breaker, log, now = KEYS, CLOSED, [], NOW
    for gap, fp, op, reset_s in ops:
        now += timedelta(seconds=gap)
        key_events: tuple[Event, ...] = ()
        breaker_events: tuple[Event, ...] = ()
        kinds = {"transient": "transient_limit", "genuine": "genuine_limit",
                 "billing": "billing", "revoked": "auth_revoked"}
        if op in kinds:
            failure = KeyFailure(kind=kinds[op], reset_at=now + timedelta(seconds=reset_s))  # type: ignore[arg-type]
            key_events = on_failure(keys, POOL, fp, failure, now)
            breaker, breaker_events = on_call_failed(breaker, failure.kind, now)
        elif op == "reset":
            key_events = on_reset(keys, fp, now)
        elif op == "success":
            if decide(breaker, keys, POOL, now).action != "refuse":
                key_events = on_success(keys, POOL, fp, now, now)
                breaker, breaker_events = on_call_succeeded(breaker, now)
        elif op == "overloaded":
            breaker, breaker_events = on_call_failed(breaker, "overloaded", now)
        elif decide(breaker, keys, POOL, now).action == "probe":
            breaker = claim_probe(breaker, now)
        keys = fold_keys(keys, key_events)
        more = on_keys_changed(breaker, keys, POOL, now)
        breaker = fold_breaker(breaker, more)
        log += [*key_events, *breaker_events, *more]
    return keys, breaker, log, now


@settings(max_examples=60, deadline=None)
@given(OPS, st.floats(0, 9000))
def test_a_refusal_never_promises_a_return_earlier_than_a_key_comes_back(
    ops: list[tuple[float, str, str, float]], wait: float
) -> None:
    keys, breaker, _, now = drive(ops)
    at = now + timedelta(seconds=wait)
    decision = decide(breaker, keys, POOL, at)
    if decision.action == "refuse" and decision.reason == "no_usable_key":
        assert not usable(keys, POOL, at)
        back = earliest_return(keys, POOL, at)
        if decision.retry_after is None:
            assert back is None or breaker.until is None
        else:
            assert decision.until is not None
            assert decision.retry_after == max(1, math.ceil((decision.until - at)
                                                            .total_seconds()))
            if breaker.state == "closed":
                assert decision.until == back
            assert back is None or decision.until >= at


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_the_breakers_fold_is_deterministic_and_survives_the_codec(
    ops: list[tuple[float, str, str, float]]
) -> None:
    keys, breaker, log, _ = drive(ops)
    decoded = [CODEC.decode(*CODEC.encode(e)[::2]) for e in log]
    persisted = msgspec.structs.replace(breaker, failures=(), probe_at=None)
    assert Breaker.replay("deepseek", decoded) == persisted
    assert Breaker.replay("deepseek", log) == Breaker.replay("deepseek", log)
    assert KeyStates.replay("deepseek", decoded) == keys


@settings(max_examples=60, deadline=None)
@given(OPS, st.integers(2, 8))
def test_half_open_admits_exactly_one_probe(ops: list[tuple[float, str, str, float]],
                                            callers: int) -> None:
    keys, breaker, _, now = drive(ops)
    if breaker.state != "open" or breaker.until is None:
        return
    at = max(now, breaker.until) + timedelta(seconds=PROBE_TIMEOUT_SECONDS)
    probes = 0
    for _ in range(callers):
        decision = decide(breaker, keys, POOL, at)
        if decision.action == "probe":
            probes += 1
            breaker = claim_probe(breaker, at)
        else:
            assert decision.action == "refuse"
    assert probes == (1 if usable(keys, POOL, at) else 0)
