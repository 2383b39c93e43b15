"""End to end: the built-in simulated provider ``sim`` through a real daemon subprocess.

The daemon runs as README's first command does: no ``--config``, no provider key in its
environment. The client is the official openai SDK; every call must be in the ledger
with the usage the simulator reported (``source = provider``), like a real provider's,
at its price (nothing, but for ``sim/priced``), and an error answer must be judged as a
real provider's is (its class in ``x-sessionwarden-error-class``).
"""

import json
import math
import subprocess
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel
from sessionwarden.config import SIM_PRICE

from tests.cmd.daemon_fixtures import (
    MODEL,
    Daemon,
    DaemonFactory,
    DaemonMaker,
    sessionwarden_cmd,
)
from tests.support.fake_provider import FakeProviderServer

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
ASK: list[Any] = [{"role": "user", "content": "Summarise the plan in one line."}]


class Step(BaseModel):
    action: str
    minutes: int


class Plan(BaseModel):
    """What a structured-output client asks for: nested models, enums, optionals."""

    title: str
    steps: list[Step]
    priority: Literal["low", "high"]
    due: date | None
    done: bool


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


@pytest.fixture(scope="module")
def shared_bare(tmp_path_factory: pytest.TempPathFactory,
                fake_server: FakeProviderServer) -> Iterator[Daemon]:
    """One daemon with no configuration and no keys for the module: each test reads back
    only its own calls (its session, its call ids), so none pays a daemon's start."""
    maker = DaemonMaker(tmp_path_factory.mktemp("sim"), fake_server)
    made = maker(keys={})
    daemon = _Unconfigured(made.workdir, made.db, made.config, made.env, made.token, {})
    maker.made.append(daemon)  # stopped at the end with the others
    assert "OPENAI_API_KEY" not in daemon.env and "SESSIONWARDEN_CONFIG" not in daemon.env
    try:
        yield daemon.start()
        assert daemon.stop() == 0
    finally:
        maker.cleanup()


@pytest.fixture
def bare(shared_bare: Daemon) -> Daemon:
    """The module's daemon with no configuration and no keys: only ``sim`` can answer."""
    assert shared_bare.proc is not None and shared_bare.proc.poll() is None, (
        shared_bare.stderr())
    return shared_bare


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
    assert {"sim/chat", "sim/agent", "sim/priced"} <= set(ids)
    assert answer.choices[0].message.content == again.choices[0].message.content
    # the same answer, but two answers: a client that keys answers by id keeps both
    assert answer.id != again.id and raw.headers["x-request-id"].startswith("req_sim_")
    assert answer.usage is not None
    row = _row(bare, raw.headers["x-sessionwarden-call-id"])
    assert (row["input_tokens"], row["output_tokens"]) == (
        answer.usage.prompt_tokens, answer.usage.completion_tokens)
    assert row["session_id"] == "first" and row["credential"] == ""
    # Two events per call (admitted, completed); no key was recorded for sim.
    counts = dict(bare.query("SELECT type, count(*) FROM events WHERE stream = ?"
                             " GROUP BY type", ("session-first",)))
    assert counts["session.call_admitted.v5"] == counts["session.call_completed.v4"] == 2
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
    assert len({c.id for c in chunks}) == 1 and chunks[0].id != plain.id  # one answer each
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


def test_structured_output_parses_through_the_daemon_streamed_or_not(bare: Daemon) -> None:
    with bare.openai(session="structured") as client:
        raw = client.chat.completions.with_raw_response.parse(
            model="sim/chat", messages=ASK, response_format=Plan)
        parsed = raw.parse()
        with client.chat.completions.stream(model="sim/chat", messages=ASK,
                                            response_format=Plan) as stream:
            pieces = [e.delta for e in stream if e.type == "content.delta"]
            streamed = stream.get_final_completion()
    plan = parsed.choices[0].message.parsed
    assert isinstance(plan, Plan) and plan.steps and plan.priority in ("low", "high")
    content = parsed.choices[0].message.content
    assert content is not None and Plan.model_validate_json(content) == plan
    # streamed: the pieces are the same JSON, which the SDK parses to the same plan
    assert "".join(pieces) == content and len(pieces) > 1
    assert streamed.choices[0].message.parsed == plan
    # recorded like any answer: four characters of JSON a completion token
    row = _row(bare, raw.headers["x-sessionwarden-call-id"])
    assert row["output_tokens"] == math.ceil(len(content) / 4)


