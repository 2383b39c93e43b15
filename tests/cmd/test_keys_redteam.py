"""Keys a client cannot bench (issue 21 §1-3), through the real daemon.

A hostile client (or a prompt-injected agent) chooses what an upstream's error quotes: the
model's name, the prompt. None of it may bench a key: a status's own meaning (model not
found) wins over phrases, text quoting the request is no evidence against a key, and a
failure that repeats identically on a second key is the request's fault. A plain 401
rests the key (300 s), only a revoked one is dead; and a relayed 429 says when the pool
has a key again, never the upstream's Retry-After as it came. Every call is in the
ledger, the daemon keeps serving, and ``replay --verify`` stays ok.
"""

from datetime import datetime
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, KeyStateChanged
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import INVALID, REVOKED, Daemons


def post(daemon: InProcessDaemon, model: str = MODEL, content: str = "hi",
         session: str = "s") -> httpx.Response:
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=20,
                      headers={"authorization": f"Bearer {daemon.token}",
                               "x-session-id": session}) as client:
        return client.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": content}]})


def benches(daemon: InProcessDaemon) -> list[KeyStateChanged]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream("credentials-fake")]
    return [e for e in events if isinstance(e, KeyStateChanged)]


def ledger_rows(daemon: InProcessDaemon) -> int:
    return len(daemon.rows("SELECT call_id FROM view_ledger"))


def verified(daemon: InProcessDaemon) -> None:
    """Every call in the ledger, the log verifies (the daemon stopped first)."""
    daemon.stop()
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


def openai_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    """The fake's OpenAI-shaped error answer (``code`` None: the fake's own per status)."""
    options: dict[str, Any] = {"status": status, "error_message": message}
    if code is not None:
        options["error_code"] = code
    return options


# -- §1: an error that quotes the model's name ---------------------------------------------

#: (the model the client names, the upstream's answer quoting it): each, one call on a
#: provider with keys A and B, once benched both keys (24 h, 4,280 h, dead, dead).
ECHOES = {
    "404-insufficient-quota": ("gpt-insufficient_quota", openai_error(
        404, "The model `gpt-insufficient_quota` does not exist or you do not have access "
             "to it.", "model_not_found")),
    "404-regain-access": ("gpt-x regain access on 2027-06-01", openai_error(
        404, "The model `gpt-x regain access on 2027-06-01` does not exist or you do not "
             "have access to it.", "model_not_found")),
    "404-anthropic": ("claude-insufficient credits", openai_error(
        404, "model: claude-insufficient credits", "not_found_error")),
    "403-revoked": ("gpt-has-been-revoked", openai_error(
        403, "Project `proj_abc` does not have access to model gpt-has-been-revoked",
        None)),
    "403-revoked-code": ("gpt-has-been-revoked", openai_error(
        403, "Project `proj_abc` does not have access to model `gpt-has-been-revoked`",
        "model_not_found")),
    "400-invalid-api-key": ("invalid-api-key-x", openai_error(
        400, "Invalid value for 'model': invalid-api-key-x is not supported with this API.",
        "invalid_request")),
    # OpenAI's 429 names the model too; no code, no reset in the headers: the billing
    # phrase (checked before the rate-limit one) and the body's date decided.
    "429-regain-access": ("gpt regain access on 2027-06-01", {
        "status": 429, "error_code": "tokens",
        "error_message": "Rate limit reached for gpt regain access on 2027-06-01 in "
                         "organization org-x on requests per min (RPM): Limit 3, Used 3.",
        "headers": {"retry-after": "junk", "x-ratelimit-remaining-requests": "5",
                    "x-ratelimit-reset-requests": "20s"}}),
}


@pytest.mark.parametrize("case", sorted(ECHOES))
def test_an_error_quoting_the_models_name_benches_no_key_for_long(
    daemons: Daemons, case: str
) -> None:
    name, answer = ECHOES[case]
    daemon = daemons.start()
    daemons.fake.state.by_model[name] = answer
    resp = post(daemon, f"fake/{name}")
    assert resp.status_code == answer["status"]
    now = daemons.clock.now()
    for event in benches(daemon):
        # Nothing the client chose may rest a key past a transient limit's cool-down.
        assert event.state in ("cooling", "ok"), (case, event)
        until = event.until
        assert until is None or (datetime.fromisoformat(until) - now
                                 ).total_seconds() <= 60, (case, event)
    if answer["status"] != 429:  # a limit is the key's; anything else is the request's
        assert benches(daemon) == [], case
    daemons.fake.state.by_model.clear()
    daemons.clock.advance(61)
    for _ in range(2):  # the provider serves, by either key
        assert post(daemon).status_code == 200
    assert ledger_rows(daemon) == 3
    verified(daemon)


def test_a_model_not_found_is_not_failed_over(daemons: Daemons) -> None:
    """A status's own meaning wins: a 404 is the request's, one upstream call only."""
    daemon = daemons.start()
    name, answer = ECHOES["404-insufficient-quota"]
    daemons.fake.state.by_model[name] = answer
    resp = post(daemon, f"fake/{name}")
    assert resp.status_code == 404
    assert resp.headers["x-sessionwarden-error-class"] == "model_not_found"
    assert daemons.used() == ["FAKE_KEY_A"]


# -- §1: a failure that repeats identically on a second key --------------------------------

#: Answers that quote the *prompt* (which the classifier cannot strip): the first key's
#: answer would bench it, the second key's identical one shows it is the request's.
PROMPT_ECHOES = {
    "403-revoked": {"status": 403, "error_code": "forbidden",
                    "error_message": "Request blocked; it contained: ignore this, the key "
                                     "has been revoked"},
    "400-billing": {"status": 400, "error_code": "invalid_request",
                    "error_message": "Could not parse the prompt near: insufficient credits, "
                                     "top up your credits"},
}


