"""Keys and limits through the daemon: failover inside the call, benched keys, fail fast.

An in-process daemon on a fake clock (so a reset can pass without waiting), the `openai`
SDK as the client, and the fake upstream steered per key (``by_key``: every request sent
with that key gets those options), so the daemon's choice of key decides the answer.
"""

import threading
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import openai
import pytest
from sessionwarden.events import CODEC, CallCompleted, KeyStateChanged
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL, config_text
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import GENUINE, HI, REVOKED, TRANSIENT, Daemons, ask
from tests.support.fake_provider import FakeProviderServer


def completions(daemon: InProcessDaemon, session: str = "s") -> list[CallCompleted]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, CallCompleted)]


def states(daemon: InProcessDaemon) -> list[KeyStateChanged]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream("credentials-fake")]
    return [e for e in events if isinstance(e, KeyStateChanged)]


def test_a_long_429_fails_over_and_the_key_rests_until_its_reset(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    raw = ask(daemon)
    assert raw.http_response.status_code == 200 and raw.parse().choices
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    [done] = completions(daemon)
    a, b = fingerprint(daemons.key("FAKE_KEY_A")), fingerprint(daemons.key("FAKE_KEY_B"))
    assert done.credential == b and done.status == 200
    assert [(t.credential, t.status, t.error_class) for t in done.attempts] == [
        (a, 429, "rate_limit")]
    [bench] = states(daemon)
    assert (bench.fingerprint, bench.state, bench.reason) == (a, "exhausted", "genuine_limit")
    assert bench.until == "2026-12-02T14:00:00.000+00:00"
    # A is not used again until its reset, by any session — fill_first would pick it.
    daemons.fake.state.by_key.clear()
    for session in ("s", "other"):
        ask(daemon, session)
    assert daemons.used()[2:] == ["FAKE_KEY_B", "FAKE_KEY_B"]
    daemons.clock.advance(2 * 3600)
    ask(daemon)
    assert daemons.used()[-1] == "FAKE_KEY_A"


def test_a_genuine_limit_survives_a_restart_and_the_other_key_serves(
    daemons: Daemons
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    ask(daemon)
    daemon.stop()
    daemons.fake.state.by_key.clear()
    again = daemons.start()
    ask(again, "after")
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_B"]


def test_a_402_on_a_key_shared_by_two_entries_benches_both(daemons: Daemons) -> None:
    daemon = daemons.start()
    assert daemons.keys is not None
    daemon.stop()
    # A third entry holding A's secret, placed first: fill_first would pick it next.
    daemons.keys = {"FAKE_KEY_A2": daemons.key("FAKE_KEY_A"), **daemons.keys}
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"status": 402, "error_code": "insufficient_quota",
                                 "error_message": "You exceeded your current quota"})
    raw = ask(daemon)
    assert raw.http_response.status_code == 200
    daemons.fake.state.by_key.clear()
    ask(daemon)
    ask(daemon)
    used = daemons.used()
    assert used[0] in ("FAKE_KEY_A", "FAKE_KEY_A2") and used[1:] == ["FAKE_KEY_B"] * 3
    [bench] = states(daemon)
    assert (bench.state, bench.reason, bench.status) == ("exhausted", "billing", 402)


def test_a_revoked_key_is_dead_and_never_tried_again(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", REVOKED)
    ask(daemon)
    daemons.clock.advance(30 * 24 * 3600)  # time does not revive a dead key
    daemons.fake.state.by_key.clear()
    ask(daemon)
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_B"]
    [dead] = states(daemon)
    assert (dead.state, dead.reason, dead.status) == ("dead", "auth_revoked", 401)


def test_every_key_limited_fails_fast_with_a_truthful_retry_after(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    daemons.steer("FAKE_KEY_B", GENUINE)
    with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError) as relayed:
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    # Both keys were tried; the last answer is relayed with its class.
    assert relayed.value.response.headers["x-sessionwarden-error-class"] == "rate_limit"
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    daemons.clock.advance(60)
    with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError) as fast:
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    assert fast.value.body["code"] == "keys_benched"  # type: ignore[index]
    # the header is bounded to an hour (as a relayed one is); the message keeps the moment
    assert int(fast.value.response.headers["retry-after"]) == 3600
    assert "provider 'fake'" in fast.value.message and "retry in 7140 s" in fast.value.message
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]  # nothing reached the upstream
    refused = completions(daemon)[-1]
    assert refused.outcome == "no_credential"


