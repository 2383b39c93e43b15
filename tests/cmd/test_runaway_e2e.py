"""Runaway protection end to end: the ``openai`` SDK as an agent running real shell commands.

An in-process daemon; the fake provider as a scripted model that calls the tools the test
scripts (``tool_arguments``) and honours ``tool_choice: "none"`` as real providers do; a
small agent loop that runs each call for real (``sh -c`` in a temporary directory) and
sends the results back. What the fake received is what the daemon forwarded.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, GuardrailTripped, IterationCounted

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.support.fake_provider import FakeProviderServer, RecordedRequest

SHELL = {"type": "function", "function": {
    "name": "shell", "description": "Run a shell command in the project directory.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
READ = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the project.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
NOTICE = "[sessionwarden runtime notice"


def run_tool(name: str, arguments: dict[str, Any], cwd: Path) -> str:
    """Run one tool call for real: a shell command, or a file read."""
    if name == "read_file":
        try:
            return (cwd / arguments["path"]).read_text()
        except OSError as exc:
            return f"Error: {exc}"
    done = subprocess.run(["sh", "-c", arguments["command"]], cwd=cwd, capture_output=True,
                          text=True, timeout=30, check=False)
    return json.dumps({"exit_code": done.returncode, "output": done.stdout + done.stderr})


class Agent:
    """A minimal tool loop on the daemon: call, run the tools, send their results back."""

    def __init__(self, daemon: InProcessDaemon, cwd: Path, session: str,
                 parent: str | None = None, parent_once: bool = False) -> None:
        headers = {"X-Session-Parent": parent} if parent else {}
        self.parent_once = parent_once
        self.client = daemon.openai(session=session)
        self.headers = headers
        self.cwd = cwd
        self.messages: list[dict[str, Any]] = []
        self.answers: list[tuple[httpx.Headers, Any]] = []

    def ask(self, prompt: str, calls: int) -> None:
        """A new user message, then up to ``calls`` calls while the model calls tools."""
        self.messages.append({"role": "user", "content": prompt})
        for _ in range(calls):
            if not self.call():
                return

    def call(self) -> bool:
        """One call; whether the model called a tool (its results are appended)."""
        raw = self.client.chat.completions.with_raw_response.create(
            model=MODEL, messages=self.messages, tools=[SHELL, READ],  # type: ignore[arg-type]
            extra_headers=self.headers)
        completion = raw.parse()
        if self.parent_once:  # named on the first call only: the log remembers it
            self.headers = {}
        self.answers.append((raw.headers, completion))
        message = completion.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for tool_call in message.tool_calls or ():
            arguments = json.loads(tool_call.function.arguments)
            self.messages.append({"role": "tool", "tool_call_id": tool_call.id,
                                  "content": run_tool(tool_call.function.name, arguments,
                                                      self.cwd)})
        return bool(message.tool_calls)


def upstream(fake: FakeProviderServer) -> list[RecordedRequest]:
    return [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def script(fake: FakeProviderServer, calls: list[dict[str, Any]]) -> None:
    """The fake model's tool calls, in order (``"tool"`` names the tool; default shell)."""
    fake.state.by_model[MODEL] = {"tool_arguments": calls}


def daemon_with(made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
                config: str) -> InProcessDaemon:
    return start_made(made, tmp_path, fake, config)


# --------------------------------------------------------------- the iteration budget


