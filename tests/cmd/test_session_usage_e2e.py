"""A session's usage view through the daemon: ``status --session``, the control API, ``usage``.

A session of nine client calls (each reporting cache reads, cache writes and reasoning)
and one side call (the model summariser, asked for through the control API), every
model priced by a config override: the exact amounts in ``status --session --json`` and
in ``GET /v1/sessions/{id}`` (the same object), the rounded text block, the rate-limit
line of the key the session used, and ``usage --by session`` showing the side call as
its own row under the session whose total includes it.
"""

import csv
import io
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, CallCompleted, ContextCompressed
from sessionwarden.views.session_status import ROUNDED_NOTE

from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import agent_session
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

CONFIG = """
[compression]
summariser = "model"
summary_model = "fake/sum-model"

[[models]]
name = "small"
provider = "fake"
context_length = 16000
max_output_tokens = 1000
price = { input = "2.00", output = "8.00", cache_read = "0.50", cache_write = "2.50" }

[[models]]
name = "sum-model"
provider = "fake"
context_length = 128000
price = { input = "1.00", output = "4.00" }
"""
# Each client call: input 500, cache read 400, cache write 100, output 50 (20 reasoning):
# (500 x 2 + 400 x 0.5 + 100 x 2.5 + 50 x 8) / 1M = $0.00185.
CLIENT_USAGE = {"prompt_tokens": 1000, "completion_tokens": 50,
                "prompt_tokens_details": {"cached_tokens": 400, "cache_write_tokens": 100},
                "completion_tokens_details": {"reasoning_tokens": 20}}
# The summary: (3000 x 1 + 200 x 4) / 1M = $0.0038.
SUMMARY_USAGE = {"prompt_tokens": 3000, "completion_tokens": 200}
SUMMARY = "## Goal\n- fix the failing test suite"


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake, extra_config=CONFIG, clock=FakeClock())
    try:
        yield d.start()
    finally:
        d.stop()


@pytest.fixture
def session(daemon: InProcessDaemon, fake: FakeProviderServer) -> str:
    """Session ``agent``: nine client calls, a compaction asked for, one summary side call."""
    fake.state.by_model["small"] = {"usage": "custom", "usage_block": CLIENT_USAGE}
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "usage": "custom",
                                        "usage_block": SUMMARY_USAGE}
    assert isinstance(daemon.clock, FakeClock)
    histories = agent_session(7)
    with daemon.openai(session="agent") as client, control(daemon) as http:
        for messages in histories[:-1]:
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            daemon.clock.advance(90)
        assert http.post("/v1/sessions/agent/compact", json={}).status_code == 202
        client.chat.completions.create(model="small", messages=histories[-1])  # type: ignore[arg-type]
    assert any(isinstance(e, ContextCompressed) for e in events(daemon))
    return "agent"


def control(daemon: InProcessDaemon) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                        headers={"authorization": f"Bearer {daemon.token}"})