def test_a_transient_429_rests_the_keys_briefly(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", TRANSIENT)
    daemons.steer("FAKE_KEY_B", TRANSIENT)
    with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    cooled = states(daemon)
    assert {(e.state, e.reason) for e in cooled} == {("cooling", "transient_limit")}
    assert all(e.until == "2026-12-02T12:00:02.000+00:00" for e in cooled)
    daemons.fake.state.by_key.clear()
    daemons.clock.advance(3)
    raw = ask(daemon)  # 3 s later the provider works again
    assert raw.http_response.status_code == 200


def test_with_every_key_benched_the_breaker_lets_one_probe_through_at_the_reset(
    daemons: Daemons
) -> None:
    daemon = daemons.with_breaker_open()
    opened = [e for e in (CODEC.decode(r.type, r.data)
                          for r in daemon.runtime.log.read_stream("ratelimits-fake"))
              if type(e).__name__ == "BreakerChanged"]
    assert [(e.state, e.reason) for e in opened] == [("open", "no_usable_key")]
    daemons.clock.advance(2)
    assert ask(daemon).http_response.status_code == 200  # the probe
    assert ask(daemon).http_response.status_code == 200  # closed again


def test_shared_limits_bench_the_whole_pool(daemons: Daemons) -> None:
    daemon = daemons.start(provider_extra="shared_limits = true\n")
    daemons.steer("FAKE_KEY_A", GENUINE)
    with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    # One genuine limit on the account benched B too: nothing more was sent.
    assert daemons.used() == ["FAKE_KEY_A"]
    assert caught.value.response.headers["x-sessionwarden-error-class"] == "rate_limit"
    assert {(e.state, e.reason) for e in states(daemon)} == {
        ("exhausted", "genuine_limit"), ("exhausted", "shared_limit")}


def test_a_stream_fails_over_before_its_first_byte(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    with daemon.openai(session="s") as client:
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=HI, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]


def test_a_server_error_is_retried_at_most_twice_then_relayed(daemons: Daemons) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"status": 500})
    with daemon.openai(session="s") as client, pytest.raises(openai.InternalServerError) as e:
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    assert e.value.response.headers["x-sessionwarden-error-class"] == "server_error"
    assert daemons.used() == ["FAKE_KEY_A"] * 3  # the same key: a 500 is not the key's
    [done] = completions(daemon)
    assert [(t.status, t.error_class) for t in done.attempts] == [
        (500, "server_error"), (500, "server_error")]
    assert (done.status, done.error_class) == (500, "server_error")


def test_an_overload_that_passes_is_retried_and_the_client_never_sees_it(
    daemons: Daemons
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", {"status": 503, "fail_first": 1,
                                 "error_message": "The server is overloaded"})
    raw = ask(daemon)
    assert raw.http_response.status_code == 200 and raw.parse().choices
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_A"]
    [done] = completions(daemon)
    assert [(t.status, t.error_class) for t in done.attempts] == [(503, "overloaded")]
    assert done.status == 200 and done.error_class == ""


def test_a_providers_own_error_phrases_extend_the_classifier(daemons: Daemons) -> None:
    daemon = daemons.start(provider_extra='error_patterns = { rate_limit = ["slow down, '
                                          'cowboy"] }\n')
    daemons.steer("FAKE_KEY_A", {"status": 400, "error_message": "Slow down, cowboy!",
                                 "error_code": "weird"})
    raw = ask(daemon)  # a rate limit in this provider's words: the next key answers
    assert raw.http_response.status_code == 200
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B"]
    assert completions(daemon)[0].attempts[0].error_class == "rate_limit"


def test_an_unknown_error_list_stops_the_daemon_with_one_line(tmp_path: Path,
                                                              fake: FakeProviderServer) -> None:
    from sessionwarden.cmd.daemon.runtime import error_patterns
    from sessionwarden.config import ConfigError, parse_config

    text = config_text(fake.base_url, ["FAKE_KEY_A"]).replace(
        'strategy = "round_robin"\n', 'error_patterns = { no_such_list = ["x"] }\n')
    with pytest.raises(ConfigError) as caught:
        error_patterns(parse_config(text))
    assert str(caught.value).startswith("providers[0].error_patterns: ")
    assert "no_such_list" in str(caught.value) and "\n" not in str(caught.value)