def test_a_json_object_answer_and_openais_checks_of_it(bare: Daemon) -> None:
    asked: list[Any] = [{"role": "user", "content": "Answer in JSON, please."}]
    with bare.openai(session="json") as client:
        answer = client.chat.completions.create(model="sim/chat", messages=asked,
                                                response_format={"type": "json_object"})
        # as OpenAI: json_object needs the word in the messages; a bad shape is a 400
        with pytest.raises(openai.BadRequestError, match="must contain the word 'json'"):
            client.chat.completions.create(model="sim/chat", messages=ASK,
                                           response_format={"type": "json_object"})
        schemaless: Any = {"type": "json_schema"}
        with pytest.raises(openai.BadRequestError, match=r"response_format\.json_schema"):
            client.chat.completions.create(model="sim/chat", messages=ASK,
                                           response_format=schemaless)
    content = answer.choices[0].message.content
    assert content is not None and isinstance(json.loads(content)["answer"], str)


def test_sim_chat_costs_nothing(bare: Daemon) -> None:
    with bare.openai(session="free") as client:
        free = client.chat.completions.with_raw_response.create(model="sim/chat",
                                                                messages=ASK)
    row = _row(bare, free.headers["x-sessionwarden-call-id"])
    assert (row["cost"], row["cost_status"]) == ("0", "included")


def test_sim_priced_costs_its_documented_price_and_a_spend_cap_trips_on_it(
    bare: Daemon,
) -> None:
    with bare.http() as http:
        capped = http.put("/v1/sessions/capped/budget", json={"session_usd": "0.001"})
        assert capped.status_code == 200
    with bare.openai(session="capped") as client:
        raw = client.chat.completions.with_raw_response.create(
            model="sim/priced", messages=ASK, max_tokens=100)
        # sim/priced-<model> plays <model>, at the same price
        agent = client.chat.completions.create(model="sim/priced-agent", messages=ASK,
                                               tools=TOOLS, max_tokens=10)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="sim/priced", messages=ASK, max_tokens=100)
    assert agent.choices[0].finish_reason == "tool_calls"
    row = _row(bare, raw.headers["x-sessionwarden-call-id"])
    assert SIM_PRICE.input is not None and SIM_PRICE.output is not None
    cost = (row["input_tokens"] * SIM_PRICE.input
            + row["output_tokens"] * SIM_PRICE.output).scaleb(-6)
    assert (row["model"], row["cost_status"], Decimal(row["cost"])) == (
        "priced", "actual", cost)
    assert cost > 0
    # its worst case no longer fits what is left of the cap: refused, unsent
    assert refused.value.status_code == 402
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "cap_exhausted"
    assert "the session cap of session capped" in error["message"]
    # ...and `usage` shows the session's exact cost: its two calls, both priced
    rows = [r for r in bare.ledger().values() if r["session_id"] == "capped"]
    assert [(r["model"], r["cost_status"]) for r in rows] == [
        ("priced", "actual"), ("priced-agent", "actual")]
    [session] = [s for s in json.loads(bare.cli("usage", "--json").stdout)
                 if s["session"] == "capped"]
    assert (session["session"], session["cost_status"]) == ("capped", "actual")
    assert Decimal(session["cost"]) == sum(Decimal(r["cost"]) for r in rows) > cost


@pytest.mark.parametrize(("model", "error_class", "retries"), [
    ("sim/error-429", "rate_limit", 0),
    ("sim/error-500", "server_error", 2),
])
def test_a_sim_error_answer_is_judged_as_a_real_providers_is(
    bare: Daemon, model: str, error_class: str, retries: int,
) -> None:
    with bare.openai(session=f"errors-{error_class}") as client, \
            pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model=model, messages=ASK)
    status = int(model.rpartition("-")[2])
    assert failed.value.status_code == status
    assert failed.value.response.headers["x-sessionwarden-error-class"] == error_class
    call_id = failed.value.response.headers["x-sessionwarden-call-id"]
    [completion] = [c for c in bare.completions() if c["call_id"] == call_id]
    assert (completion["status"], completion["error_class"]) == (status, error_class)
    # a server error is retried, as a real one is; nothing of a key was recorded
    assert [a.status for a in completion["attempts"]] == [status] * retries
    assert bare.query("SELECT count(*) FROM view_credentials") == [(0,)]
