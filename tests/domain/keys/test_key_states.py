from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.keys.key_states import (
    AUTH_TTL_SECONDS,
    BILLING_TTL_SECONDS,
    COOLING_MAX_SECONDS,
    GENUINE_TTL_SECONDS,
    SOLE_KEY_TTL_SECONDS,
    KeyFailure,
    KeyStates,
    earliest_return,
    format_time,
    on_failure,
    on_reset,
    on_success,
    parse_time,
    usable,
)
from sessionwarden.events import CODEC, CredentialRemoved, Event, KeyStateChanged
from sessionwarden.redact import fingerprint

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A, B, C = "fp:aaaaaaaaaaaa", "fp:bbbbbbbbbbbb", "fp:cccccccccccc"
POOL = (A, B, C)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def fold(states: KeyStates, events: tuple[Event, ...]) -> KeyStates:
    for event in events:
        states = states.fold(event)
    return states


def fail(states: KeyStates, fp: str, failure: KeyFailure, now: datetime = NOW,
         pool: tuple[str, ...] = POOL) -> tuple[KeyStates, tuple[KeyStateChanged, ...]]:
    events = on_failure(states, pool, fp, failure, now)
    return fold(states, events), events


EMPTY = KeyStates(provider="openai")
TRANSIENT = KeyFailure(kind="transient_limit", status=429)


def test_every_key_is_ok_until_something_happens() -> None:
    assert usable(EMPTY, POOL, NOW) == set(POOL)
    assert earliest_return(EMPTY, POOL, NOW) is None
    assert EMPTY.get(A).effective(NOW) == "ok"


def test_a_transient_2s_limit_cools_the_key_for_2s_only() -> None:
    states, events = fail(EMPTY, A, KeyFailure(kind="transient_limit", status=429,
                                               reset_at=later(2)))
    assert [(e.fingerprint, e.previous, e.state, e.reason, e.status) for e in events] == [
        (A, "ok", "cooling", "transient_limit", 429)]
    assert usable(states, POOL, later(1.9)) == {B, C}
    assert earliest_return(states, POOL, later(1)) == later(2)
    assert usable(states, POOL, later(3)) == set(POOL)  # the provider works 3 s later


def test_transient_limits_back_off_by_doubling_up_to_a_minute_and_a_success_resets() -> None:
    states, now, waits = EMPTY, NOW, []
    for _ in range(6):
        states, (event,) = fail(states, A, TRANSIENT, now)
        until = parse_time(event.until)
        assert until is not None
        waits.append((until - now).total_seconds())
        now = until  # the next 429 arrives as soon as the cooling ends
    assert waits == [5, 10, 20, 40, 60, 60]
    recovered = on_success(states, POOL, A, sent_at=now, now=now + timedelta(seconds=1))
    assert [(e.previous, e.state, e.reason) for e in recovered] == [("cooling", "ok", "recovered")]
    states = fold(states, recovered)
    _, (event,) = fail(states, A, TRANSIENT, now)
    assert parse_time(event.until) == now + timedelta(seconds=5)


def test_a_transient_reset_is_clamped_between_one_second_and_a_minute() -> None:
    _, (long,) = fail(EMPTY, A, KeyFailure(kind="transient_limit", reset_at=later(3600)))
    _, (past,) = fail(EMPTY, A, KeyFailure(kind="transient_limit", reset_at=later(-10)))
    assert parse_time(long.until) == later(COOLING_MAX_SECONDS)
    assert parse_time(past.until) == later(1)


def test_a_genuine_limit_benches_the_key_until_the_reset_the_provider_gave() -> None:
    reset = later(3100)
    states, (event,) = fail(EMPTY, B, KeyFailure(kind="genuine_limit", status=429,
                                                 reset_at=reset))
    assert (event.state, event.until) == ("exhausted", format_time(reset))
    assert B not in usable(states, POOL, later(3099.999))
    assert B in usable(states, POOL, reset)
    week = later(7 * 86400)  # a far reset overrides the TTL (hermes §4.8)
    states, _ = fail(EMPTY, B, KeyFailure(kind="genuine_limit", reset_at=week))
    assert B not in usable(states, POOL, later(2 * 3600))


