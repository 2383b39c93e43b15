"""Every call priced at its completion, through the daemon (issue 12's ledger, first part).

A `[[models]]` price override gives an exact Decimal; a model with no price is
``unknown`` with no amount (never $0) in the event, `usage`, `status --session` and their
`--json`; a call whose upstream sent no usage is ``estimated`` in both views; the
built-in `sim` provider bills as ``included`` ($0, said so).
"""

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, CallCompleted

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

PRICED = """
[[models]]
name = "priced"
provider = "fake"
context_length = 128000
price = { input = "2.00", output = "8.00", cache_read = "0.50" }

[[models]]
name = "claude-compacting"
provider = "fake"
context_length = 200000
[models.price]
input = "3"
output = "15"
cache_read = "0.30"
cache_write = "3.75"
cache_write_1h = "6"
"""

#: Anthropic's usage object, relayed as it is on the chat wire, for a call that compacted
#: on the server: the top level describes only the last (message) iteration.
COMPACTED_USAGE = {
    "input_tokens": 500, "cache_read_input_tokens": 20000,
    "cache_creation_input_tokens": 3000, "output_tokens": 1000,
    "iterations": [
        {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
        {"type": "message", "input_tokens": 500, "cache_read_input_tokens": 20000,
         "cache_creation_input_tokens": 3000,
         "cache_creation": {"ephemeral_5m_input_tokens": 1000,
                            "ephemeral_1h_input_tokens": 2000},
         "output_tokens": 1000},
    ],
}


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake, extra_config=PRICED)
    try:
        yield d.start()
    finally:
        d.stop()


def completed(daemon: InProcessDaemon, session: str) -> list[CallCompleted]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, CallCompleted)]


