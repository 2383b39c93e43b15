"""Errors that quote the request bench no key (issue 21 §1-3), in the pure domain.

The classifier reads an upstream's error without what the client chose (the model's
name), and a model-not-found code or a 404 comes before any phrase; a plain 401 rests a
key, only revoked wording kills it; a failure repeated on a second key is the request's
(:func:`request_fault`, :func:`on_request_fault`); a relayed answer's Retry-After is the
pool's, bounded (:func:`client_retry_after`).
"""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify.classification import Classification
from sessionwarden.domain.classify.classifier import classify
from sessionwarden.domain.classify.error_body import MIN_QUOTED_CHARS, read_error_body
from sessionwarden.domain.classify.failover import (
    MAX_RETRY_AFTER_S,
    client_retry_after,
    key_failure,
    request_fault,
)
from sessionwarden.domain.classify.patterns import DEFAULT_PATTERNS, PATTERN_LISTS
from sessionwarden.domain.keys.key_states import (
    REQUEST_FAULT,
    KeyFailure,
    KeyStates,
    on_failure,
    on_request_fault,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A, B = "fp:aaaaaaaaaaaa", "fp:bbbbbbbbbbbb"

#: Names a client could give a model to turn an echo into evidence against a key.
HOSTILE = ["gpt-insufficient_quota", "gpt-x regain access on 2027-06-01",
           "claude-has-been-revoked", "invalid-api-key-x", "m-exceeded your current quota",
           "Rate limit exceeded per day", "key-is-disabled-and-has-been-revoked"]
_KEY_LISTS = ("billing", "billing_codes", "invalid_key", "revoked_key", "auth",
              "usage_limit", "rate_limit", "genuine_limit", "forbidden_billing")
#: Every phrase and code that says something against a key, each a possible model name.
PHRASES = sorted({p for name in _KEY_LISTS for p in getattr(DEFAULT_PATTERNS, name)})


def openai(message: str, code: str | None, kind: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None,
                                 "code": code}}).encode()