def test_ttls_by_kind_when_the_provider_gave_no_reset() -> None:
    expected = {"genuine_limit": GENUINE_TTL_SECONDS, "billing": BILLING_TTL_SECONDS,
                "auth": AUTH_TTL_SECONDS}
    for kind, ttl in expected.items():
        _, (event,) = fail(EMPTY, A, KeyFailure(kind=kind, status=429))  # type: ignore[arg-type]
        assert parse_time(event.until) == later(ttl), kind
    assert GENUINE_TTL_SECONDS == 3600 and BILLING_TTL_SECONDS == 86400


def test_sole_key_rule_caps_the_ttl_at_a_minute_except_for_billing() -> None:
    sole = (A,)
    _, (limit,) = fail(EMPTY, A, KeyFailure(kind="genuine_limit", status=429), pool=sole)
    _, (auth,) = fail(EMPTY, A, KeyFailure(kind="auth", status=401), pool=sole)
    _, (bill,) = fail(EMPTY, A, KeyFailure(kind="billing", status=402), pool=sole)
    assert parse_time(limit.until) == later(SOLE_KEY_TTL_SECONDS)
    assert parse_time(auth.until) == later(SOLE_KEY_TTL_SECONDS)
    assert parse_time(bill.until) == later(BILLING_TTL_SECONDS)
    # a reset the provider gave is believed even for a sole key
    _, (given_reset,) = fail(EMPTY, A, KeyFailure(kind="genuine_limit", reset_at=later(900)),
                             pool=sole)
    assert parse_time(given_reset.until) == later(900)


def test_sole_key_counts_distinct_secrets_that_are_not_dead() -> None:
    same = fingerprint("sk-one-secret")
    pool = (same, same)  # two entries, one secret: one key
    _, (event,) = fail(EMPTY, same, KeyFailure(kind="genuine_limit"), pool=pool)
    assert parse_time(event.until) == later(SOLE_KEY_TTL_SECONDS)
    states, _ = fail(EMPTY, B, KeyFailure(kind="auth_revoked", status=401), pool=(A, B))
    _, (event,) = fail(states, A, KeyFailure(kind="genuine_limit"), pool=(A, B))
    assert parse_time(event.until) == later(SOLE_KEY_TTL_SECONDS)  # B is dead: A is alone


def test_two_entries_holding_the_same_secret_change_state_together() -> None:
    shared, other = fingerprint("sk-shared-secret"), fingerprint("sk-other-secret")
    pool = (shared, shared, other)  # entries env:KEY_1 and env:KEY_2 hold the same secret
    states, events = fail(EMPTY, shared, KeyFailure(kind="billing", status=402), pool=pool)
    assert len(events) == 1  # one fingerprint, one state: both entries are benched by it
    assert usable(states, pool, later(3600)) == {other}
    assert [fp for fp in pool if fp in usable(states, pool, NOW)] == [other]


def test_a_revoked_key_is_dead_until_reset_or_replaced() -> None:
    states, (event,) = fail(EMPTY, C, KeyFailure(kind="auth_revoked", status=401))
    assert (event.state, event.until, event.reason) == ("dead", None, "auth_revoked")
    assert C not in usable(states, POOL, later(365 * 86400))
    assert earliest_return(states, (C,), NOW) is None  # a dead key has no return
    assert on_success(states, POOL, C, sent_at=later(5), now=later(6)) == ()
    assert fail(states, C, KeyFailure(kind="genuine_limit"))[1] == ()  # dead stays dead
    (back,) = on_reset(states, C, later(60))
    assert (back.previous, back.state, back.reason) == ("dead", "ok", "operator_reset")
    assert C in usable(states.fold(back), POOL, later(60))
    removed = states.fold(CredentialRemoved(provider="openai", fingerprint=C))
    assert C in usable(removed, POOL, NOW)  # removed and re-added: a fresh start
    assert on_reset(EMPTY, C, NOW) == ()


