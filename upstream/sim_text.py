"""What the simulated provider says: a text answer or a tool call, seeded by the request.

:func:`plan_turn` decides the turn (see :mod:`sessionwarden.upstream.sim` for the models)
and writes it: a text answer is a list of *pieces* (a word and its leading space), each
one completion token; a tool call has arguments built from the tool's JSON schema. The
same seed always gives the same turn.
"""

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from sessionwarden.domain.summary import SUMMARY_START, covered_turns

__all__ = ["Turn", "plan_turn"]

_encode = msgspec.json.Encoder(order="sorted").encode
_AGENT_MODEL = re.compile(r"agent(?:-(\d{1,3}))?")
_WORDS = (
    "the", "session", "stays", "within", "its", "budget", "while", "each", "call", "is",
    "recorded", "in", "log", "and", "every", "tool", "result", "checked", "before", "next",
    "turn", "so", "agent", "can", "continue", "with", "a", "clear", "view", "of", "work",
    "done", "far", "including", "files", "it", "read", "tests", "ran", "plan", "follows",
    "until", "task", "complete",
)
#: What a text answer says, a few of these in a seeded order: true things about the sim.
_SENTENCES = (
    "This answer comes from the offline simulated provider, not from a model.",
    "Nothing left this machine and no key was used.",
    "The usage block is an estimate of about four characters a token.",
    "The daemon recorded this call in its event log, with that usage.",
    "The same messages always get the same answer, streamed or not.",
    "Name the model sim/agent and offer tools to see a tool call.",
    "Run sessionwarden status to see this session and its calls.",
    "Set a provider key to talk to a real model instead.",
)
_MAX_PIECES = 80


class Turn(msgspec.Struct, frozen=True):
    """One simulated assistant turn: text pieces or tool calls, and its completion tokens."""

    pieces: tuple[str, ...] = ()
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str = "stop"
    tokens: int = 0

    @property
    def text(self) -> str | None:
        """The answer's text (None for a tool-calling turn)."""
        return None if self.tool_calls else "".join(self.pieces)


def _content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _last_user_text(messages: Sequence[Any]) -> str:
    """The newest user request's text (the daemon's context summaries are no requests)."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _content_text(message)
            if not text.startswith(SUMMARY_START):
                return text
    return ""


def _tool_turns_since_user(messages: Sequence[Any]) -> tuple[int, int]:
    """(assistant turns that called tools, tool results) after the newest user request.

    The daemon's context summary is no request: the turns its end line says it covers
    are counted, and the walk goes on past it (an agent counted from the summary, and
    once compressed more often than its N turns never finished).
    """
    calls = results = 0
    for message in reversed(messages):
        if not isinstance(message, dict):
            break
        text = _content_text(message)
        if text.startswith(SUMMARY_START):
            calls += covered_turns(text) or 0
        elif message.get("role") == "user":
            break
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls += 1
        elif message.get("role") == "tool":
            results += 1
    return calls, results


def _functions(tools: object) -> list[Mapping[str, Any]]:
    if not isinstance(tools, list):
        return []
    return [t["function"] for t in tools
            if isinstance(t, dict) and t.get("type") == "function"
            and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)]


def _chosen(functions: list[Mapping[str, Any]], choice: object, rng: random.Random
            ) -> Mapping[str, Any] | None:
    if choice == "none" or not functions:
        return None
    if isinstance(choice, dict):
        wanted = choice.get("function", {}).get("name") if isinstance(
            choice.get("function"), dict) else None
        named = [f for f in functions if f["name"] == wanted]
        if named:
            return named[0]
    return rng.choice(functions)


def _value(schema: object, name: str, rng: random.Random) -> object:
    """A plausible value for a JSON schema (enough of it for tool arguments)."""
    if not isinstance(schema, dict):
        return f"sim-{rng.choice(_WORDS)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_value(schema.get("items"), name, rng)]
    if kind == "object":
        return _object(schema, rng)
    if "path" in name or "file" in name:
        return f"src/{rng.choice(_WORDS)}.py"
    return f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}"


def _object(schema: Mapping[str, Any], rng: random.Random) -> dict[str, object]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = schema.get("required")
    names = [n for n in properties if not isinstance(required, list) or n in required]
    return {n: _value(properties[n], n, rng) for n in names}


def _tool_call(function: Mapping[str, Any], rng: random.Random) -> Turn:
    parameters = function.get("parameters")
    arguments = _encode(_object(parameters, rng) if isinstance(parameters, dict) else {})
    call = {"id": f"call_sim{rng.getrandbits(64):016x}", "type": "function",
            "function": {"name": function["name"], "arguments": arguments.decode()}}
    tokens = (len(arguments) + len(function["name"]) + 3) // 4 + 7
    return Turn(tool_calls=(call,), finish_reason="tool_calls", tokens=tokens)


def _limit(request: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = request.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _text(request: Mapping[str, Any], opening: str, rng: random.Random) -> Turn:
    said = rng.sample(_SENTENCES, rng.randint(2, 4))
    words = (opening + " " + " ".join(said)).split()
    pieces = [words[0]] + [" " + w for w in words[1:]]
    pieces = pieces[:_MAX_PIECES]
    limit = _limit(request)
    if limit is not None and limit < len(pieces):
        return Turn(pieces=tuple(pieces[:limit]), finish_reason="length", tokens=limit)
    return Turn(pieces=tuple(pieces), tokens=len(pieces))


def plan_turn(request: Mapping[str, Any], model: str, seed: bytes) -> Turn:
    """The turn the simulated ``model`` plays for ``request`` (same seed, same turn)."""
    rng = random.Random(seed)
    messages: list[Any] = request.get("messages") or []
    agent = _AGENT_MODEL.fullmatch(model)
    calls, results = _tool_turns_since_user(messages)
    if agent:
        rounds = int(agent.group(1) or 1)
        function = _chosen(_functions(request.get("tools")), request.get("tool_choice"), rng)
        if function is not None and calls < rounds:
            return _tool_call(function, rng)
    if results:
        opening = f"(sim) Read {results} tool result{'s' if results > 1 else ''}."
    else:
        words = _last_user_text(messages).split()
        asked = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
        opening = f"(sim) You asked: {asked!r}." if asked else "(sim)"
    return _text(request, opening, rng)
