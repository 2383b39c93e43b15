"""What the simulated provider says: a text answer or a tool call, seeded by the request.

:func:`plan_turn` decides the turn (see :mod:`sessionwarden.upstream.sim` for the models)
and writes it: a text answer is a list of *pieces* (a word and its leading space), each
one completion token; a tool call has arguments built from the tool's JSON schema. The
same seed always gives the same turn.

A text answer follows the request's ``response_format`` (:func:`answer_format` reads it):
``json_object`` makes it a JSON object holding the text (``{"answer": ...}``),
``json_schema`` a value built from the schema by the same builder as tool arguments. A
JSON answer is cut in pieces of four characters, each one completion token (the usage
estimate's rate), so a stream's pieces concatenate to the JSON and ``max_tokens`` cuts it
as a model's limit would. The builder knows enough of JSON Schema for tool parameters and
for what pydantic and the openai SDK generate: ``type`` (lists too), ``enum``, ``const``,
``$ref`` into the root's ``$defs``/``definitions``, ``anyOf``/``oneOf`` (the first option
that is not null), ``allOf``, ``properties``/``required``, ``items``/``prefixItems``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, numeric bounds and the common
string formats (``format``); a ``pattern`` is not followed.
"""

import math
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec
from sessionwarden.domain.context.summary import SUMMARY_START, covered_turns

__all__ = ["AnswerFormat", "Turn", "answer_format", "plan_turn"]

_encode = msgspec.json.Encoder(order="sorted").encode
#: A JSON answer keeps the schema's property order, as a model writing it would.
_encode_answer = msgspec.json.Encoder().encode
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
#: Characters per piece (and completion token) of a JSON answer.
_JSON_PIECE = 4
#: The bounds of a value built from a schema (see :class:`_Builder`).
_MAX_DEPTH = 12
_MAX_VALUES = 2_000
_MAX_ITEMS = 64
_MAX_STRING = 4_000
_MAX_CHARS = 100_000
#: A value for each common string ``format`` (fixed: an answer must not depend on the day).
_FORMATS = {
    "date-time": "2030-01-01T12:00:00Z", "date": "2030-01-01", "time": "12:00:00Z",
    "duration": "P1D", "email": "sim@example.com", "hostname": "sim.example.com",
    "ipv4": "192.0.2.1", "ipv6": "2001:db8::1", "uri": "https://example.com/sim",
    "url": "https://example.com/sim",
}


class AnswerFormat(msgspec.Struct, frozen=True):
    """What a request's ``response_format`` asks of a text answer."""

    kind: Literal["text", "json_object", "json_schema"] = "text"
    #: For ``json_schema``: the schema the answer must be valid against.
    schema: dict[str, Any] | None = None


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


