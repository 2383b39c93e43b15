"""The demo's long tool-heavy session: a spilled tool result, then a compression (issue 11).

Two steps of ``sessionwarden demo`` (:mod:`sessionwarden.cmd.cli.demo.run`).

The session's model
is :data:`~sessionwarden.cmd.cli.demo.config.DEMO_MODEL`, a ``[[models]]`` entry the demo adds
to its daemon's configuration (:mod:`sessionwarden.cmd.cli.demo.config`): sim's agent,
which calls one of the offered tools while fewer than 20 tool-calling turns follow the
last user message, with a 16,000-token window. A small window brings what a long session
shows quickly: its tool results are spilled past 9,600 characters (15 % of the window,
in characters) and its history is compressed at 12,750 tokens (the trigger of a window
that small).

The demo plays the agent's tools itself, with deterministic made-up outputs, and forces
the tool of each turn (``tool_choice``) so every run plays the same session:

1. ``run_tests`` answers a 30,000-character test log. The daemon spills it to a file and
   forwards a stand-in; the step shows the stand-in's first lines as the model received
   them, rebuilt from the log (what ``sessionwarden replay --session ID --call N``
   prints), and the spill file.
2. ``read_file`` turns (6,000 characters each; ``read_file`` is never spilled) until the
   session's context reaches the threshold and the daemon compresses it; the step asks the
   daemon's control API (``GET /v1/sessions/{id}``) after each call, as any client could,
   and shows the compression's figures from it.
"""

from typing import Any

import msgspec
from sessionwarden.cmd.cli.demo.client import Demo
from sessionwarden.cmd.cli.demo.config import DEMO_MODEL
from sessionwarden.cmd.errors import CommandError
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CODEC, ToolResultSpilled
from sessionwarden.store import EventLog
from sessionwarden.text import printable
from sessionwarden.views.sent_requests import rebuild

__all__ = ["compressed_session", "spilled_result"]