def anthropic(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def harmless(found: Classification) -> None:
    """The request's fault: relayed, no key benched or rotated away from."""
    assert not found.key_specific and found.key_state is None, found
    assert found.recovery == "relay", found


# -- a model-not-found code, a 404: before any phrase --------------------------------------


@pytest.mark.parametrize("name", HOSTILE)
def test_openais_404_quoting_the_model_is_model_not_found(name: str) -> None:
    body = openai(f"The model `{name}` does not exist or you do not have access to it.",
                  "model_not_found")
    for quoted in ((), (name,)):  # the code decides, with or without the name cut
        found = classify(404, {}, body, now=NOW, quoted=quoted)
        assert found.error_class == "model_not_found"
        harmless(found)


@pytest.mark.parametrize("name", HOSTILE)
def test_openais_403_for_a_model_the_project_may_not_use_is_model_not_found(name: str) -> None:
    body = openai(f"Project `proj_abc` does not have access to model `{name}`",
                  "model_not_found")
    found = classify(403, {}, body, now=NOW)
    assert found.error_class == "model_not_found"
    harmless(found)


@pytest.mark.parametrize("name", HOSTILE)
def test_anthropics_404_quoting_the_model_is_model_not_found(name: str) -> None:
    found = classify(404, {}, anthropic("not_found_error", f"model: {name}"), now=NOW)
    assert found.error_class == "model_not_found"
    harmless(found)


def test_a_404_is_never_a_keys_failure_whatever_it_says() -> None:
    body = openai("insufficient credits; this key has been revoked", None)
    found = classify(404, {}, body, now=NOW)
    assert found.error_class == "unknown"  # Hermes read it as billing: 24 h on every key
    harmless(found)


@settings(max_examples=200, deadline=None)
@given(name=st.one_of(st.sampled_from(PHRASES), st.text(max_size=80)),
       status=st.sampled_from([400, 403, 404, 422]))
def test_no_model_name_turns_a_model_not_found_into_a_keys_failure(
    name: str, status: int
) -> None:
    body = openai(f"The model `{name}` does not exist or you do not have access to it.",
                  "model_not_found")
    found = classify(status, {}, body, now=NOW, quoted=(name,))
    assert found.error_class == "model_not_found"
    harmless(found)


# -- the model's name is no evidence -------------------------------------------------------


def test_a_400_quoting_the_model_is_a_bad_request_not_a_bad_key() -> None:
    name = "invalid-api-key-x"
    body = openai(f"Invalid value for 'model': {name} is not supported with this API.",
                  "invalid_request")
    assert classify(400, {}, body, now=NOW).key_state == "exhausted"  # read as its words
    found = classify(400, {}, body, now=NOW, quoted=(name,))
    assert found.error_class == "format_error"
    harmless(found)


def test_a_403_quoting_the_model_does_not_kill_the_key() -> None:
    name = "gpt-has-been-revoked"
    body = openai(f"Project `proj_abc` does not have access to model {name}", "forbidden",
                  "permission_error")
    assert classify(403, {}, body, now=NOW).key_state == "dead"  # read as its words
    found = classify(403, {}, body, now=NOW, quoted=(name,))
    assert (found.error_class, found.key_state, found.auth) == ("auth", None, "forbidden")
    assert key_failure(found, 403, NOW).kind == "other"  # rotates, benches nothing


def test_a_429_quoting_the_model_stays_a_short_rate_limit() -> None:
    name = "gpt regain access on 2027-06-01"
    body = openai(f"Rate limit reached for {name} in organization org-x on requests per "
                  "min (RPM): Limit 3, Used 3.", "tokens", "requests")
    billing = classify(429, {}, body, now=NOW)
    assert billing.error_class == "billing" and (billing.reset_seconds or 0) > 4000 * 3600
    found = classify(429, {}, body, now=NOW, quoted=(name,))
    assert (found.error_class, found.limit, found.key_state) == (
        "rate_limit", "transient", "cooling")
    assert found.reset_seconds is None  # the date in the name is no reset


def test_the_name_is_cut_from_the_text_the_codes_and_the_reset_phrases() -> None:
    name = "Insufficient_Quota resets in 9 hours"
    body = json.dumps({"error": {"message": f"model `{name}` is busy",
                                 "code": name, "type": "insufficient_quota"}})
    read = read_error_body(body, NOW, (name,))
    assert "resets" not in read.text and read.text.count("quota") == 1  # the type's
    assert read.codes == ("insufficient quota",)  # the provider's own type stays
    assert read.reset() == (None, "")
    plain = read_error_body(body, NOW)
    assert "insufficient quota" in plain.text and plain.reset()[0] == 9 * 3600


def test_a_cut_never_joins_the_text_around_it_into_a_phrase() -> None:
    # "insufficient cred" + name + "its": cut out, the two halves stay apart.
    name = "zzzz-model"
    read = read_error_body(openai(f"insufficient cred{name}its", None), NOW, (name,))
    assert "insufficient credits" not in read.text
    assert classify(400, {}, openai(f"insufficient cred{name}its", None), now=NOW,
                    quoted=(name,)).error_class == "format_error"


def test_a_short_name_holds_no_phrase_and_is_not_cut() -> None:
    body = openai("The model `o1` does not exist; you exceeded your current quota", None)
    read = read_error_body(body, NOW, ("o1", "", "q"))
    assert "o1" in read.text and "exceeded your current quota" in read.text
    shortest = min(len(p) for name in PATTERN_LISTS for p in getattr(DEFAULT_PATTERNS, name))
    assert shortest >= MIN_QUOTED_CHARS


# -- §2: a plain 401 rests the key, a revoked one kills it --------------------------------


@pytest.mark.parametrize("body", [
    openai("Incorrect API key provided: sk-te****.", "invalid_api_key"),
    anthropic("authentication_error", "invalid x-api-key"),
    b"",
    b"<html>401 Unauthorized</html>",
])
def test_a_plain_401_rests_the_key(body: bytes) -> None:
    found = classify(401, {}, body, now=NOW)
    assert (found.error_class, found.auth, found.key_state) == ("auth", "invalid", "exhausted")
    assert key_failure(found, 401, NOW).kind == "auth"  # the pool's 300 s


@pytest.mark.parametrize("body", [
    openai("This API key has been revoked.", "invalid_api_key"),
    openai("Your authentication token has been invalidated.", "token_invalidated"),
    openai("Your API key was reported as leaked. Please use another API key.", None),
])
def test_a_revoked_401_kills_the_key(body: bytes) -> None:
    found = classify(401, {}, body, now=NOW)
    assert (found.auth, found.key_state) == ("revoked", "dead")
    assert key_failure(found, 401, NOW).kind == "auth_revoked"


def test_a_401_quoting_revoked_wording_from_the_model_only_rests_the_key() -> None:
    name = "gpt-has-been-revoked"
    body = openai(f"Incorrect API key provided for {name}.", "invalid_api_key")
    assert classify(401, {}, body, now=NOW, quoted=(name,)).key_state == "exhausted"


# -- a failure repeated on a second key ----------------------------------------------------


@pytest.mark.parametrize(("status", "body", "expected"), [
    (400, openai("near: insufficient credits", None), True),  # billing from words
    (403, openai("it said: the key has been revoked", "forbidden"), True),  # dead from words
    (403, openai("forbidden", "forbidden"), True),  # rotates, benches nothing
    (429, openai("You exceeded your current quota", "insufficient_quota"), True),
    (0, openai("insufficient credits", None), True),  # a stream's error event
    (401, openai("Incorrect API key", "invalid_api_key"), False),  # the status says it
    (402, openai("Payment required", None), False),
    (429, openai("Rate limit exceeded", "rate_limit_exceeded"), False),  # shared buckets
    (503, openai("overloaded", None), False),
])
def test_which_repeated_failures_are_the_requests(status: int, body: bytes,
                                                  expected: bool) -> None:
    found = classify(status, {}, body, now=NOW)
    assert request_fault(found, status) is expected, found


def benched(failure: KeyFailure, at: datetime = NOW) -> KeyStates:
    states = KeyStates(provider="openai")
    for event in on_failure(states, (A, B), A, failure, at):
        states = states.fold(event)
    return states


@pytest.mark.parametrize("kind", ["billing", "auth", "auth_revoked", "genuine_limit"])
def test_the_first_keys_bench_of_the_same_kind_is_lifted(kind: str) -> None:
    failure = KeyFailure(kind=kind, status=403)  # type: ignore[arg-type]
    states = benched(failure)
    assert states.get(A).effective(NOW) != "ok"
    same, events = on_request_fault(states, A, failure, NOW + timedelta(seconds=0.2),
                                    NOW + timedelta(seconds=0.4))
    assert same
    [lifted] = events
    assert (lifted.fingerprint, lifted.state, lifted.reason) == (A, "ok", REQUEST_FAULT)
    for event in events:
        states = states.fold(event)
    assert states.get(A).effective(NOW + timedelta(seconds=0.4)) == "ok"


def test_a_bench_of_another_kind_or_set_later_or_over_stays() -> None:
    billing = KeyFailure(kind="billing", status=400)
    states = benched(billing)
    # Another kind: the two failures differ, the second key's is its own.
    assert on_request_fault(states, A, KeyFailure(kind="auth_revoked", status=400),
                            NOW, NOW) == (False, ())
    # A bench set after the second attempt went out is not the call's.
    assert on_request_fault(states, A, billing, NOW - timedelta(seconds=1),
                            NOW) == (False, ())
    # A bench that is over is nothing to lift (the key was usable at its lease).
    assert on_request_fault(states, A, billing, NOW, NOW + timedelta(days=2)) == (False, ())
    # A key with nothing recorded: nothing to lift, and the failures differ.
    assert on_request_fault(KeyStates(provider="openai"), A, billing, NOW, NOW) == (False, ())


def test_a_failure_that_benches_nothing_is_the_same_without_an_event() -> None:
    assert on_request_fault(KeyStates(provider="openai"), A, KeyFailure(kind="other"),
                            NOW, NOW) == (True, ())


def test_the_real_clocks_milliseconds_never_hide_the_calls_bench() -> None:
    # The bench's time is stored rounded up to the millisecond; the second attempt may
    # go out within the same millisecond.
    at = NOW + timedelta(microseconds=100)
    billing = KeyFailure(kind="billing", status=400)
    same, events = on_request_fault(benched(billing, at), A, billing,
                                    at + timedelta(microseconds=300), at)
    assert same and len(events) == 1


# -- §3: the Retry-After a client gets -----------------------------------------------------


@pytest.mark.parametrize(("pool", "upstream", "keyed", "expected"), [
    (0, 315360000.0, True, 1),  # a key is usable now: the upstream's ten years ignored
    (20, None, True, 20),
    (19.2, 2.0, True, 20),
    (7200, 1.0, True, MAX_RETRY_AFTER_S),
    (None, 5.0, True, None),  # every key dead: no return foreseeable, no header
    (None, None, False, 1),  # no keys, an unreadable or negative value: a short wait
    (None, 9999.0, False, MAX_RETRY_AFTER_S),
    (None, 2.2, False, 3),
    (None, 0.0, False, 1),
    (None, math.inf, False, MAX_RETRY_AFTER_S),
    (None, math.nan, False, 1),
    (-3, None, True, 1),
])
def test_a_relayed_answers_retry_after_is_the_pools_bounded(
    pool: float | None, upstream: float | None, keyed: bool, expected: int | None
) -> None:
    assert client_retry_after(pool, upstream, keyed) == expected