class _Builder:
    """Builds values valid against one JSON schema (what the module doc lists of it).

    Bounded: at most :data:`_MAX_VALUES` values in all, :data:`_MAX_ITEMS` items an array,
    strings padded to :data:`_MAX_STRING` characters at most and to
    :data:`_MAX_CHARS` in all, and nested schemas are followed
    :data:`_MAX_DEPTH` deep before the smallest valid value is taken (an empty array, a
    null where allowed): the schema comes with the request, and a recursive or hostile one
    must not make the daemon build without end. A schema no finite value satisfies gets
    null where the bounds are reached.
    """

    def __init__(self, rng: random.Random, root: Mapping[str, Any]) -> None:
        """Values drawn from ``rng``; a ``$ref`` points into ``root``."""
        self.rng = rng
        self.root = root
        self.left = _MAX_VALUES
        self.room = _MAX_CHARS
        #: The references (``$ref``) being built, outermost first: one met again is a
        #: recursion, where an optional value is left out (null, no items) so it ends.
        self.building: list[str] = []

    def resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` with a local ``$ref`` followed (``#/$defs/Name``), its siblings kept."""
        for _ in range(_MAX_DEPTH):  # a chain of references, bounded against a loop
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                return schema
            target: object = self.root
            for part in ref[1:].split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            if not isinstance(target, dict):
                return rest
            schema = {**target, **rest}
        return schema

    def merged(self, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` with its ``allOf`` parts merged in (pydantic wraps a ``$ref`` in one)."""
        parts = schema.get("allOf")
        if not isinstance(parts, list):
            return schema
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in parts:
            if isinstance(part, dict):
                part = self.resolved(part)
                properties = {**merged.get("properties", {}), **part.get("properties", {})}
                required = [*merged.get("required", []), *part.get("required", [])]
                merged = {**merged, **part}
                if properties:
                    merged["properties"] = properties
                if required:
                    merged["required"] = required
        return merged

    def recursive(self, schema: object) -> bool:
        """Whether ``schema`` refers to a definition being built already (a recursion)."""
        return isinstance(schema, dict) and schema.get("$ref") in self.building

    def value(self, schema: object, name: str = "", depth: int = 0) -> object:
        """A plausible value for ``schema``; ``name`` is its property's (a path looks so)."""
        if not isinstance(schema, dict):
            return f"sim-{self.rng.choice(_WORDS)}"
        self.left -= 1
        if self.left < 0 or depth > 2 * _MAX_DEPTH:
            return None
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return self.build(schema, name, depth)
        self.building.append(ref)
        try:
            return self.build(schema, name, depth)
        finally:
            self.building.pop()

    def build(self, schema: dict[str, Any], name: str, depth: int) -> object:
        """:meth:`value` of a schema, its reference (if any) on :attr:`building`."""
        schema = self.merged(self.resolved(schema))
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self.rng.choice(enum)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                rest = {k: v for k, v in schema.items() if k != key}
                chosen = self.option(options, depth >= _MAX_DEPTH)
                return self.value({**rest, **chosen} if isinstance(chosen, dict) else chosen,
                                  name, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null" if kind else "string")
        if kind is None:
            kind = ("object" if "properties" in schema else
                    "array" if "items" in schema or "prefixItems" in schema else None)
        if kind == "null":
            return None
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer", self.rng)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "array":
            return self.array(schema, name, depth)
        if kind == "object":
            return self.object(schema, depth)
        text = _string(schema, name, self.rng, min(_MAX_STRING, max(self.room, 0)))
        self.room -= len(text)
        return text

    def option(self, options: list[Any], deep: bool) -> object:
        """The option of an ``anyOf``/``oneOf`` to build: the first that is not null.

        Null when it is allowed and the others recurse, or past :data:`_MAX_DEPTH`.
        """
        nulls = [o for o in options if isinstance(o, dict) and o.get("type") == "null"]
        others = [o for o in options if o not in nulls]
        ending = [o for o in others if not self.recursive(o)]
        if nulls and (deep or not ending):
            return nulls[0]
        return (ending or others or options)[0]

    def array(self, schema: Mapping[str, Any], name: str, depth: int) -> list[object]:
        """One item (``minItems`` if more); none, if it may, of a recursion or too deep."""
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):  # a tuple: one value per position
            return [self.value(p, name, depth + 1) for p in prefix[:_MAX_ITEMS]]
        fewest, most = schema.get("minItems"), schema.get("maxItems")
        count = min(fewest, _MAX_ITEMS) if isinstance(fewest, int) and fewest > 0 else 0
        if depth < _MAX_DEPTH and not self.recursive(schema.get("items")):
            count = max(count, 1)
        if isinstance(most, int):
            count = min(count, max(most, 0))
        return [self.value(schema.get("items"), name, depth + 1) for _ in range(count)]

    def object(self, schema: Mapping[str, Any], depth: int = 0) -> dict[str, object]:
        """Its ``required`` properties (all of them when it names none)."""
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        required = schema.get("required")
        names = [n for n in properties if not isinstance(required, list) or n in required]
        return {n: self.value(properties[n], n, depth + 1) for n in names}