@pytest.mark.parametrize("case", sorted(PROMPT_ECHOES))
def test_a_failure_repeating_on_the_second_key_is_the_requests_fault(
    daemons: Daemons, case: str
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", PROMPT_ECHOES[case])
    daemons.steer("FAKE_KEY_B", PROMPT_ECHOES[case])
    resp = post(daemon, content="the key has been revoked; insufficient credits")
    assert resp.status_code == PROMPT_ECHOES[case]["status"]
    # Both keys tried; no third attempt; the answer relayed as the upstream gave it.
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    recorded = [(e.fingerprint, e.state, e.reason) for e in benches(daemon)]
    # A's bench, taken while B could still have told another story, is lifted, and
    # says why; B is never benched.
    assert recorded[-1:] in ([], [(a, "ok", "request_fault")]), recorded
    assert all(fp == a for fp, _, _ in recorded), recorded
    daemons.fake.state.by_key.clear()
    assert post(daemon).status_code == 200
    assert daemons.used()[-1] == "FAKE_KEY_A"  # fill_first: A is usable at once
    assert ledger_rows(daemon) == 2
    verified(daemon)


def test_a_failure_of_one_key_only_still_benches_it(daemons: Daemons) -> None:
    """The repeat rule needs the repeat: B's success leaves A's bench standing."""
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", PROMPT_ECHOES["400-billing"])
    assert post(daemon).status_code == 200
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    assert [(e.fingerprint, e.state, e.reason) for e in benches(daemon)] == [
        (a, "exhausted", "billing")]


# -- §2: a flapping 401 --------------------------------------------------------------------


def test_a_flapping_401_rests_the_keys_and_never_kills_them(daemons: Daemons) -> None:
    daemon = daemons.start()
    for _ in range(3):
        daemons.steer("FAKE_KEY_A", INVALID)
        daemons.steer("FAKE_KEY_B", INVALID)
        assert post(daemon).status_code == 401  # both tried, the last answer relayed
        daemons.fake.state.by_key.clear()
        resting = post(daemon)  # both rest: refused at once, for their 300 s
        assert resting.status_code == 429, resting.text
        assert resting.json()["error"]["code"] == "keys_benched"
        assert int(resting.headers["retry-after"]) == 300
        daemons.clock.advance(300)
        assert post(daemon).status_code == 200  # back by themselves, no `keys reset`
    states = {(e.state, e.reason) for e in benches(daemon)}
    assert ("dead", "auth_revoked") not in states
    assert ("exhausted", "auth") in states
    assert ledger_rows(daemon) == 9
    verified(daemon)


def test_a_revoked_401_is_dead(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", REVOKED)
    assert post(daemon).status_code == 200  # B served
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    assert [(e.fingerprint, e.state, e.reason) for e in benches(daemon)] == [
        (a, "dead", "auth_revoked")]


# -- §3: a relayed 429's Retry-After -------------------------------------------------------


@pytest.mark.parametrize("upstream", [
    "315360000",  # ten years
    "-5",
    "Wed, 21 Oct 2015 07:28:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "9999",
    "soon",
    "1e9",
])
def test_a_relayed_429_says_when_the_pool_has_a_key_again(
    daemons: Daemons, upstream: str
) -> None:
    daemon = daemons.start()
    # Transient on both keys: each cools for its bucket's 20 s reset.
    limited = {"status": 429, "headers": {"retry-after": upstream, "retry-after-ms": "-1",
                                          "x-ratelimit-remaining-requests": "0",
                                          "x-ratelimit-reset-requests": "20s"}}
    daemons.steer("FAKE_KEY_A", limited)
    daemons.steer("FAKE_KEY_B", limited)
    resp = post(daemon)
    assert resp.status_code == 429
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    assert resp.headers.get_list("retry-after") == ["20"]  # the keys' return, once
    assert "retry-after-ms" not in resp.headers
    # The daemon's own refusal, next, says the same.
    daemons.fake.state.by_key.clear()
    fast = post(daemon)
    assert fast.status_code == 429 and fast.headers["retry-after"] == "20"
    daemons.clock.advance(20)
    assert post(daemon).status_code == 200
    assert ledger_rows(daemon) == 3
    verified(daemon)


def test_a_relayed_overload_says_a_short_well_formed_wait(daemons: Daemons) -> None:
    daemon = daemons.start()
    overloaded = {"status": 503, "headers": {"retry-after": "-5"}}
    daemons.steer("FAKE_KEY_A", overloaded)
    resp = post(daemon)
    assert resp.status_code == 503
    assert resp.headers.get_list("retry-after") == ["1"]  # another key is usable now
    assert ledger_rows(daemon) == 1


def test_the_daemons_own_refusal_bounds_its_wait_as_a_relayed_answer_does(
    daemons: Daemons,
) -> None:
    daemon = daemons.start()
    billing = openai_error(402, "You exceeded your current quota.", "insufficient_quota")
    daemons.steer("FAKE_KEY_A", billing)
    daemons.steer("FAKE_KEY_B", billing)
    relayed = post(daemon)
    assert relayed.status_code == 402
    # Both keys rest a day; the fast refusal's header says an hour at most, its message
    # the exact moment (as `keys list` does).
    fast = post(daemon)
    assert fast.status_code == 429 and fast.headers["retry-after"] == "3600"
    assert "retry in 86400 s" in fast.json()["error"]["message"]
    assert ledger_rows(daemon) == 2
    verified(daemon)
