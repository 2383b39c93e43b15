"""The real agent CLIs through a ``sessionwarden daemon`` subprocess against the fake upstream.

Claude Code (``claude -p``, the Messages door) and Codex (``codex exec``, the Responses door)
each finish a multi-round shell-tool task: the fake's ``agent-N`` model calls the CLI's own
shell tool (``Bash``, ``exec_command``) N times, the CLI really runs the command
(``echo fake-tool-ran``) and sends its output back, then the fake answers with text. Each
run is under ``strace -f -e trace=connect``: every IP connect must be to 127.0.0.1.

The CLIs come from ``.ci/run`` (npm, pinned versions, into ``.clis/``); a test skips with
the tail of ``.clis/install.log`` when its CLI is missing, and when strace is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sessionwarden.events import CODEC

from tests.cmd.daemon_fixtures import Daemon, DaemonMaker, clean_env
from tests.support.fake_provider import FakeProviderServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLIS = ROOT / ".clis"
CLAUDE = CLIS / "node_modules" / ".bin" / "claude"
CODEX = CLIS / "node_modules" / ".bin" / "codex"
CLAUDE_MODEL = "claude-agent-3"
CODEX_MODEL = "gpt-agent-3"
TIMEOUT = 90
TASK = "Run `echo fake-tool-ran` in the shell, then say done."
_INET = re.compile(r'connect\(\d+, \{sa_family=AF_INET6?,[^}]*\}')
_ADDR = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def extra(fake: FakeProviderServer, head: str = "") -> str:
    """A Messages provider and a Responses provider on the fake, one agent model each."""
    return (
        f"{head}\n"
        "[[providers]]\n"
        'name = "ant"\n'
        f'base_url = "{fake.base_url}"\n'
        'api_mode = "anthropic_messages"\n'
        'keys = ["env:FAKE_KEY_A"]\n'
        "[[providers]]\n"
        'name = "oai"\n'
        f'base_url = "{fake.base_url}"\n'
        'api_mode = "codex_responses"\n'
        'keys = ["env:FAKE_KEY_B"]\n'
        "[[models]]\n"
        f'name = "{CLAUDE_MODEL}"\n'
        'provider = "ant"\n'
        "context_length = 200000\n"
        "[[models]]\n"
        f'name = "{CODEX_MODEL}"\n'
        'provider = "oai"\n'
        "context_length = 200000\n"
    )


def need(binary: Path) -> None:
    """Skip unless ``binary`` and strace are there (with npm's message when it is not)."""
    if not binary.exists():
        log = CLIS / "install.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else \
            "no .clis/install.log: run .ci/run (it installs the agent CLIs with npm)"
        pytest.skip(f"{binary.name} is not installed in .clis/:\n{tail}")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (.ci/run installs it with apt-get)")
    probe = subprocess.run(["strace", "-f", "-e", "trace=connect", "-o", os.devnull, "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:  # e.g. ptrace not permitted in this container
        pytest.skip(f"strace cannot trace here: {probe.stderr.strip()}")


def run_traced(cmd: list[str], env: dict[str, str], cwd: Path,
               trace: Path) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` under strace (connect calls to ``trace``), stdin closed, with a timeout."""
    return subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *cmd],
        env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=TIMEOUT,
    )


def ip_connects(trace: Path) -> list[str]:
    """The addresses of every AF_INET/AF_INET6 connect in an strace log."""
    found = []
    for call in _INET.findall(trace.read_text(errors="replace")):
        match = _ADDR.search(call)
        found.append((match.group(1) or match.group(2)) if match else call)
    return found


def assert_local_only(trace: Path) -> None:
    """Something was connected to, and only ever 127.0.0.1."""
    addrs = ip_connects(trace)
    assert addrs, trace.read_text(errors="replace")[-3000:]
    assert set(addrs) == {"127.0.0.1"}, addrs


def usage_of(daemon: Daemon, session: str) -> dict[str, Any]:
    """``usage --session`` of one session as JSON (one row)."""
    rows = json.loads(daemon.cli("usage", "--session", session, "--json").stdout)
    assert len(rows) == 1, rows
    row: dict[str, Any] = rows[0]
    return row


def upstream_bodies(fake: FakeProviderServer, path: str) -> list[Any]:
    """The bodies the fake received on ``path``."""
    return [r.body for r in fake.state.snapshot() if r.path == path]


def workdirs(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh HOME and working directory for one CLI run."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def run_claude(daemon: Daemon, tmp_path: Path, model: str = CLAUDE_MODEL
               ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``claude -p TASK`` at the daemon, headless and traced; its result and strace log."""
    home, work = workdirs(tmp_path)
    env = clean_env() | {
        "HOME": str(home), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{daemon.port}",
        "ANTHROPIC_API_KEY": daemon.token, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    trace = tmp_path / "claude.strace"
    result = run_traced([str(CLAUDE), "-p", TASK, "--output-format", "json",
                         "--allowedTools", "Bash", "--model", model], env, work, trace)
    assert result.returncode == 0, (result.stdout, result.stderr, daemon.stderr())
    return result, trace


def run_codex(daemon: Daemon, tmp_path: Path, model: str = CODEX_MODEL
              ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``codex exec TASK`` at the daemon, stdin closed and traced; its result and log."""
    home, work = workdirs(tmp_path)
    env = clean_env() | {
        "HOME": str(home), "CODEX_HOME": str(codex_home(tmp_path / "codex", daemon, model)),
        "SW_KEY": daemon.token,
    }
    trace = tmp_path / "codex.strace"
    result = run_traced([str(CODEX), "exec", "--skip-git-repo-check", "--json", TASK],
                        env, work, trace)
    assert result.returncode == 0, (result.stdout, result.stderr, daemon.stderr())
    return result, trace


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a Messages body's user messages."""
    return [block for message in body["messages"] if message["role"] == "user"
            and isinstance(message["content"], list) for block in message["content"]
            if block.get("type") == "tool_result"]


def test_claude_code_runs_bash_rounds_through_the_daemon(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CLAUDE)
    # Claude Code would pick its first tool (Task/Agent); the shell is what is tested.
    fake.state.by_model[CLAUDE_MODEL] = {"tool_name": "Bash"}
    daemon = daemon_factory(extra_config=extra(fake)).start()
    result, trace = run_claude(daemon, tmp_path)
    answer = json.loads(result.stdout)
    assert answer["subtype"] == "success" and answer["is_error"] is False, answer
    assert answer["num_turns"] == 4, answer

    bodies = upstream_bodies(fake, "/v1/messages")
    assert len(bodies) == 4, [b.get("model") for b in bodies]
    outputs = tool_results(bodies[-1])
    assert len(outputs) == 3, outputs
    for block in outputs:  # the command's output, not its text: Bash really ran it
        text = json.dumps(block["content"])
        assert "fake-tool-ran" in text and "echo" not in text, block
        assert block.get("is_error") is not True, block

    session = answer["session_id"]
    row = usage_of(daemon, session)
    assert row["requests"] == 4, row
    assert_local_only(trace)


def codex_home(path: Path, daemon: Daemon, model: str = CODEX_MODEL) -> Path:
    """A CODEX_HOME whose config.toml points Codex at the daemon, nothing else on."""
    path.mkdir()
    (path / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "sw"\n'
        "check_for_update_on_startup = false\n"
        "[analytics]\nenabled = false\n"
        "[feedback]\nenabled = false\n"
        '[otel]\nexporter = "none"\nmetrics_exporter = "none"\ntrace_exporter = "none"\n'
        "[features]\nplugins = false\n"
        "[model_providers.sw]\n"
        'name = "sw"\n'
        f'base_url = "{daemon.base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "SW_KEY"\n'
    )
    return path


def test_codex_runs_exec_command_rounds_through_the_daemon(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CODEX)
    fake.state.by_model[CODEX_MODEL] = {"tool_name": "exec_command"}
    daemon = daemon_factory(extra_config=extra(fake)).start()
    result, trace = run_codex(daemon, tmp_path)
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    kinds = [e.get("type") for e in events]
    assert "turn.completed" in kinds, (kinds, result.stderr)
    thread = next(e["thread_id"] for e in events if e.get("type") == "thread.started")

    bodies = upstream_bodies(fake, "/v1/responses")
    assert len(bodies) == 4, [b.get("model") for b in bodies]
    outputs = [item for item in bodies[-1]["input"]
               if item.get("type") == "function_call_output"]
    assert len(outputs) == 3, outputs
    for item in outputs:  # the command's output: exec_command really ran it
        assert "fake-tool-ran" in json.dumps(item["output"]), item

    rows = json.loads(daemon.cli("usage", "--json").stdout)
    assert sum(r["requests"] for r in rows) == 4, rows
    assert any(thread in json.dumps(r) for r in rows), (thread, rows)
    assert_local_only(trace)



def test_claude_code_bash_output_over_the_limit_is_spilled(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CLAUDE)
    # ~29 KB of output a round (Claude Code keeps at most 30000 characters of it), over
    # the daemon's 4000-character limit for one tool result
    fake.state.by_model[CLAUDE_MODEL] = {"tool_name": "Bash", "tool_command": "seq 1 6000"}
    daemon = daemon_factory(
        extra_config=extra(fake, "[tools]\nresult_size_chars = 4000\n")).start()
    result, trace = run_claude(daemon, tmp_path)
    answer = json.loads(result.stdout)
    assert answer["subtype"] == "success" and answer["num_turns"] == 4, answer
    bodies = upstream_bodies(fake, "/v1/messages")
    outputs = tool_results(bodies[-1])
    assert len(outputs) == 3, outputs
    for block in outputs:  # a preview and the file's path went upstream, not the output
        text = block["content"] if isinstance(block["content"], str) else \
            json.dumps(block["content"])
        assert "saved this tool result to a file" in text and len(text) < 4000, text[:500]
        path = Path(re.search(r"Full output: (\S+)", text).group(1))  # type: ignore[union-attr]
        assert path.read_text().startswith("1\n2\n3\n") and path.stat().st_size > 20000
    assert_local_only(trace)


def resets(daemon: Daemon) -> list[str]:
    """The reasons of the daemon's ``context.history_reset`` events, oldest first."""
    return [msgspec.structs.asdict(CODEC.decode(kind, bytes(data)))["reason"]
            for kind, data in daemon.query("SELECT type, data FROM events ORDER BY seq")
            if kind.startswith("context.history_reset")]


def test_claude_code_history_is_recognised_from_round_to_round(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CLAUDE)
    fake.state.by_model[CLAUDE_MODEL] = {"tool_name": "Bash"}
    daemon = daemon_factory(extra_config=extra(fake)).start()
    run_claude(daemon, tmp_path)
    assert resets(daemon) == [], resets(daemon)


def test_codex_history_is_recognised_from_round_to_round(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CODEX)
    fake.state.by_model[CODEX_MODEL] = {"tool_name": "exec_command"}
    daemon = daemon_factory(extra_config=extra(fake)).start()
    run_codex(daemon, tmp_path)
    assert resets(daemon) == [], resets(daemon)


#: A budget of 3 and models that would call their shell twelve times (issue 25).
RUNAWAY = """
[budgets]
max_iterations = 3
[[models]]
name = "claude-agent-12"
provider = "ant"
context_length = 200000
[[models]]
name = "gpt-agent-12"
provider = "oai"
context_length = 200000
"""


def test_claude_code_is_warned_then_wound_down_by_the_grace_call(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CLAUDE)
    # A command that always fails: Claude Code reports it with is_error.
    fake.state.by_model["claude-agent-12"] = {"tool_name": "Bash",
                                              "tool_command": "ls /nonexistent-sw-dir"}
    daemon = daemon_factory(extra_config=extra(fake, RUNAWAY)).start()
    result, trace = run_claude(daemon, tmp_path, model="claude-agent-12")
    answer = json.loads(result.stdout)
    # The run ends as a success, in four calls: no crash, no retry storm.
    assert answer["subtype"] == "success" and answer["is_error"] is False, answer
    bodies = [b for b in upstream_bodies(fake, "/v1/messages")
              if b.get("model") == "claude-agent-12"]
    assert len(bodies) == 4, len(bodies)
    assert [b.get("tool_choice") for b in bodies][3] == {"type": "none"}
    assert bodies[3]["tools"], "the tools stay in place"
    warned = [b for b in bodies[:3] if "[sessionwarden runtime notice" in json.dumps(
        b["messages"][-1])]
    assert warned, "the repeated failure was warned before the grace call"
    status = daemon.cli("status", "--session", answer["session_id"]).stdout
    assert "turn: 4 iterations of 3; grace call" in status, status
    assert "guardrail warnings:" in status, status
    assert_local_only(trace)


def test_codex_is_warned_then_wound_down_by_the_grace_call(
        daemon_factory: DaemonMaker, fake: FakeProviderServer, tmp_path: Path) -> None:
    need(CODEX)
    fake.state.by_model["gpt-agent-12"] = {"tool_name": "exec_command",
                                           "tool_command": "ls /nonexistent-sw-dir"}
    daemon = daemon_factory(extra_config=extra(fake, RUNAWAY)).start()
    result, trace = run_codex(daemon, tmp_path, model="gpt-agent-12")
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert "turn.completed" in [e.get("type") for e in events], result.stderr
    bodies = [b for b in upstream_bodies(fake, "/v1/responses")
              if b.get("model") == "gpt-agent-12"]
    assert len(bodies) == 4, len(bodies)
    assert bodies[3].get("tool_choice") == "none" and bodies[3]["tools"]
    assert any("[sessionwarden runtime notice" in json.dumps(b["input"][-1])
               for b in bodies[:3]), "the repeated failure was warned before the grace call"
    thread = next(e["thread_id"] for e in events if e.get("type") == "thread.started")
    status = daemon.cli("status", "--session", thread).stdout
    assert "turn: 4 iterations of 3; grace call" in status, status
    assert_local_only(trace)