def test_a_new_failure_never_shortens_or_softens_a_bench() -> None:
    states, _ = fail(EMPTY, A, KeyFailure(kind="genuine_limit", reset_at=later(3600)))
    assert fail(states, A, TRANSIENT, later(10))[1] == ()  # a late in-flight 429
    states, _ = fail(EMPTY, A, TRANSIENT)
    states, (worse,) = fail(states, A, KeyFailure(kind="genuine_limit", reset_at=later(600)))
    assert (worse.previous, worse.state, parse_time(worse.until)) == (
        "cooling", "exhausted", later(600))
    _, (longer,) = fail(states, A, KeyFailure(kind="billing", reset_at=later(900)))
    assert parse_time(longer.until) == later(900)
    # a longer transient cooling does not turn an exhausted key into a cooling one
    states, _ = fail(EMPTY, A, KeyFailure(kind="auth", status=401), pool=(A,))  # 60 s
    _, (merged,) = fail(states, A, KeyFailure(kind="transient_limit", reset_at=later(140)),
                        later(50), pool=(A,))
    assert (merged.state, parse_time(merged.until)) == ("exhausted", later(110))


def test_a_bench_that_ended_reads_ok_and_a_new_one_starts_from_ok() -> None:
    states, _ = fail(EMPTY, A, TRANSIENT)
    assert states.get(A).effective(later(5)) == "ok"
    _, (again,) = fail(states, A, KeyFailure(kind="genuine_limit", reset_at=later(100)),
                       later(6))
    assert again.previous == "ok"


def test_a_success_clears_only_a_bench_set_before_the_call_was_sent() -> None:
    states, _ = fail(EMPTY, A, KeyFailure(kind="genuine_limit", reset_at=later(3600)))
    # a long stream sent a minute before the limit finishes now: stale evidence
    assert on_success(states, POOL, A, sent_at=later(-60), now=later(30)) == ()
    (probe,) = on_success(states, POOL, A, sent_at=later(3600), now=later(3601))
    assert (probe.previous, probe.state, probe.until) == ("exhausted", "ok", None)
    assert on_success(EMPTY, POOL, A, sent_at=NOW, now=NOW) == ()  # nothing on the hot path


def test_shared_limits_bench_the_whole_pool_for_genuine_limits_and_billing() -> None:
    states, _ = fail(EMPTY, C, KeyFailure(kind="auth_revoked"))
    states, events = fail(states, A, KeyFailure(kind="genuine_limit", status=429,
                                                reset_at=later(1800), shared_limits=True))
    assert [(e.fingerprint, e.reason) for e in events] == [(A, "genuine_limit"),
                                                          (B, "shared_limit")]
    assert usable(states, POOL, later(1799)) == set()
    assert earliest_return(states, POOL, NOW) == later(1800)
    recovered = on_success(states, POOL, B, sent_at=later(1800), now=later(1801),
                           shared_limits=True)
    assert {e.fingerprint for e in recovered} == {A, B}  # C stays dead
    _, billing = fail(EMPTY, A, KeyFailure(kind="billing", shared_limits=True))
    assert len(billing) == 3


def test_shared_limits_do_not_spread_transient_or_auth_failures() -> None:
    transient = KeyFailure(kind="transient_limit", shared_limits=True)
    auth = KeyFailure(kind="auth_revoked", shared_limits=True)
    assert usable(fail(EMPTY, A, transient)[0], POOL, NOW) == {B, C}
    assert usable(fail(EMPTY, A, auth)[0], POOL, NOW) == {B, C}


def test_failures_that_are_not_the_keys_change_nothing() -> None:
    for kind in ("overloaded", "server_error", "timeout", "other"):
        assert on_failure(EMPTY, POOL, A, KeyFailure(kind=kind, status=503), NOW) == ()  # type: ignore[arg-type]


def test_fold_ignores_other_providers_and_unknown_states() -> None:
    other = KeyStateChanged(provider="anthropic", fingerprint=A, state="dead")
    assert EMPTY.fold(other) is EMPTY
    odd = KeyStateChanged(provider="openai", fingerprint=A, state="frozen")
    assert EMPTY.fold(odd).get(A).effective(NOW) == "ok"


def test_times_are_stored_rounded_up_to_the_millisecond() -> None:
    moment = NOW + timedelta(microseconds=1500)
    assert format_time(moment) == "2026-12-02T12:00:00.002+00:00"
    assert parse_time(format_time(NOW)) == NOW
    assert parse_time(None) is None and parse_time("") is None


