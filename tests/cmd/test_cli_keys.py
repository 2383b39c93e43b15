"""``sessionwarden keys`` and ``breaker``: read the pool from the log, change it by hand.

Against a running in-process daemon (a change takes effect within a second) and with the
daemon stopped (the next start takes it). The fake upstream is steered per key.
"""

import json
import time
from pathlib import Path

import pytest
from sessionwarden.clock import Clock
from sessionwarden.cmd.cli.main import main
from sessionwarden.redact import fingerprint

from tests.cmd.key_fixtures import GENUINE, POLLED_S, TRANSIENT, Daemons, ask


def run(capsys: pytest.CaptureFixture[str], clock: Clock, *argv: str) -> tuple[int, str, str]:
    # The CLI reads "now" from the clock the daemons run on (a key benched until 13:00 of
    # that clock is benched for the CLI too, whatever today's date).
    code = main(list(argv), clock=clock)
    out, err = capsys.readouterr()
    return code, out, err


def keys_json(capsys: pytest.CaptureFixture[str], clock: Clock,
              db: Path) -> dict[str, dict[str, object]]:
    code, out, _ = run(capsys, clock, "keys", "list", "--json", "--db", str(db))
    assert code == 0
    return {str(r["fingerprint"]): r for r in json.loads(out)}


