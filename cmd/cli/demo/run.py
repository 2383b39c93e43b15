"""``sessionwarden demo``: a scripted agent session through a real daemon, offline.

The demo starts ``sessionwarden daemon`` as a subprocess (127.0.0.1, port 0, a token of
its own) and plays :data:`STEPS` against the built-in simulated provider ``sim`` over
plain HTTP (the standard library's client: the demo needs no SDK), then stops the daemon
and prints ``status``, the long session's ``status --session`` and ``usage`` of the log
it wrote. The last steps are a long tool-heavy session on a small-window model, where a
tool result is spilled and the history compressed (:mod:`sessionwarden.cmd.cli.demo.context`).

Which log: without ``--db``, a fresh one in a new temporary directory, which is kept
(its path is printed, to explore with ``events``, ``replay --verify``…) and left to the
system's temporary-file cleanup; the daemon then runs with no provider keys and only the
demo's configuration (its small-window model), so nothing of the user's setup enters
it. ``$SESSIONWARDEN_DB`` is ignored: only ``--db`` names a log to write to, and then the
daemon runs with the user's configuration (plus the demo's model) and environment, as
theirs would on that log (its keys are not reconciled away). The configuration is
written to a new temporary directory (beside the fresh log), checked to keep the demo
offline (:mod:`sessionwarden.cmd.cli.demo.config`), and kept.

Adding a step is one entry in :data:`STEPS`: a title and a function of the
:class:`Demo` that makes its calls and returns a summary — one line, or several
starting with a newline (then the title stands on its own line).
"""

import argparse
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionwarden.clock import OFFSET_ENV
from sessionwarden.cmd.cli.demo.client import Demo
from sessionwarden.cmd.cli.demo.config import DEMO_MODEL, write_config
from sessionwarden.cmd.cli.demo.context import compressed_session, spilled_result
from sessionwarden.cmd.errors import CommandError
from sessionwarden.config import SIM_PRICE
from sessionwarden.text import printable

__all__ = ["STEPS", "Demo", "Step", "run_demo"]

_LISTENING = re.compile(r"sessionwarden listening on (http://\S+)/v1")
_START_TIMEOUT_S = 30.0
_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")
#: The spend cap step's session cap, and its calls' ``max_tokens``: the first call's worst
#: case fits under the cap, but once it is spent the second one's no longer does.
_CAP_USD = "0.001"
_CAP_MAX_TOKENS = 100
_TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the project.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def _tokens(usage: Any) -> str:
    return f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens"


def _models(demo: Demo) -> str:
    names = [m["id"] for m in demo.get("/models")["data"]]
    return "GET /v1/models lists " + ", ".join(names)


def _plain(demo: Demo) -> str:
    demo.messages.append({"role": "user", "content": "What does sessionwarden record?"})
    answer = demo.chat(model="sim/chat", messages=demo.messages)
    text = answer["choices"][0]["message"]["content"]
    demo.messages.append({"role": "assistant", "content": text})
    quoted = text if len(text) <= 70 else text[:67] + "..."
    return f"sim/chat answered {quoted!r} ({_tokens(answer['usage'])})"


def _streamed(demo: Demo) -> str:
    demo.messages.append({"role": "user", "content": "Say it again, streamed."})
    chunks = list(demo.stream(model="sim/chat", messages=demo.messages,
                              stream_options={"include_usage": True}))
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c["choices"])
    demo.messages.append({"role": "assistant", "content": text})
    return f"{len(chunks)} chunks, {len(text)} characters ({_tokens(chunks[-1]['usage'])})"


def _tool_call(demo: Demo) -> str:
    demo.messages.append({"role": "user", "content": "Read the README and summarise it."})
    answer = demo.chat(model="sim/agent", messages=demo.messages, tools=_TOOLS)
    message = answer["choices"][0]["message"]
    demo.messages.append(message)
    calls = message["tool_calls"]
    for call in calls:  # the "agent" runs its tool
        demo.messages.append({"role": "tool", "tool_call_id": call["id"],
                              "content": "sessionwarden: a local daemon that governs ..."})
    shown = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls)
    return f"sim/agent called {shown} ({_tokens(answer['usage'])})"


def _tool_answer(demo: Demo) -> str:
    answer = demo.chat(model="sim/agent", messages=demo.messages, tools=_TOOLS)
    choice = answer["choices"][0]
    demo.messages.append({"role": "assistant", "content": choice["message"]["content"]})
    return (f"after the tool result: {choice['finish_reason']}, "
            f"{len(choice['message']['content'])} characters ({_tokens(answer['usage'])})")