def test_a_budget_of_three_forwards_three_then_a_grace_call_then_answers_itself(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 3\n")
    script(fake, [{"command": f"echo step {n}"} for n in range(10)])
    agent = Agent(daemon, tmp_path, "budget")
    agent.ask("Run the steps, one by one.", calls=10)
    sent = upstream(fake)
    # Three calls as the client sent them, the fourth with tools disabled and the notice:
    # the fake honours tool_choice none, so the model answers and the loop ends.
    assert len(sent) == 4 and len(agent.answers) == 4
    for request in sent[:3]:
        assert "tool_choice" not in request.body
        assert all(NOTICE not in json.dumps(m) for m in request.body["messages"])
    grace = sent[3].body
    assert grace["tool_choice"] == "none" and len(grace["tools"]) == 2
    assert grace["messages"][-1]["role"] == "user"
    assert grace["messages"][-1]["content"].startswith(NOTICE)
    assert "wrap up" in grace["messages"][-1]["content"].lower()
    assert agent.answers[3][1].choices[0].finish_reason == "stop"
    # An agent that goes on in the same turn is answered by the daemon, nothing sent.
    agent.call()
    headers, answered = agent.answers[4]
    assert len(upstream(fake)) == 4
    assert headers["x-sessionwarden-refused"] == "iteration_budget"
    assert answered.choices[0].finish_reason == "stop"
    assert not answered.choices[0].message.tool_calls
    assert "max_iterations" in answered.choices[0].message.content
    # A new user message is a new turn: a fresh budget, forwarded as sent.
    agent.ask("Now the next task.", calls=1)
    assert len(upstream(fake)) == 5 and "tool_choice" not in upstream(fake)[4].body
    counted = [e for e in events(daemon, "budget") if isinstance(e, IterationCounted)]
    assert [(e.used, e.decision) for e in counted] == [
        (1, "forward"), (2, "forward"), (3, "forward"), (4, "grace"), (5, "answer"),
        (1, "forward")]
    # The answered call has its ledger row: no upstream, no cost.
    rows = daemon.rows("SELECT outcome, cost, input_tokens FROM view_ledger "
                       "WHERE session_id = 'budget' ORDER BY seq")
    assert rows[4] == ("answered", "0", 0)


def test_a_retry_of_the_same_call_is_not_counted_twice(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 2\n")
    client = daemon.openai(session="retry")
    messages = [{"role": "user", "content": "hello"}]
    for _ in range(3):  # the client retries the very same call
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    counted = [e for e in events(daemon, "retry") if isinstance(e, IterationCounted)]
    assert [e.used for e in counted] == [1]
    assert all("tool_choice" not in r.body for r in upstream(fake))


def test_on_exhausted_error_answers_429_with_its_code(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake,
                         '[budgets]\nmax_iterations = 1\non_exhausted = "error"\n')
    script(fake, [{"command": "true"}] * 5)
    agent = Agent(daemon, tmp_path, "strict")
    agent.ask("go", calls=2)  # the first call, then the grace call
    with pytest.raises(openai.RateLimitError) as refused:
        agent.call()
    assert refused.value.code == "iteration_budget_exhausted"
    assert refused.value.response.headers["x-sessionwarden-refused"] == "iteration_budget"
    assert len(upstream(fake)) == 2


def test_a_child_session_is_bounded_by_its_own_budget_and_counts_in_its_parent(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake,
                         "[budgets]\nmax_iterations = 4\nchild_max_iterations = 2\n")
    script(fake, [{"command": "true"}] * 10)
    parent = Agent(daemon, tmp_path, "lead")
    parent.ask("Delegate the work.", calls=1)
    child = Agent(daemon, tmp_path, "lead.sub1", parent="lead", parent_once=True)
    child.ask("Do the delegated part.", calls=10)
    # Two calls, the grace call, then the loop ends (the fake honours tool_choice none).
    assert [(e.used, e.decision) for e in events(daemon, "lead.sub1")
            if isinstance(e, IterationCounted)] == [(1, "forward"), (2, "forward"),
                                                    (3, "grace")]
    # The child's three calls count in the parent's turn: 1 + 3 of its 4.
    turn = [e for e in events(daemon, "lead") if isinstance(e, IterationCounted)]
    assert turn[-1].used == 4 and turn[-1].child == "lead.sub1"
    # Its parent's turn spent, a second child is wound down at once.
    other = Agent(daemon, tmp_path, "lead.sub2", parent="lead")
    other.ask("Another part.", calls=1)
    assert upstream(fake)[-1].body["tool_choice"] == "none"


def test_the_control_api_consumes_and_refunds_iterations(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 5\n")
    daemon.openai(session="ctl").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}])
    url = f"http://127.0.0.1:{daemon.port}/v1/sessions/ctl/iterations"
    auth = {"authorization": f"Bearer {daemon.token}"}
    consumed = httpx.post(url, json={"consume": 3}, headers=auth)
    assert consumed.status_code == 200
    assert consumed.json() == {"session_id": "ctl", "used": 4, "budget": 5, "remaining": 1}
    refunded = httpx.post(url, json={"refund": 10}, headers=auth)
    assert refunded.json()["used"] == 0  # never below zero
    assert httpx.post(url, json={"consume": -1}, headers=auth).status_code == 400
    assert httpx.post(url, json={"spend": 1}, headers=auth).status_code == 400
    missing = httpx.post(url.replace("/ctl/", "/nobody/"), json={"consume": 1}, headers=auth)
    assert missing.status_code == 404