def test_a_restart_folds_the_stored_events_back_into_the_same_states() -> None:
    states, log = EMPTY, []
    steps = [
        (A, KeyFailure(kind="genuine_limit", status=429, reset_at=later(3100))),
        (B, KeyFailure(kind="billing", status=402)),
        (C, TRANSIENT),
    ]
    for fp, failure in steps:
        events = on_failure(states, POOL, fp, failure, NOW)
        states = fold(states, events)
        log += events
    stored = [CODEC.encode(e) for e in log]  # what the log holds, byte for byte
    restarted = KeyStates.replay("openai", (CODEC.decode(s.type, s.data) for s in stored))
    assert restarted == states
    assert usable(restarted, POOL, later(600)) == {C}
    assert earliest_return(restarted, POOL, later(600)) == later(3100)


# -- properties ------------------------------------------------------------------------

FAILURES = st.builds(
    KeyFailure,
    kind=st.sampled_from(["transient_limit", "genuine_limit", "billing", "auth",
                          "auth_revoked", "overloaded"]),
    status=st.sampled_from([None, 401, 402, 403, 429, 503]),
    reset_at=st.none() | st.floats(-100, 8 * 86400).map(later),
    shared_limits=st.booleans(),
)
STEPS = st.lists(
    st.tuples(
        st.floats(0, 4000),  # seconds since the previous step
        st.sampled_from(POOL),
        st.one_of(FAILURES, st.just("success"), st.just("stale_success"), st.just("reset")),
    ),
    max_size=25,
)


def run(steps: list[tuple[float, str, object]]) -> tuple[KeyStates, list[KeyStateChanged],
                                                        datetime, dict[str, datetime]]:
    """Apply the steps; check at every step that no key is usable before its promised time."""
    states, log, now = EMPTY, [], NOW
    promised: dict[str, datetime] = {}  # the latest until of a bench not yet lifted
    for gap, fp, what in steps:
        now += timedelta(seconds=gap)
        for key, until in promised.items():
            if now < until:
                assert key not in usable(states, POOL, now)
        if isinstance(what, KeyFailure):
            events = on_failure(states, POOL, fp, what, now)
        elif what == "success":
            events = on_success(states, POOL, fp, now, now, shared_limits=True)
        elif what == "stale_success":
            events = on_success(states, POOL, fp, NOW - timedelta(seconds=1), now)
        else:
            events = on_reset(states, fp, now)
        for event in events:
            until = parse_time(event.until)
            if event.state == "ok":
                promised.pop(event.fingerprint, None)
            elif until is not None:
                promised[event.fingerprint] = max(until, promised.get(event.fingerprint, until))
        states = fold(states, events)
        log += events
    return states, log, now, promised


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_a_benched_key_is_never_usable_before_its_time(steps: list[tuple[float, str, object]]
                                                       ) -> None:
    states, _, now, promised = run(steps)
    for key, until in promised.items():
        if now < until:
            assert key not in usable(states, POOL, now)
            assert key not in usable(states, POOL, until - timedelta(milliseconds=1))


@settings(max_examples=40, deadline=None)
@given(STEPS)
def test_fold_is_deterministic_and_survives_the_codec(steps: list[tuple[float, str, object]]
                                                      ) -> None:
    states, log, _, _ = run(steps)
    assert KeyStates.replay("openai", log) == states
    assert KeyStates.replay("openai", log) == KeyStates.replay("openai", log)
    decoded = [CODEC.decode(*CODEC.encode(e)[::2]) for e in log]
    assert KeyStates.replay("openai", decoded) == states


@settings(max_examples=60, deadline=None)
@given(STEPS, st.floats(0, 9 * 86400))
def test_earliest_return_is_the_min_of_the_benched_keys_times(
    steps: list[tuple[float, str, object]], probe: float
) -> None:
    states, _, now, _ = run(steps)
    at = now + timedelta(seconds=probe)
    benched = [h.until for fp in POOL if (h := states.get(fp)).effective(at)
               in ("cooling", "exhausted") and h.until is not None]
    assert earliest_return(states, POOL, at) == (min(benched) if benched else None)
    back = earliest_return(states, POOL, at)
    if back is not None:
        assert back > at and usable(states, POOL, back) > usable(states, POOL, at)