def _spend_cap(demo: Demo) -> str:
    session = f"{demo.session}-capped"
    budget_path = f"/sessions/{session}/budget"
    status, budget = demo.send("PUT", budget_path, {"session_usd": _CAP_USD})
    if status != 200:
        raise CommandError(f"the daemon answered {status} to the session cap: {budget}")
    ask = {"model": "sim/priced", "max_tokens": _CAP_MAX_TOKENS, "messages": [
        {"role": "user", "content": "Name three reasons to cap an agent's spend."}]}
    status, answer = demo.send("POST", "/chat/completions", ask, session)
    if status != 200:
        raise CommandError(f"the daemon answered {status} to the priced call: {answer}")
    _, budget = demo.send("GET", budget_path)
    status, again = demo.send("POST", "/chat/completions", ask, session)
    error = again.get("error") if isinstance(again, dict) else None
    if status != 200 and isinstance(error, dict):
        said = f"{status} {error.get('code')}: {printable(str(error.get('message')))}"
        outcome = ["     the same call again no longer fits: the daemon refuses it unsent,",
                   *textwrap.wrap(said, 86, initial_indent="       ",
                                  subsequent_indent="         ")]
    else:  # with --db, a configuration that replaces sim may price sim/priced at nothing
        outcome = [f"     the same call again: answered {status}, the cap did not trip"]
    return "\n".join([
        "",
        f"     a new session, {session}, capped at ${_CAP_USD} through the control API",
        f"     (PUT /v1/sessions/{{id}}/budget), calls sim/priced, sim's priced model "
        f"(${SIM_PRICE.input} / ${SIM_PRICE.output}",
        f"     a million input / output tokens), with max_tokens {_CAP_MAX_TOKENS}: its "
        "worst case fits;",
        f"     it answers {_tokens(answer['usage'])}: ${budget['spent']} spent, "
        f"${budget['left']} left;",
        *outcome,
    ])


@dataclass(frozen=True)
class Step:
    """One step of the demo: what it shows, and the calls that show it."""

    title: str
    run: Callable[[Demo], str]


#: The script, in order. A later mechanism shows itself by adding its step here.
STEPS: list[Step] = [
    Step("the models a client may name", _models),
    Step("a plain call", _plain),
    Step("a streamed call", _streamed),
    Step("an agent's tool call", _tool_call),
    Step("the agent's final answer", _tool_answer),
    Step("a spend cap refuses a call", _spend_cap),
    Step("a long tool-heavy session: a big tool result spilled", spilled_result),
    Step("the long session goes on: its history compressed", compressed_session),
]


class _Daemon:
    """``sessionwarden daemon`` as a subprocess on ``db``; stopped by :meth:`stop`."""

    def __init__(self, db: Path, environ: dict[str, str]) -> None:
        self.token = secrets.token_urlsafe(24)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        cmd = [sys.executable, "-m", "sessionwarden.cmd.cli.main", "daemon", "--db", str(db),
               "--port", "0"]
        self.proc = subprocess.Popen(cmd, env=environ | {"SESSIONWARDEN_TOKEN": self.token},
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _last_line(self) -> str:
        lines = [line for line in self.output().splitlines() if line.strip()]
        return lines[-1] if lines else "(no output)"

    def wait_listening(self) -> str:
        """The daemon's base URL once it listens and is healthy."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.output())
            if match:
                return match.group(1) + "/v1"
            if self.proc.poll() is not None:
                raise CommandError(f"the demo's daemon exited {self.proc.returncode} at "
                                   f"start: {self._last_line()}")
            time.sleep(0.05)
        raise CommandError(f"the demo's daemon did not start in {_START_TIMEOUT_S:.0f} s")

    def stop(self) -> int:
        """SIGTERM, wait for the clean stop; SIGKILL if it lingers. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode


def _environment(own_db: bool, config: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("SESSIONWARDEN_") or k == OFFSET_ENV}
    if not own_db:  # a fresh log: nothing of the user's setup, no key
        environ = {k: v for k, v in environ.items() if k not in _KEY_VARIABLES}
    return environ | {"SESSIONWARDEN_CONFIG": str(config)}


def run_demo(args: argparse.Namespace, db: Path) -> int:
    """Play :data:`STEPS` through a daemon on a fresh log (or ``--db``); print the result."""
    own_db = args.db is not None
    scratch = Path(tempfile.mkdtemp(prefix="sessionwarden-demo-"))
    if not own_db:
        db = scratch / "events.db"
    config = scratch / "config.toml"
    write_config(config, own_db, os.environ)
    print(f"sessionwarden demo: {len(STEPS)} steps through a real daemon, against the "
          "offline simulated provider sim")
    daemon = _Daemon(db, _environment(own_db, config))
    try:
        demo = Demo(daemon.wait_listening(), daemon.token, db)
        print(f"daemon on {demo.base_url}, log {db}, session {demo.session}")
        print(f"its config: {config} (the user's, with --db, plus the demo's model "
              f"{DEMO_MODEL})" if own_db else f"its config: {config} (the demo's model "
              f"{DEMO_MODEL}: sim's agent with a 16,000-token window)")
        for number, step in enumerate(STEPS, 1):
            try:
                summary = step.run(demo)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise CommandError(f"demo step {number} ({step.title}): unexpected answer "
                                   f"({type(exc).__name__}: {exc})") from None
            # A summary of several lines starts with a newline: the title stands alone.
            print(f"{number:>3}. {step.title}:{'' if summary[:1] == chr(10) else ' '}{summary}")
    finally:
        code = daemon.stop()
    if code != 0:
        raise CommandError(f"the demo's daemon stopped with exit code {code}")
    # The CLI's parser comes from main (args.build_parser): importing main from here
    # would close a cycle (main registers the demo command).
    parser = args.build_parser()
    for command in (["status"], ["status", "--session", demo.session, "--config", str(config)],
                    ["usage"]):
        print(f"\n$ sessionwarden {command[0]} --db {db} {' '.join(command[1:])}".rstrip())
        sub = parser.parse_args([command[0], "--db", str(db), *command[1:]])
        sub.clock = args.clock
        sub.run(sub, db)
    where = "it is yours" if own_db else "a temporary directory, kept for you to explore"
    print(f"\nthe demo's log: {db} ({where}); try `sessionwarden events --db {db}`")
    return 0