def test_keys_list_shows_each_keys_state_and_never_a_secret(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    ask(daemon)
    a, b = fingerprint(daemons.key("FAKE_KEY_A")), fingerprint(daemons.key("FAKE_KEY_B"))
    listed = keys_json(capsys, daemons.clock, daemon.db)
    assert (listed[a]["state"], listed[a]["last_error"], listed[a]["last_status"]) == (
        "exhausted", "genuine_limit", 429)
    assert listed[a]["ref"] == "env:FAKE_KEY_A" and listed[a]["until"]
    assert (listed[b]["state"], listed[b]["calls"]) == ("ok", 1)
    code, text, _ = run(capsys, daemons.clock, "keys", "list", "--db", str(daemon.db))
    assert code == 0 and f"fake {a} env:FAKE_KEY_A: exhausted until " in text
    daemon.stop()
    secrets = [daemons.key(k).encode() for k in ("FAKE_KEY_A", "FAKE_KEY_B")]
    for path in daemon.db.parent.iterdir():
        if path.is_file():
            data = path.read_bytes()
            assert not any(s in data for s in secrets), path
    assert not any(s.decode() in text + json.dumps(listed) for s in secrets)


def test_keys_reset_takes_effect_in_a_running_daemon_within_a_second(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    ask(daemon)
    daemons.fake.state.by_key.clear()
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    code, out, _ = run(capsys, daemons.clock, "keys", "reset", "fake", a, "--db", str(daemon.db))
    assert code == 0 and out == f"fake {a}: ok\n"
    time.sleep(POLLED_S)  # the pool looks for the operator's changes again
    ask(daemon)
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_A"]  # fill_first: A
    assert keys_json(capsys, daemons.clock, daemon.db)[a]["state"] == "ok"


def test_keys_add_and_remove_reach_the_running_pool(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = daemons.start(extra_keys={"FAKE_KEY_C": "sk-test-c-" + "7" * 16})
    assert daemons.keys is not None
    monkeypatch.setenv("FAKE_KEY_C", daemons.key("FAKE_KEY_C"))
    daemons.steer("FAKE_KEY_A", TRANSIENT)
    daemons.steer("FAKE_KEY_B", TRANSIENT)
    c = fingerprint(daemons.key("FAKE_KEY_C"))
    code, out, _ = run(capsys, daemons.clock, "keys", "add", "fake", "env:FAKE_KEY_C",
                       "--db", str(daemon.db))
    assert code == 0 and out == f"fake {c} env:FAKE_KEY_C: added\n"
    time.sleep(POLLED_S)
    ask(daemon)  # A and B are limited: the call ends on the operator's key C
    assert daemons.used() == ["FAKE_KEY_A", "FAKE_KEY_B", "FAKE_KEY_C"]
    code, _, _ = run(capsys, daemons.clock, "keys", "remove", "fake", c, "--db", str(daemon.db))
    assert code == 0 and keys_json(capsys, daemons.clock, daemon.db)[c]["state"] == "removed"
    daemons.clock.advance(3)
    daemons.fake.state.by_key.clear()
    time.sleep(POLLED_S)
    ask(daemon)
    ask(daemon)
    assert "FAKE_KEY_C" not in daemons.used()[3:]


def test_a_reset_with_the_daemon_stopped_counts_at_the_next_start(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    daemons.steer("FAKE_KEY_B", GENUINE)
    with pytest.raises(Exception, match="429"):
        ask(daemon)
    daemon.stop()
    _, out, _ = run(capsys, daemons.clock, "breaker", "list", "--json", "--db", str(daemon.db))
    [breaker] = json.loads(out)
    assert (breaker["provider"], breaker["state"], breaker["reason"]) == (
        "fake", "open", "no_usable_key")
    b = fingerprint(daemons.key("FAKE_KEY_B"))
    assert run(capsys, daemons.clock, "keys", "reset", "fake", b, "--db", str(daemon.db))[0] == 0
    daemons.fake.state.by_key.clear()
    again = daemons.start()
    assert ask(again).http_response.status_code == 200
    assert daemons.used()[-1] == "FAKE_KEY_B"


def test_bad_keys_commands_say_why_in_one_line(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = daemons.start()
    daemon.stop()
    db = str(daemon.db)
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    for argv, code, words in (
        (("keys", "reset", "fake", "fp:000000000000"), 1, "no key fp:000000000000"),
        (("keys", "reset", "fake", "fp:nope"), 64, "expected a whole fingerprint"),
        (("keys", "reset", "ghost", "fp:000000000000"), 1, "no provider 'ghost'"),
        (("keys", "reset", "fake"), 64, "needs a provider and a key"),
        (("keys", "add", "fake", "env:NOT_SET_ANYWHERE"), 64, "NOT_SET_ANYWHERE"),
        (("keys", "add", "fake", "sk-literal-key-000000000000"), 64, "env:NAME"),
        (("breaker", "reset", "ghost"), 64, "breaker reset needs a provider"),
    ):
        got, out, err = run(capsys, daemons.clock, *argv, "--db", db)
        assert got == code, argv
        assert out == "" and words in err and err.count("\n") == 1, (argv, err)
        assert "Traceback" not in err and "sk-literal" not in err


def test_status_shows_a_benched_key_though_a_later_call_succeeded(
    daemons: Daemons, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemons.start()
    daemons.steer("FAKE_KEY_A", GENUINE)
    ask(daemon)  # 429 on A, then 200 on B
    a = fingerprint(daemons.key("FAKE_KEY_A"))
    code, out, _ = run(capsys, daemons.clock, "status", "--json", "--db", str(daemon.db))
    creds = {c["fingerprint"]: c for c in json.loads(out)["credentials"]}
    assert code == 0 and creds[a]["state"] == "active"
    assert creds[a]["health"] == "exhausted" and creds[a]["until"]
    code, text, _ = run(capsys, daemons.clock, "status", "--db", str(daemon.db))
    assert code == 0 and "exhausted until " in text


def test_a_key_added_from_another_environment_is_not_taken_for_it(
    daemons: Daemons, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loguru import logger

    daemon = daemons.start(extra_keys={"FAKE_KEY_C": "sk-test-c-" + "7" * 16})
    # The shell running `keys add` holds another value under the same name.
    monkeypatch.setenv("FAKE_KEY_C", "sk-test-c-" + "8" * 16)
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    try:
        assert run(capsys, daemons.clock, "keys", "add", "fake", "env:FAKE_KEY_C",
                   "--db", str(daemon.db))[0] == 0
        daemons.steer("FAKE_KEY_A", TRANSIENT)
        daemons.steer("FAKE_KEY_B", TRANSIENT)
        time.sleep(POLLED_S)
        with pytest.raises(Exception, match="429"):
            ask(daemon)
    finally:
        logger.remove(sink)
    assert "FAKE_KEY_C" not in daemons.used()
    assert any("holds another key in the daemon's environment" in line for line in seen)
    assert not any("sk-test-c-" in line for line in seen)