def test_an_override_prices_every_token_kind_exactly(
    daemon: InProcessDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    history = [{"role": "user", "content": "a long, stable question " * 40}]
    with daemon.openai(session="priced") as client:
        client.chat.completions.create(model="priced", messages=history)  # type: ignore[arg-type]
        # The same prefix again: the fake reports part of it as cached.
        client.chat.completions.create(model="priced", messages=[  # type: ignore[arg-type]
            *history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}])
    calls = completed(daemon, "priced")
    assert any(c.cache_read_tokens for c in calls)
    for call in calls:
        expected = (Decimal(call.input_tokens) * 2 + Decimal(call.cache_read_tokens)
                    * Decimal("0.5") + Decimal(call.output_tokens) * 8) / 1_000_000
        assert call.cost is not None and Decimal(call.cost) == expected
        assert (call.cost_status, call.cost_source, call.cost_version) == (
            "actual", "override", "config")
    assert main(["usage", "--db", str(daemon.db), "--by", "model", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["cost_status"] == "actual"
    assert Decimal(row["cost"]) == sum(Decimal(c.cost or "0") for c in calls)
    # Tables round, and say so; --json above is exact.
    assert main(["usage", "--db", str(daemon.db), "--by", "model"]) == 0
    table = capsys.readouterr().out
    assert "~$" in table and "costs rounded for display" in table


def test_a_model_without_a_price_is_unknown_never_zero(
    daemon: InProcessDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    with daemon.openai(session="unpriced") as client:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    [call] = completed(daemon, "unpriced")
    assert (call.cost, call.cost_status, call.cost_source) == (None, "unknown", "none")
    assert main(["usage", "--db", str(daemon.db), "--by", "session", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["cost"] is None and row["cost_status"] == "unknown"
    assert main(["usage", "--db", str(daemon.db), "--by", "session"]) == 0
    out = capsys.readouterr().out
    assert "unknown" in out and "$0 " not in out and "$0.00" not in out
    # status --session: unknown, with no amount at all (not even "priced: 0").
    assert main(["status", "--db", str(daemon.db), "--session", "unpriced", "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["usage"]["total"]
    assert (total["cost"], total["cost_status"], total["priced_cost"]) == (None, "unknown", None)
    assert total["unknown_requests"] == 1
    assert main(["status", "--db", str(daemon.db), "--session", "unpriced"]) == 0
    out = capsys.readouterr().out
    assert "\ncost: unknown (no known cost for 1 call)\n" in out and "$" not in out


def test_a_call_without_usage_is_estimated_in_status_and_usage(
    daemon: InProcessDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    question = [{"role": "user", "content": "a question " * 40}]
    with daemon.openai(session="estimated") as client:
        client.chat.completions.create(model="priced", messages=question)  # type: ignore[arg-type]
        client.chat.completions.create(model="priced", messages=question,  # type: ignore[arg-type]
                                       extra_body={"fake": {"usage": "missing"}})
    reported, guessed = completed(daemon, "estimated")
    assert (reported.source, reported.cost_status) == ("provider", "actual")
    assert (guessed.source, guessed.cost_status) == ("estimated", "estimated")
    assert guessed.cost is not None and reported.cost is not None
    assert main(["status", "--db", str(daemon.db), "--session", "estimated", "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["usage"]["total"]
    assert (total["cost_status"], total["estimated_requests"]) == ("partial", 1)
    assert total["estimated_cost"] == guessed.cost and total["sources"] == {"estimated": 1}
    assert Decimal(total["cost"]) == Decimal(reported.cost) + Decimal(guessed.cost)
    assert main(["status", "--db", str(daemon.db), "--session", "estimated"]) == 0
    out = capsys.readouterr().out
    assert "not from the provider: estimated: 1" in out
    assert "partial; 1 call estimated (~$" in out
    assert main(["usage", "--db", str(daemon.db), "--session", "estimated", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["cost_status"], row["sources"]) == ("partial", {"estimated": 1})
    assert main(["usage", "--db", str(daemon.db), "--session", "estimated"]) == 0
    assert "estimated: 1" in capsys.readouterr().out


def test_the_simulated_provider_is_included(daemon: InProcessDaemon) -> None:
    with daemon.openai(session="simulated") as client:
        client.chat.completions.create(model="sim/chat",
                                       messages=[{"role": "user", "content": "hi"}])
    [call] = completed(daemon, "simulated")
    assert (call.cost, call.cost_status, call.cost_source) == ("0", "included", "included")


def test_anthropic_iterations_are_priced_each_compaction_included(
    daemon: InProcessDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    with daemon.openai(session="compacting") as client:
        client.chat.completions.create(
            model="claude-compacting", messages=[{"role": "user", "content": "go on"}],
            extra_body={"fake": {"usage": "custom", "usage_block": COMPACTED_USAGE}})
    [call] = completed(daemon, "compacting")
    # By hand, USD per million tokens. Compaction: 180,000 in x 3 + 3,500 out x 15.
    compaction = 180_000 * 3 + 3_500 * 15
    # Message: 500 in x 3, 20,000 cache read x 0.30, 1,000 5-minute writes x 3.75,
    # 2,000 1-hour writes x 6, 1,000 out x 15.
    message = (500 * 3 + 20_000 * Decimal("0.30") + 1_000 * Decimal("3.75") + 2_000 * 6
               + 1_000 * 15)
    expected = (compaction + message) / 1_000_000
    assert expected == Decimal("0.63075")
    assert call.cost is not None and Decimal(call.cost) == expected
    assert (call.cost_status, call.cost_source, call.cost_version) == (
        "actual", "override", "config")
    # The top level stays what Anthropic reported (it describes the context); the raw
    # block with its iterations is kept with the call.
    assert (call.input_tokens, call.cache_read_tokens, call.cache_write_tokens) == (
        500, 20000, 3000)
    assert "iterations" in call.flags and '"compaction"' in call.raw_usage
    assert main(["usage", "--db", str(daemon.db), "--session", "compacting", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["cost"], row["cost_status"]) == (call.cost, "actual")