def _number(schema: Mapping[str, Any], integer: bool, rng: random.Random) -> int | float:
    """A number within the schema's bounds (1-100 for an integer, 0-100 else, without)."""
    bounds = {k: schema.get(k) for k in ("minimum", "maximum", "exclusiveMinimum",
                                         "exclusiveMaximum")}
    given = {k: float(v) for k, v in bounds.items()
             if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    low, high = given.get("minimum"), given.get("maximum")
    above, below = given.get("exclusiveMinimum"), given.get("exclusiveMaximum")
    if integer:
        lo = max(math.ceil(low) if low is not None else 1,
                 math.floor(above) + 1 if above is not None else -math.inf)
        hi = min(math.floor(high) if high is not None else max(int(lo), 1) + 99,
                 math.ceil(below) - 1 if below is not None else math.inf)
        lo, hi = int(lo), int(hi)
        return rng.randint(lo, hi) if lo <= hi else lo
    flo = low if low is not None else above if above is not None else 0.0
    fhi = high if high is not None else below if below is not None else max(flo, 0.0) + 100
    value = round(rng.uniform(flo, fhi), 2)
    if not flo <= value <= fhi or value in (above, below):
        value = (flo + fhi) / 2  # the rounded draw fell outside, or on an excluded end
    return value


def _string(schema: Mapping[str, Any], name: str, rng: random.Random, room: int) -> str:
    """Two words (a path for a path's name), or the value of a known ``format``.

    Padded to ``minLength``, but to no more than ``room`` characters.
    """
    form = schema.get("format")
    if form == "uuid":
        text = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    elif isinstance(form, str) and form in _FORMATS:
        text = _FORMATS[form]
    elif "path" in name or "file" in name:
        text = f"src/{rng.choice(_WORDS)}.py"
    else:
        text = f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}"
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    if isinstance(shortest, int) and len(text) < shortest:
        text = (text + " ") * (min(shortest, room) // (len(text) + 1) + 1)
    if isinstance(longest, int) and len(text) > longest:
        text = text[:max(longest, 0)]
    return text


def _tool_call(function: Mapping[str, Any], rng: random.Random) -> Turn:
    parameters = function.get("parameters")
    arguments = _encode(_Builder(rng, parameters).object(parameters)
                        if isinstance(parameters, dict) else {})
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


def _cut(request: Mapping[str, Any], pieces: list[str]) -> Turn:
    """A text turn of ``pieces``, cut at the request's ``max_tokens`` (one token each)."""
    limit = _limit(request)
    if limit is not None and limit < len(pieces):
        return Turn(pieces=tuple(pieces[:limit]), finish_reason="length", tokens=limit)
    return Turn(pieces=tuple(pieces), tokens=len(pieces))


def _text(request: Mapping[str, Any], opening: str, rng: random.Random,
          form: AnswerFormat) -> Turn:
    said = rng.sample(_SENTENCES, rng.randint(2, 4))
    words = (opening + " " + " ".join(said)).split()
    pieces = [words[0]] + [" " + w for w in words[1:]]
    pieces = pieces[:_MAX_PIECES]
    if form.kind == "text":
        return _cut(request, pieces)
    if form.kind == "json_schema" and form.schema:
        value = _Builder(rng, form.schema).value(form.schema)
    else:  # a JSON object, or a schema that constrains nothing
        value = {"answer": "".join(pieces)}
    text = _encode_answer(value).decode()
    return _cut(request, [text[i:i + _JSON_PIECE] for i in range(0, len(text), _JSON_PIECE)])


def answer_format(request: Mapping[str, Any]) -> AnswerFormat:
    """What the request's ``response_format`` asks for, checked as OpenAI checks it.

    Raises:
        ValueError: a malformed ``response_format`` (OpenAI answers 400), or a
            ``json_object`` one whose messages never say "json" (OpenAI refuses that too).
    """
    shape = request.get("response_format")
    if shape is None:
        return AnswerFormat()
    kind = shape.get("type") if isinstance(shape, dict) else None
    if not isinstance(shape, dict) or kind not in ("text", "json_object", "json_schema"):
        raise ValueError("Invalid 'response_format': expected an object whose 'type' is "
                         "'text', 'json_object' or 'json_schema'.")
    if kind == "text":
        return AnswerFormat()
    if kind == "json_object":
        said = " ".join(_content_text(m) for m in request.get("messages") or []
                        if isinstance(m, dict))
        if "json" not in said.lower():
            raise ValueError("'messages' must contain the word 'json' in some form, to use "
                             "'response_format' of type 'json_object'.")
        return AnswerFormat("json_object")
    spec = shape.get("json_schema")
    if not isinstance(spec, dict):
        raise ValueError("Missing required parameter: 'response_format.json_schema'.")
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise ValueError("Invalid 'response_format.json_schema.schema': expected an object.")
    return AnswerFormat("json_schema", schema)


def plan_turn(request: Mapping[str, Any], model: str, seed: bytes,
              form: AnswerFormat | None = None) -> Turn:
    """The turn the simulated ``model`` plays for ``request`` (same seed, same turn).

    ``form``: what :func:`answer_format` read of the request (None: a plain text answer).
    """
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
    return _text(request, opening, rng, form or AnswerFormat())