def events(daemon: InProcessDaemon) -> list[Any]:
    return [CODEC.decode(r.type, r.data) for r in daemon.runtime.log.read_stream("session-agent")]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The command's stdout. Its stderr is not checked: the daemon in this process logs
    its access lines there from its own thread, at any moment."""
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def tally(requests: int, cost: str, **tokens: int) -> dict[str, Any]:
    """An all-``actual`` tally as the JSON shows it (cost compared as a Decimal apart)."""
    counts = {f"{k}_tokens": tokens.get(k, 0)
              for k in ("input", "output", "cache_read", "cache_write", "reasoning")}
    return {"requests": requests, **counts, "cost_status": "actual", "unknown_requests": 0,
            "estimated_requests": 0, "estimated_cost": None, "sources": {}}


def exact(data: dict[str, Any], cost: str) -> dict[str, Any]:
    """``data`` without its amounts, once they are checked to be exactly ``cost``."""
    assert isinstance(data["cost"], str) and Decimal(data["cost"]) == Decimal(cost)
    assert data["priced_cost"] == data["cost"]
    return {k: v for k, v in data.items() if k not in ("cost", "priced_cost")}


def test_status_session_is_the_usage_view_with_exact_amounts(
    daemon: InProcessDaemon, session: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    data = json.loads(run(capsys, "status", "--db", str(daemon.db), "--session", session,
                          "--json"))
    usage = data["usage"]
    assert exact(usage["client"], "0.01665") == tally(
        9, "0.01665", input=4500, output=450, cache_read=3600, cache_write=900, reasoning=180)
    assert list(usage["side_calls"]) == ["summary"]
    assert exact(usage["side_calls"]["summary"], "0.0038") == tally(
        1, "0.0038", input=3000, output=200)
    assert exact(usage["total"], "0.02045") == tally(  # the side call included
        10, "0.02045", input=7500, output=650, cache_read=3600, cache_write=900, reasoning=180)
    assert usage["in_flight"] == 0
    assert (data["calls"], data["summariser_calls"], data["compressions"]) == (9, 1, 1)
    # The rate-limit line: the last recorded buckets of the key of the latest client call.
    completions = [e for e in events(daemon) if isinstance(e, CallCompleted)]
    limits = data["rate_limits"]
    assert (limits["provider"], limits["credential"]) == ("fake", completions[-1].credential)
    assert [(b["name"], b["limit"]) for b in limits["buckets"]] == [
        ("requests", 10_000), ("tokens", 2_000_000)]
    assert all(b["reset_at"] > limits["observed_at"] for b in limits["buckets"])
    # The budget counts the side call: the session's whole spend, exact; no cap set.
    assert data["budget"] == {"session_id": session, "cap": None, "spent": "0.02045",
                              "reserved": "0", "left": None, "unknown_calls": 0,
                              "parent": ""}
    assert data["notices"] == []
    # The control API answers the same view.
    with control(daemon) as http:
        api = http.get(f"/v1/sessions/{session}").json()
    assert {k: api[k] for k in ("usage", "rate_limits", "budget", "notices")} == {
        k: data[k] for k in ("usage", "rate_limits", "budget", "notices")}

    lines = run(capsys, "status", "--db", str(daemon.db), "--session", session).splitlines()
    assert lines[3:7] == [
        "tokens: input 7,500, output 650, cache read 3,600, cache write 900, reasoning 180 "
        "(10 calls completed, side calls included)",
        "cost: ~$0.02 actual",
        "  client: 9 calls, input 4,500, output 450, cache read 3,600, cache write 900, "
        "reasoning 180; cost ~$0.02 actual",
        "  side calls (summary): 1 call, input 3,000, output 200, cache read 0, "
        "cache write 0, reasoning 0; cost ~$0.0038 actual",
    ]
    assert lines[7].startswith(f"rate limits: fake key {completions[-1].credential} "
                               "(last recorded ")
    assert "requests " in lines[7] and "/10,000 left, tokens " in lines[7]
    assert lines[8] == "budget: no session cap (spent ~$0.02, with its subsessions)"
    assert lines[9].startswith("context: ") and lines[-1] == ROUNDED_NOTE


def test_usage_shows_side_calls_under_their_session_and_in_its_total(
    daemon: InProcessDaemon, session: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    [row] = json.loads(run(capsys, "usage", "--db", str(daemon.db), "--json"))
    assert (row["session"], row["requests"], row["input_tokens"]) == (session, 10, 7500)
    assert Decimal(row["cost"]) == Decimal("0.02045")  # the side call included
    [side] = row["side_calls"]
    assert (side["purpose"], side["requests"], side["input_tokens"], side["output_tokens"],
            side["cost_status"]) == ("summary", 1, 3000, 200, "actual")
    assert Decimal(side["cost"]) == Decimal("0.0038")
    # Grouped otherwise, the summary model is a model like any other: no side rows.
    by_model = json.loads(run(capsys, "usage", "--db", str(daemon.db), "--by", "model",
                              "--json"))
    assert [(r["model"], r["requests"]) for r in by_model] == [("small", 9), ("sum-model", 1)]
    assert all("side_calls" not in r for r in by_model)
    monkeypatch.setenv("COLUMNS", "200")
    table = run(capsys, "usage", "--db", str(daemon.db)).splitlines()
    [at] = [i for i, line in enumerate(table) if line.startswith(session)]
    assert table[at].split()[1:3] == ["10", "7500"]
    assert table[at + 1].split()[:4] == ["+", "summary", "1", "3000"]
    assert "~$0.0038" in table[at + 1]
    assert [line.split()[:2] for line in table if line.startswith("total")] == [["total", "10"]]
    # --totals: the totals' side calls, summed by purpose; the CSV's rows name them.
    *_, total = json.loads(run(capsys, "usage", "--db", str(daemon.db), "--json", "--totals"))
    assert [(t["purpose"], t["requests"], t["cost"]) for t in total["side_calls"]] == [
        ("summary", 1, side["cost"])]
    rows = list(csv.DictReader(io.StringIO(run(capsys, "usage", "--db", str(daemon.db),
                                               "--csv", "--totals"))))
    assert [(r["session"], r["side_call"], r["requests"], r["input_tokens"], r["cost"])
            for r in rows] == [
        (session, "", "10", "7500", row["cost"]), (session, "summary", "1", "3000", side["cost"]),
        ("total", "", "10", "7500", row["cost"]), ("total", "summary", "1", "3000", side["cost"])]