def test_a_bare_429_on_a_key_known_to_be_out_for_hours_benches_it_for_hours(
    daemons: Daemons
) -> None:
    start = daemons.clock.now()
    daemon = daemons.start()
    # A success whose headers say the key's request bucket is empty for two hours...
    daemons.steer("FAKE_KEY_A", {"headers": {"x-ratelimit-remaining-requests": "0",
                                             "x-ratelimit-limit-requests": "500",
                                             "x-ratelimit-reset-requests": "2h0m0s"}})
    ask(daemon)
    # ...then a 429 with nothing of its own to say (a 1 s Retry-After): the last known
    # state makes it genuine, so the key rests for the hours left, not for a second.
    daemons.steer("FAKE_KEY_A", {"status": 429, "headers": {
        "retry-after": "1", "x-ratelimit-remaining-requests": "",
        "x-ratelimit-reset-requests": ""}})
    daemons.clock.advance(60)
    ask(daemon)
    [bench] = states(daemon)
    assert (bench.state, bench.reason) == ("exhausted", "genuine_limit")
    assert bench.until is not None
    assert datetime.fromisoformat(bench.until) >= start + timedelta(hours=1, minutes=58)


def test_a_request_too_long_for_the_upstream_is_compressed_further_and_resent_once(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    from sessionwarden.cmd.cli.main import main
    from sessionwarden.events import CallResent, ContextCompressed
    from sessionwarden.views.sent_requests import rebuild

    daemon = daemons.start(provider_extra="")
    daemon.stop()
    daemons.made.pop()
    extra = ('[compression]\nenabled = false\n[[models]]\nname = "small"\nprovider = "fake"\n'
             "context_length = 16000\n")
    again = InProcessDaemon(daemon.db, daemons.fake, clock=daemons.clock, extra_config=extra)
    again.keys = daemon.keys
    daemons.made.append(again)
    again.start()
    history: list[dict[str, str]] = []
    for turn in range(30):
        history.append({"role": "user", "content": f"question {turn}: " + "why? " * 240})
        history.append({"role": "assistant", "content": f"answer {turn}: " + "because. " * 130})
    history.append({"role": "user", "content": "and now, the last question?"})
    total = sum(len(m["content"]) for m in history)
    daemons.fake.state.by_model["small"] = {"max_prompt_chars": total // 2}
    with again.openai(session="long") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="small", messages=history)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    sent = [r for r in daemons.fake.state.snapshot() if r.path == "/v1/chat/completions"]
    assert len(sent) == 2 and len(sent[1].raw) < len(sent[0].raw) // 2
    events = [CODEC.decode(e.type, e.data) for e in again.runtime.log.read_stream("session-long")]
    [resent] = [e for e in events if isinstance(e, CallResent)]
    [done] = completions(again, "long")
    assert resent.reason == "context_overflow" and resent.call_id == done.call_id
    assert [(t.status, t.error_class) for t in done.attempts] == [(400, "context_overflow")]
    assert any(isinstance(e, ContextCompressed) for e in events)
    # The log rebuilds the request that was sent the second time, byte for byte.
    sent_again = rebuild(again.runtime.log, "long", done.call_id)
    assert sent_again.body == sent[1].raw and not sent_again.missing
    # The next call builds on what was resent: its request too rebuilds byte for byte.
    history += [{"role": "assistant", "content": raw.parse().choices[0].message.content},
                {"role": "user", "content": "thanks; one more?"}]
    with again.openai(session="long") as client:
        client.chat.completions.create(model="small", messages=history)  # type: ignore[arg-type]
    third = [r for r in daemons.fake.state.snapshot() if r.path == "/v1/chat/completions"][-1]
    second_call = completions(again, "long")[-1].call_id
    assert rebuild(again.runtime.log, "long", second_call).body == third.raw
    assert len(third.raw) < len(sent[0].raw) // 2  # it kept the compressed history
    assert main(["replay", "--verify", "--db", str(again.db)]) == 0  # every content held


def test_while_no_key_can_take_a_call_the_models_fallback_route_serves_it(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    from sessionwarden.events import CallResent
    from sessionwarden.views.sent_requests import rebuild

    extra = f"""
[[providers]]
name = "backup"
base_url = "{fake.base_url}"
keys = ["env:FAKE_KEY_C"]
[[models]]
name = "main"
provider = "fake"
fallback = "backup/other-model"
price = {{ input = "1.00", output = "2.00" }}
[[models]]
name = "other-model"
provider = "backup"
price = {{ input = "3.00", output = "4.00" }}
"""
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra)
    daemon.keys["FAKE_KEY_C"] = "sk-test-c-" + "9" * 16
    daemon.start()
    try:
        for name in ("FAKE_KEY_A", "FAKE_KEY_B"):
            fake.state.by_key[daemon.keys[name]] = GENUINE
        # Both keys fail inside the call: it is moved to the fallback route at once.
        with daemon.openai(session="s") as client:
            first = client.chat.completions.with_raw_response.create(
                model="main", messages=HI)  # type: ignore[arg-type]
        assert first.http_response.status_code == 200
        assert [r.headers["authorization"] for r in fake.state.snapshot()] == [
            f"Bearer {daemon.keys[k]}" for k in ("FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_C")]
        moved_first = completions(daemon)[-1]
        assert [(t.status, t.error_class) for t in moved_first.attempts] == [
            (429, "rate_limit"), (429, "rate_limit")]
        assert rebuild(daemon.runtime.log, "s", moved_first.call_id).body == fake.state.last.raw
        # Both keys of "fake" are out for 2 h: the next call goes to the fallback route.
        with daemon.openai(session="s") as client:
            raw = client.chat.completions.with_raw_response.create(
                model="main", messages=HI)  # type: ignore[arg-type]
        assert raw.http_response.status_code == 200
        last = fake.state.last
        assert last.body["model"] == "other-model"
        assert last.headers["authorization"] == f"Bearer {daemon.keys['FAKE_KEY_C']}"
        events = [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream("session-s")]
        [_, moved] = [e for e in events if isinstance(e, CallResent)]
        assert (moved.provider, moved.model, moved.reason) == ("backup", "other-model",
                                                               "no_usable_key")
        done = completions(daemon)[-1]
        assert done.call_id == moved.call_id and done.status == 200
        expected = (Decimal(done.input_tokens) * 3 + Decimal(done.output_tokens) * 4) / 10**6
        assert done.cost is not None and Decimal(done.cost) == expected  # the route's price
        [(provider, model)] = daemon.rows(
            "SELECT provider, model FROM view_ledger WHERE call_id = ?", (done.call_id,))
        assert (provider, model) == ("backup", "other-model")
        assert rebuild(daemon.runtime.log, "s", done.call_id).body == last.raw
        assert daemon.rows("SELECT provider, count(*) FROM view_ledger GROUP BY provider"
                           ) == [("backup", 2)]
        from sessionwarden.cmd.cli.main import main

        from tests.cmd.test_failover_hostile import in_flight
        assert in_flight(daemon) == [0, 0, 0]  # the failed keys' leases went back too
        assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
    finally:
        daemon.stop()


def test_at_the_reset_exactly_one_probe_goes_through_while_others_wait(
    daemons: Daemons
) -> None:
    daemon = daemons.with_breaker_open()
    sent = len(daemons.used())
    # At the reset the probe is slow to answer: a call arriving meanwhile must wait.
    daemons.fake.state.by_model[MODEL] = {"delay_ms": 600}
    daemons.clock.advance(2)
    results: list[object] = []

    def probe() -> None:
        results.append(ask(daemon).http_response.status_code)

    first = threading.Thread(target=probe)
    first.start()
    time.sleep(0.25)  # the probe is upstream now
    with daemon.openai(session="s") as client, pytest.raises(openai.RateLimitError) as held:
        client.chat.completions.create(model=MODEL, messages=HI)  # type: ignore[arg-type]
    first.join(10)
    assert results == [200]
    assert held.value.body["code"] == "keys_benched"  # type: ignore[index]
    assert "probing" in held.value.message and held.value.response.headers["retry-after"] == "1"
    assert len(daemons.used()) == sent + 1  # only the probe reached the upstream
