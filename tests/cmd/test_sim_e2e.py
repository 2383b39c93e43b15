"""End to end: the built-in simulated provider ``sim`` through a real daemon subprocess.

The daemon runs as README's first command does: no ``--config``, no provider key in its
environment. The client is the official openai SDK; every call must be in the ledger
with the usage the simulator reported (``source = provider``), like a real provider's.
"""

import json
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.cmd.daemon_fixtures import (
    MODEL,
    Daemon,
    DaemonFactory,
    sessionwarden_cmd,
)
from tests.support.fake_provider import FakeProviderServer

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
ASK: list[Any] = [{"role": "user", "content": "Summarise the plan in one line."}]


class _Unconfigured(Daemon):
    """A daemon started with no ``--config`` at all (the zero config, no keys set)."""

    def spawn(self) -> "subprocess.Popen[bytes]":
        self.runs += 1
        self.stdout_path = self.workdir / f"daemon-{self.runs}.out"
        self.stderr_path = self.workdir / f"daemon-{self.runs}.err"
        cmd = [*sessionwarden_cmd(), "daemon", "--db", str(self.db), "--port", "0"]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir)
        return self.proc


@pytest.fixture
def bare(daemon_factory: DaemonFactory, tmp_path: Path) -> Daemon:
    """A running daemon with no configuration and no keys: only ``sim`` can answer."""
    made = daemon_factory(keys={})
    daemon = _Unconfigured(made.workdir, made.db, made.config, made.env, made.token, {})
    daemon_factory.made.append(daemon)  # stopped at teardown with the others
    assert "OPENAI_API_KEY" not in daemon.env and "SESSIONWARDEN_CONFIG" not in daemon.env
    return daemon.start()


def _row(daemon: Daemon, call_id: str) -> dict[str, Any]:
    row = daemon.ledger()[call_id]
    assert (row["provider"], row["status"], row["source"]) == ("sim", 200, "provider")
    return row


def test_an_unconfigured_daemon_answers_plain_calls_from_sim(bare: Daemon) -> None:
    assert "only the offline simulated one (models sim/<name>)" in bare.stderr()
    with bare.openai(session="first") as client:
        ids = [m.id for m in client.models.list().data]
        raw = client.chat.completions.with_raw_response.create(model="sim/chat",
                                                               messages=ASK)
        answer = raw.parse()
        again = client.chat.completions.create(model="sim/chat", messages=ASK)
    assert {"sim/chat", "sim/agent"} <= set(ids)
    assert answer.choices[0].message.content == again.choices[0].message.content
    assert answer.usage is not None
    row = _row(bare, raw.headers["x-sessionwarden-call-id"])
    assert (row["input_tokens"], row["output_tokens"]) == (
        answer.usage.prompt_tokens, answer.usage.completion_tokens)
    assert row["session_id"] == "first" and row["credential"] == ""
    # Two events per call (admitted, completed); no key was recorded for sim.
    counts = dict(bare.query("SELECT type, count(*) FROM events GROUP BY type"))
    assert counts["session.call_admitted.v4"] == counts["session.call_completed.v3"] == 2
    assert bare.query("SELECT count(*) FROM view_credentials") == [(0,)]


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_streamed_call_to_sim_is_relayed_and_recorded(bare: Daemon,
                                                        include_usage: bool) -> None:
    options: Any = {"include_usage": True} if include_usage else openai.NOT_GIVEN
    with bare.openai() as client:
        raw = client.chat.completions.with_raw_response.create(
            model="sim/chat", messages=ASK, stream=True, stream_options=options)
        chunks = list(raw.parse())
        plain = client.chat.completions.create(model="sim/chat", messages=ASK)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    usage_chunks = [c for c in chunks if c.usage is not None]
    # The daemon always asks for usage; the client sees it only when it asked.
    assert len(usage_chunks) == (1 if include_usage else 0)
    row = _row(bare, raw.headers["x-sessionwarden-call-id"])
    assert plain.usage is not None
    assert row["output_tokens"] == plain.usage.completion_tokens
    if include_usage:
        assert usage_chunks[0].usage is not None
        assert row["input_tokens"] == usage_chunks[0].usage.prompt_tokens


def test_sim_plays_an_agent_turn_with_tools(bare: Daemon) -> None:
    with bare.openai(session="agent") as client:
        first = client.chat.completions.create(model="sim/agent", messages=ASK, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls"
        assert isinstance(json.loads(call.function.arguments)["path"], str)
        history: list[Any] = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                              {"role": "tool", "tool_call_id": call.id, "content": "plan"}]
        final = client.chat.completions.create(model="sim/agent", messages=history,
                                               tools=TOOLS)
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.content
    rows = [r for r in bare.ledger().values() if r["session_id"] == "agent"]
    assert [r["source"] for r in rows] == ["provider", "provider"]
    status = bare.cli("status")
    assert "agent" in status.stdout and "sim/agent" in status.stdout


def test_sim_is_there_beside_configured_providers_and_sends_nothing_out(
    daemon_factory: DaemonFactory, fake: FakeProviderServer
) -> None:
    daemon = daemon_factory().start()
    with daemon.openai() as client:
        ids = [m.id for m in client.models.list().data]
        answer = client.chat.completions.create(model="sim/chat", messages=ASK)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="sim/error-429", messages=ASK)
    assert MODEL in ids and "sim/chat" in ids
    assert answer.choices[0].message.content
    assert fake.state.requests == []  # nothing reached the configured upstream
    outcomes = [(r["provider"], r["status"]) for r in daemon.ledger().values()]
    assert outcomes == [("sim", 200), ("sim", 429)]