# ------------------------------------------------------------------ the guardrails


def guard_events(daemon: InProcessDaemon, session: str) -> list[GuardrailTripped]:
    return [e for e in events(daemon, session) if isinstance(e, GuardrailTripped)]


@pytest.mark.parametrize("hard_stop", [False, True])
def test_the_same_failing_command_is_warned_from_the_second_and_stopped_only_if_asked(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer, hard_stop: bool
) -> None:
    config = "[guardrails]\nhard_stop = true\n" if hard_stop else ""
    daemon = daemon_with(made, tmp_path, fake, config)
    script(fake, [{"command": "ls missing-dir"}] * 6)
    agent = Agent(daemon, tmp_path, "fails")
    agent.ask("List the build output.", calls=7)
    sent = upstream(fake)
    # The second result of the same failure is the first the model is warned about.
    warned = [i for i, r in enumerate(sent) if NOTICE in json.dumps(r.body["messages"][-1])]
    assert warned[0] == 2
    exact = [e for e in guard_events(daemon, "fails") if e.rule == "exact_failure"]
    assert exact and exact[0].count == 2 and exact[0].tool == "shell"
    assert len(exact[0].signature) == 64 and "missing" not in exact[0].signature
    stops = [e for e in guard_events(daemon, "fails") if e.stopped]
    if hard_stop:
        # The call carrying the fifth failure is answered by the daemon, not sent.
        assert len(sent) == 5 and stops[0].rule == "exact_failure" and stops[0].count == 5
        headers, answered = agent.answers[-1]
        assert headers["x-sessionwarden-refused"] == "guardrail"
        assert "exact_failure" in answered.choices[0].message.content
    else:
        assert not stops and len(sent) == 7


def test_an_a_b_a_b_cycle_is_warned(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "")
    (tmp_path / "a.txt").write_text("alpha\n")
    script(fake, [{"tool": "read_file", "path": "a.txt"}, {"command": "echo beta"}] * 4)
    agent = Agent(daemon, tmp_path, "cycle")
    agent.ask("Compare them.", calls=9)
    rules = {e.rule for e in guard_events(daemon, "cycle")}
    assert "cycle" in rules
    assert any("read_file" in json.dumps(r.body["messages"][-1]) and
               NOTICE in json.dumps(r.body["messages"][-1]) for r in upstream(fake))


