"""Real agent frameworks through the daemon, running a real tool on real files (issue 20).

The OpenAI Agents SDK and Pydantic AI, each pointed at an in-process daemon as a user
would (an ``AsyncOpenAI`` client on the daemon's ``/v1``, the session named by a header),
run an agent whose ``read_file`` tool reads a real 40-120 KB source file per round. The
fake upstream plays the model (it asks for the next file until the list is done) and,
like a real provider, answers a prompt over the 128K window with a context-length 400.

What must hold: the run ends normally; the session is compressed as often as it needs
(effective compressions are never rationed); no forwarded request is over the window, so
the upstream never says "too long"; the log verifies. The runs are the issue's: 40 rounds
(Agents SDK) and 30 (Pydantic AI), about 2 s each.
"""

import asyncio
import itertools
from pathlib import Path

import httpx
import openai
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, CallAdmitted, ContextCompressed

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

WINDOW_CHARS = 128_000 * 4  # the fake counts 4 characters a token, like its usage block


def source_files(count: int) -> list[Path]:
    """``count`` real source files of 40-120 KB, from the installed packages, in a fixed order."""
    root = Path(openai.__file__).resolve().parent.parent  # site-packages
    found: list[Path] = []
    for package in ("openai", "pydantic", "aiohttp", "hypothesis", "apsw", "agents",
                    "pydantic_ai", "httpx", "uvicorn", "starlette", "mypy"):
        for path in sorted((root / package).rglob("*.py")):
            if 40_000 <= path.stat().st_size <= 120_000:
                found.append(path)
            if len(found) == count:
                return found
    raise AssertionError(f"only {len(found)} source files of 40-120 KB installed")


def read_file(path: str) -> str:
    """Read a UTF-8 text file from disk (the tool both frameworks run)."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def steer(fake: FakeProviderServer, files: list[Path]) -> None:
    fake.state.by_model[MODEL] = {"tool_paths": [str(f) for f in files],
                                  "max_prompt_chars": WINDOW_CHARS}


def client(daemon: InProcessDaemon, session: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{daemon.port}/v1",
                              api_key=daemon.token, max_retries=0,
                              default_headers={"X-Session-Id": session},
                              http_client=httpx.AsyncClient(timeout=60))


def check_governed(daemon: InProcessDaemon, fake: FakeProviderServer, session: str,
                   rounds: int) -> int:
    """The session's compressions; asserts nothing forwarded was over the window."""
    sent = [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]
    assert len(sent) == rounds + 1  # one call per tool round, then the final answer
    assert fake.state.counters["too_long"] == 0
    largest = max(sum(len(m.get("content") or "") for m in r.body["messages"]) for r in sent)
    assert largest <= WINDOW_CHARS
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    assert sum(isinstance(e, CallAdmitted) for e in events) == rounds + 1
    compressions = sum(isinstance(e, ContextCompressed) for e in events)
    return compressions


def verified(daemon: InProcessDaemon) -> None:
    daemon.stop()
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0


def run_agents_sdk(daemon: InProcessDaemon, files: list[Path], session: str) -> str:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # no trace export to OpenAI's servers

    async def main() -> str:
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client(daemon, session))
        agent = Agent(name="reader", model=model, tools=[function_tool(read_file)],
                      instructions="Read the files you are asked to, one at a time.")
        result = await Runner.run(agent, "Read every file of the list and summarise them.",
                                  max_turns=len(files) + 5)
        return str(result.final_output)

    return asyncio.run(main())


def run_pydantic_ai(daemon: InProcessDaemon, files: list[Path], session: str) -> str:
    from pydantic_ai import Agent, UsageLimits
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def main() -> str:
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(
            openai_client=client(daemon, session)))
        agent = Agent(model, tools=[read_file],
                      instructions="Read the files you are asked to, one at a time.")
        result = await agent.run("Read every file of the list and summarise them.",
                                 usage_limits=UsageLimits(request_limit=len(files) + 5))
        return str(result.output)

    return asyncio.run(main())


def play(run: str, rounds: int, tmp_path: Path, fake: FakeProviderServer) -> None:
    files = source_files(rounds)
    steer(fake, files)
    # A client resends its whole history: the daemon's default body limit (32 MiB).
    daemon = InProcessDaemon(tmp_path / "events.db", fake, max_body_bytes=32 << 20).start()
    try:
        runner = run_agents_sdk if run == "agents-sdk" else run_pydantic_ai
        answer = runner(daemon, files, run)
        assert answer.startswith("ok: ")  # the fake's final text: the run ended normally
        compressions = check_governed(daemon, fake, run, rounds)
        total = sum(f.stat().st_size for f in files)
        # Each compression brings the prompt from the 64K-token trigger down to about a
        # third of it: reading ~total/4 tokens needs about one per 40K tokens read.
        assert compressions >= total // 4 // 64_000, (compressions, total)
    finally:
        daemon.stop()
    verified(daemon)


@pytest.mark.parametrize(("run", "rounds"), [("agents-sdk", 40), ("pydantic-ai", 30)])
def test_an_agent_reading_large_files_stays_inside_its_window(
    run: str, rounds: int, tmp_path: Path, fake: FakeProviderServer
) -> None:
    play(run, rounds, tmp_path, fake)


def test_a_sim_agent_ends_its_turns_though_its_history_was_compressed(tmp_path: Path,
                                                                     fake: FakeProviderServer
                                                                     ) -> None:
    # sim/agent-32 calls a tool 32 times after the newest request, then answers. The
    # summary used to be taken for that request (a user message): the count restarted at
    # each compression and the run ended in MaxTurnsExceeded.
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    files = itertools.cycle(source_files(40))

    def read_next_file() -> str:
        """Read the next source file of the project (a large tool log)."""
        return read_file(str(next(files)))

    daemon = InProcessDaemon(tmp_path / "events.db", fake, max_body_bytes=32 << 20).start()
    try:
        async def main() -> object:
            model = OpenAIChatCompletionsModel(model="sim/agent-32",
                                               openai_client=client(daemon, "sim-32"))
            agent = Agent(name="reader", model=model, tools=[function_tool(read_next_file)])
            return (await Runner.run(agent, "Read the sources.", max_turns=60)).final_output

        answer = asyncio.run(main())
        events = [CODEC.decode(e.type, e.data)
                  for e in daemon.runtime.log.read_stream("session-sim-32")]
    finally:
        daemon.stop()
    assert str(answer).startswith("(sim)")
    assert sum(isinstance(e, CallAdmitted) for e in events) == 33  # 32 tool turns, 1 answer
    assert sum(isinstance(e, ContextCompressed) for e in events) >= 2