_MAX_TURNS = 18  # read_file turns; the fresh demo's session compresses at the 8th
_SOURCES = {"real": "the provider's count", "estimated": "our estimate"}
_TASK = "The test suite fails on main: find out why and fix it."
_TOOLS = [{"type": "function", "function": {
    "name": name, "description": description,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}
    for name, description in (("run_tests", "Run the tests under a path."),
                               ("read_file", "Read a file of the project."))]


def _test_log(path: str) -> str:
    """A failing test run's output: 30,000 characters, mostly passes."""
    lines = [f"$ pytest {path}", "============ test session starts ============",
             "collected 380 items", ""]
    lines += [f"tests/test_views.py::test_view_{n:04d} PASSED{' ' * 28}[{n * 100 // 380:3d}%]"
              for n in range(1, 372)]
    lines += ["tests/test_store.py::test_reopen FAILED", "",
              "E   AssertionError: the fixture's log was left open by test_views.py",
              "============ 1 failed, 370 passed in 41.2s ============"]
    text = "\n".join(lines) + "\n"
    return text + "." * (30_000 - len(text))  # a runner's trailing progress dots


def _source_file(path: str, turn: int) -> str:
    """A source file of 6,000 characters, different at each turn."""
    lines = [f'"""{path}: views of the project (read at turn {turn})."""', ""]
    n = 0
    while sum(len(line) + 1 for line in lines) < 6_000:
        n += 1
        lines += [f"def view_{turn:02d}_{n:03d}(request, store):",
                  f'    """Answer case {n} of {path}, reading the store once."""',
                  f"    return store.read(request.key, limit={n * 10})", ""]
    return "\n".join(lines)[:6_000]


def _tool_turn(demo: Demo, tool: str, output: Any) -> tuple[str, int]:
    """One agent turn forced to ``tool``; its result appended. (argument, prompt tokens)."""
    answer = demo.chat(model=DEMO_MODEL, messages=demo.messages, tools=_TOOLS,
                       tool_choice={"type": "function", "function": {"name": tool}})
    message = answer["choices"][0]["message"]
    demo.messages.append(message)
    [call] = message["tool_calls"]
    path = str(_json_object(call["function"]["arguments"]).get("path", "."))
    demo.messages.append({"role": "tool", "tool_call_id": call["id"],
                          "content": output(path)})
    return path, int(answer["usage"]["prompt_tokens"])


def _json_object(text: str) -> dict[str, Any]:
    """``text`` decoded as a JSON object (an empty one if it is not)."""
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _last_spill(demo: Demo) -> tuple[ToolResultSpilled, str, int]:
    """The session's last spill, the stand-in its call sent and that call's number.

    Read from the log as ``replay --session ID --call N`` reads it (read-only: the
    daemon is running).
    """
    with EventLog(demo.db, readonly=True) as log:
        spills = [e for e in (CODEC.decode(r.type, r.data)
                              for r in log.read_stream(session_stream(demo.session)))
                  if isinstance(e, ToolResultSpilled)]
        if not spills:
            raise CommandError("demo: the big tool result was not spilled")
        sent = rebuild(log, demo.session, spills[-1].call_id)
    body = msgspec.json.decode(sent.body)
    return spills[-1], str(body["messages"][spills[-1].message]["content"]), sent.number


def _cut(line: str, width: int = 74) -> str:
    return printable(line if len(line) <= width else line[:width - 3] + "...")


def spilled_result(demo: Demo) -> str:
    """Step: the agent runs the tests; the 30,000-character log is spilled to a file."""
    demo.messages.append({"role": "user", "content": _TASK})
    path, _ = _tool_turn(demo, "run_tests", _test_log)
    # The result is governed when it is sent: with the next call.
    _tool_turn(demo, "read_file", lambda p: _source_file(p, 0))
    spill, stand_in, number = _last_spill(demo)
    lines = stand_in.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("Preview"))
    where = next(x for x in lines if x.startswith("Full output: ")).removeprefix("Full output: ")
    shown = [*lines[:2], "...", *lines[start:start + 3], "..."]
    return "\n".join([
        "",
        f"     the user asks {_TASK!r}",
        f"     {DEMO_MODEL} calls run_tests({path}), whose output is {spill.chars:,} "
        "characters:",
        "     over the 9,600 a tool result may take in a 16,000-token window (15 % of it),",
        "     so the daemon saved it to a file and sent the model this stand-in instead",
        f"     (`sessionwarden replay --session {demo.session} --call {number}` shows "
        "that request):",
        *(f"       | {_cut(line)}" for line in shown),
        f"     spill file: {printable(where)} ({spill.bytes:,} bytes)",
    ])


def compressed_session(demo: Demo) -> str:
    """Step: read_file turns until the daemon compresses the session's history."""
    status = demo.get(f"/sessions/{demo.session}")
    turn = prompt = 0
    while not status["compressions"] and turn < _MAX_TURNS:
        turn += 1
        _, prompt = _tool_turn(demo, "read_file", lambda p, t=turn: _source_file(p, t))
        status = demo.get(f"/sessions/{demo.session}")  # the control API, as any client
    threshold, last = status["threshold_tokens"], status["last_compression"]
    if last is None:  # with --db, the user's configuration may set a far threshold
        context = status["context"]["tokens"] if status["context"] else 0
        return (f"{turn} read_file turns and no compression: the context is {context:,} "
                f"tokens, its threshold {threshold:,}")
    by = last["summariser"] + (f" ({last['model']})" if last["model"] else "")
    return "\n".join([
        "",
        "     then the agent reads a file each turn (6,000 characters; read_file results",
        "     are never spilled: the agent reads a spill file with it);",
        f"     after {turn} turns the history reached the model's threshold of {threshold:,} "
        "tokens,",
        "     so before sending that call the daemon compressed it "
        "(`GET /v1/sessions/{id}`):",
        f"       {last['tokens_before']:,} -> {last['tokens_after']:,} tokens "
        f"({_SOURCES.get(last['source'], last['source'])}),",
        f"       {last['messages_before']} -> {last['messages_after']} messages: "
        f"{last['summarised']} summarised by the {by} summariser,",
        "       the task and the newest turns kept as they were;",
        f"     the model then read a {prompt:,}-token prompt, and the agent went on",
    ])