def test_a_fix_and_retest_loop_and_distinct_failures_are_never_stopped(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[guardrails]\nhard_stop = true\n")
    (tmp_path / "test.sh").write_text("grep -q fixed code.txt\n")
    (tmp_path / "code.txt").write_text("broken\n")
    rounds = [[{"command": "sh test.sh"}, {"command": f"echo attempt {n} >> code.txt"}]
              for n in range(12)]
    script(fake, [call for pair in rounds for call in pair])
    agent = Agent(daemon, tmp_path, "fixing")
    agent.ask("Make the test pass.", calls=30)
    assert len(upstream(fake)) == 25  # every call forwarded: 24 tool rounds, the answer
    assert not [e for e in guard_events(daemon, "fixing") if e.stopped]
    fake.state.rounds.clear()
    script(fake, [{"command": f"grep -r needle{n} ."} for n in range(12)])
    explorer = Agent(daemon, tmp_path, "explore")
    explorer.ask("Find the needle.", calls=20)
    assert not [e for e in guard_events(daemon, "explore") if e.stopped]
    assert len(explorer.answers) == 13


def test_the_web_search_cap_stops_the_turn_past_it(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[guardrails]\nmax_web_searches = 3\n")
    script(fake, [{"tool": "web_search", "command": f"query {n}"} for n in range(6)])
    agent = Agent(daemon, tmp_path, "searching")
    search = {"type": "function", "function": {"name": "web_search", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}
    agent.messages.append({"role": "user", "content": "Research it."})
    for _ in range(6):
        raw = agent.client.chat.completions.with_raw_response.create(
            model=MODEL, messages=agent.messages, tools=[search])  # type: ignore[list-item]
        message = raw.parse().choices[0].message
        agent.answers.append((raw.headers, raw.parse()))
        agent.messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            agent.messages.append({"role": "tool", "tool_call_id": call.id,
                                   "content": f"results for {call.function.arguments}"})
    stops = [e for e in guard_events(daemon, "searching") if e.stopped]
    assert stops and stops[0].rule == "web_search_cap"
    assert agent.answers[-1][0]["x-sessionwarden-refused"] == "guardrail"
    assert len(upstream(fake)) == 4


def test_status_shows_the_turn_the_warnings_and_the_stop(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 3\n")
    script(fake, [{"command": "ls missing-dir"}] * 10)
    agent = Agent(daemon, tmp_path, "seen")
    agent.ask("List it.", calls=10)
    agent.call()
    capsys.readouterr()
    assert main(["status", "--db", str(daemon.db), "--session", "seen"]) == 0
    text = capsys.readouterr().out
    assert "turn: 5 iterations of 3; grace call" in text
    assert "guardrail warnings: exact_failure" in text
    assert "answered by sessionwarden (iteration_budget)" in text
    assert main(["status", "--db", str(daemon.db), "--session", "seen", "--json"]) == 0
    runaway = json.loads(capsys.readouterr().out)["runaway"]
    assert runaway["iterations"] == 5 and runaway["budget"] == 3
    assert runaway["stopped_by"] == "iteration_budget"


# --------------------------------------------------------------- a real agent framework


@pytest.mark.parametrize("obeys", [True, False])
def test_the_agents_sdk_is_warned_then_wound_down_and_ends_its_run_cleanly(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer, obeys: bool
) -> None:
    """A build tool that always fails: warnings, the grace call, and a clean end.

    A model that obeys ``tool_choice: "none"`` answers the grace call in text; one that
    does not gets its next call answered by the daemon. Either way the run ends normally.
    """
    import asyncio

    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 4\n")
    fake.state.by_model[MODEL] = {"tool_arguments": [{"command": "make -C missing"}] * 20,
                                  "ignore_tool_choice": not obeys}
    set_tracing_disabled(True)  # no trace export to OpenAI's servers

    def run_build(command: str) -> str:
        """Run the project's build command."""
        return run_tool("shell", {"command": command}, tmp_path)

    async def run() -> str:
        sdk = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{daemon.port}/v1",
                                 api_key=daemon.token, max_retries=0,
                                 default_headers={"X-Session-Id": "sdk"})
        agent = SdkAgent(name="builder", tools=[function_tool(run_build)],
                         model=OpenAIChatCompletionsModel(model=MODEL, openai_client=sdk),
                         instructions="Build the project.")
        result = await Runner.run(agent, "Build it.", max_turns=20)
        return str(result.final_output)

    final = asyncio.run(run())
    sent = upstream(fake)
    assert len(sent) == 5 and sent[4].body["tool_choice"] == "none"
    notices = [m["content"] for r in sent[:4] for m in r.body["messages"]
               if m["role"] == "user" and m["content"].startswith(NOTICE)]
    assert notices and "run_build" in notices[0]  # warned before the grace call
    counted = [e for e in events(daemon, "sdk") if isinstance(e, IterationCounted)]
    if obeys:
        assert final.startswith("ok: ") and counted[-1].decision == "grace"
    else:
        assert "iteration budget" in final and counted[-1].decision == "answer"
    assert len(counted) == (5 if obeys else 6)  # no retry storm: one call each


# ------------------------------------------------------------ the other doors


ANT = """
[budgets]
max_iterations = 2
[[providers]]
name = "ant"
base_url = "{base}"
api_mode = "anthropic_messages"
keys = ["env:FAKE_KEY_A"]
[[models]]
name = "claude-agent-40"
provider = "ant"
context_length = 200000
"""


def test_a_streaming_messages_agent_gets_its_grace_call_then_an_anthropic_answer(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    import anthropic

    daemon = daemon_with(made, tmp_path, fake, ANT.replace("{base}", fake.base_url))
    sdk = anthropic.Anthropic(base_url=f"http://127.0.0.1:{daemon.port}",
                              api_key=daemon.token, max_retries=0,
                              default_headers={"X-Session-Id": "ant"})
    read = {"name": "Read", "description": "Read a file", "input_schema": {
        "type": "object", "required": ["file_path"],
        "properties": {"file_path": {"type": "string"}}}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the notes."}]
    finals = []
    for _ in range(4):
        with sdk.messages.stream(model="claude-agent-40", max_tokens=200, tools=[read],
                                 messages=messages) as stream:  # type: ignore[arg-type]
            final = stream.get_final_message()
            headers = stream.response.headers
        finals.append((headers, final))
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in final.content]})
        uses = [b for b in final.content if b.type == "tool_use"]
        if not uses:
            break
        results = []
        for use in uses:  # really read the file: it is not there, so the tool fails
            path = tmp_path / str(use.input["file_path"])  # type: ignore[index]
            try:
                results.append({"type": "tool_result", "tool_use_id": use.id,
                                "content": path.read_text()})
            except OSError as exc:
                results.append({"type": "tool_result", "tool_use_id": use.id,
                                "content": f"Error: {exc}", "is_error": True})
        messages.append({"role": "user", "content": results})
    sent = [r.body for r in fake.state.snapshot() if r.path.startswith("/v1/messages")]
    # Two calls as sent, then the grace call: tools off in Anthropic's words, tools kept.
    assert len(sent) == 3 and "tool_choice" not in sent[0] and "tool_choice" not in sent[1]
    assert sent[2]["tool_choice"] == {"type": "none"} and sent[2]["tools"] == [read]
    notice = sent[2]["messages"][-1]
    assert notice["role"] == "user" and NOTICE in json.dumps(notice)
    assert finals[-1][1].stop_reason == "end_turn"
    # The agent calls again in the same turn: the daemon answers, in Anthropic's stream.
    with sdk.messages.stream(model="claude-agent-40", max_tokens=200, tools=[read],
                             messages=messages) as stream:  # type: ignore[arg-type]
        answered = stream.get_final_message()
        assert stream.response.headers["x-sessionwarden-refused"] == "iteration_budget"
    assert answered.stop_reason == "end_turn" and "iteration budget" in json.dumps(
        answered.model_dump())
    assert len([r for r in fake.state.snapshot() if r.path.startswith("/v1/messages")]) == 3


def test_a_daemon_answer_streams_as_chat_chunks(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, "[budgets]\nmax_iterations = 1\n")
    script(fake, [{"command": "true"}] * 5)
    agent = Agent(daemon, tmp_path, "streamed")
    agent.ask("go", calls=2)  # the first call, then the grace call
    # The same turn goes on (no new user message), streamed: answered in chunks.
    chunks = list(agent.client.chat.completions.create(
        model=MODEL, messages=agent.messages, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith(NOTICE)
    assert chunks[-1].choices[0].finish_reason == "stop" and len(upstream(fake)) == 2


RSP = """
[budgets]
max_iterations = 1
[[providers]]
name = "rsp"
base_url = "{base}"
api_mode = "codex_responses"
keys = ["env:FAKE_KEY_A"]
[[models]]
name = "gpt-agent-10"
provider = "rsp"
context_length = 200000
"""


def test_a_responses_agent_gets_its_grace_call_then_a_responses_answer(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = daemon_with(made, tmp_path, fake, RSP.replace("{base}", fake.base_url))
    sdk = daemon.openai(session="rsp")
    shell = {"type": "function", "name": "shell", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}
    items: list[Any] = [{"type": "message", "role": "user", "content": "Build it."}]
    for _ in range(3):
        raw = sdk.responses.with_raw_response.create(
            model="gpt-agent-10", input=items, tools=[shell], store=False)  # type: ignore[arg-type]
        response = raw.parse()
        items += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        for call in calls:
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": run_tool("shell", json.loads(call.arguments), tmp_path)})
        if not calls:
            break
    sent = [r.body for r in fake.state.snapshot() if r.path == "/v1/responses"]
    assert len(sent) == 2 and "tool_choice" not in sent[0]
    assert sent[1]["tool_choice"] == "none" and sent[1]["tools"] == [shell]
    assert NOTICE in json.dumps(sent[1]["input"][-1])
    raw = sdk.responses.with_raw_response.create(
        model="gpt-agent-10", input=items, tools=[shell], store=False)  # type: ignore[arg-type]
    assert raw.headers["x-sessionwarden-refused"] == "iteration_budget"
    assert raw.parse().status == "completed" and "iteration budget" in raw.parse().output_text
    assert len([r for r in fake.state.snapshot() if r.path == "/v1/responses"]) == 2
