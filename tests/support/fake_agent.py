"""What the fake provider's Messages and Responses routes share: the scripted agent and usage.

A model whose name contains ``agent`` acts as a scripted agent: ``agent-N`` (plain ``agent``:
N = 1) calls a tool in each of its first N answers after the user's last prompt, then gives
a final text answer. The tool is the first one offered (or ``FakeOptions.tool_name``), its
arguments built from the tool's JSON schema by :func:`tool_input`. Other models answer text.

Token counts are deterministic: a quarter of the compact JSON's length of each part of the
prompt (:func:`size`). A request whose prompt starts with a prefix an earlier request held
(hashed part by part, ``cache_control`` markers left out) reads that prefix from the "cache"
(:func:`cached_prefix`).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.responses import Response

from tests.support.fake_provider import FakeOptions, FakeProviderState, _fails

#: ``sse_response(events, opts, headers)`` from ``make_app``: a streaming answer.
SseResponse = Callable[[list[str], FakeOptions, dict[str, str]], Response]

_AGENT = re.compile(r"agent(?:-(\d+))?")
_COMMAND = "echo fake-tool-ran"
#: How the daemon's runtime notices begin: a scripted agent does not take one for a task.
NOTICE_PREFIX = "[sessionwarden runtime notice"


def agent_rounds(model: Any) -> int | None:
    """The tool rounds an ``agent``/``agent-N`` model makes; None for any other model."""
    match = _AGENT.search(model) if isinstance(model, str) else None
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else 1


def tools_allowed(body: dict[str, Any]) -> bool:
    """Whether the request lets the model call a tool (``tool_choice`` none, in either
    format, forbids it, as real providers honour it)."""
    choice = body.get("tool_choice")
    return choice != "none" and not (isinstance(choice, dict) and choice.get("type") == "none")


def pick_tool(tools: Any, name: str | None) -> dict[str, Any] | None:
    """The tool an agent calls: the one named ``name``, else the first with a schema."""
    offered = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    named = [t for t in offered if isinstance(t.get("name"), str)]
    if name is not None:
        return next((t for t in named if t["name"] == name), None)
    schemas = [t for t in named if "input_schema" in t or "parameters" in t]
    return (schemas or named)[0] if named else None


def _value(name: str, schema: Any, command: str = _COMMAND) -> Any:
    """A short value of ``schema``'s type (``command``, and Codex's ``cmd``, get a harmless
    shell command)."""
    if not isinstance(schema, dict):
        return "fake"
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _value(name, schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        if name == "command":
            return ["echo", "fake-tool-ran"]
        item = schema.get("items")
        return [_value(name, item)] if isinstance(item, dict) and item else []
    if kind == "object":
        return tool_input(schema, command)
    simple = {"integer": 1, "number": 1, "boolean": False, "null": None}
    if kind in simple:
        return simple[kind]
    return command if name in ("command", "cmd") else "fake tool call" if name == "description" \
        else "fake"


def tool_input(schema: Any, command: str | None = None) -> dict[str, Any]:
    """Arguments for a tool with this JSON schema: required properties plus command and
    description when the schema has them, each a short value of its type (a string
    ``command`` or ``cmd``: ``command``, by default ``echo fake-tool-ran``)."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    names += [n for n in ("command", "cmd", "description") if n in props and n not in names]
    return {n: _value(n, props.get(n), command or _COMMAND) for n in names}


def size(obj: Any) -> int:
    """Deterministic token count of a JSON value: a quarter of its compact JSON's length."""
    if obj is None:
        return 0
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False)) // 4


def _strip(obj: Any) -> Any:
    """``obj`` without its ``cache_control`` markers (they do not change a cached prefix)."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _canon(obj: Any) -> str:
    return json.dumps(_strip(obj), sort_keys=True, separators=(",", ":"))


def cached_prefix(state: FakeProviderState, model: Any, head: Any,
                  parts: list[Any]) -> tuple[int, int]:
    """Return (prompt tokens, tokens of the longest proper prefix seen before) of a prompt.

    The prompt is ``head`` (tools, system text) then ``parts`` (messages, items); a prefix
    counts from ``head`` through one or more parts. Every prefix of this prompt is seen from
    now on.
    """
    digest = hashlib.sha256(f"{model}\n{_canon(head)}".encode()).hexdigest()
    total, ends, hashes = size(head), [], []
    for part in parts:
        digest = hashlib.sha256(f"{digest}\n{_canon(part)}".encode()).hexdigest()
        total += size(part)
        ends.append(total)
        hashes.append(digest)
    seen = state.remember_prefixes(hashes)
    cached = max((end for end, hit in zip(ends[:-1], seen[:-1], strict=True) if hit),
                 default=0)
    return max(1, total), cached


def api_key(headers: dict[str, str]) -> str:
    """The request's API key: ``Authorization: Bearer`` or Anthropic's ``x-api-key``."""
    return headers.get("authorization", "").removeprefix("Bearer ") or \
        headers.get("x-api-key", "")


def fails_now(state: FakeProviderState, opts: FakeOptions, headers: dict[str, str]) -> bool:
    """Whether ``opts.status`` (an HTTP error) applies to this request (``fail_first``)."""
    return opts.status is not None and int(opts.status) >= 400 and _fails(state, opts, headers)


def breaks_now(state: FakeProviderState, opts: FakeOptions,
               headers: dict[str, str]) -> FakeOptions:
    """``opts`` without ``break_after_chunks`` when ``fail_first`` spares this request."""
    if opts.break_after_chunks is not None and not _fails(state, opts, headers):
        return replace(opts, break_after_chunks=None)
    return opts


def json_answer(data: Any, opts: FakeOptions, headers: dict[str, str],
                status: int = 200) -> Response:
    """A JSON answer, gzipped when ``opts.gzip``; ``raw_body`` replaces a 200's body."""
    raw = opts.raw_body.encode() if opts.raw_body is not None and status == 200 \
        else json.dumps(data).encode()
    headers = dict(headers)
    if opts.gzip:
        raw = gzip.compress(raw)
        headers["content-encoding"] = "gzip"
    return Response(raw, status_code=status, headers=headers, media_type="application/json")


def opaque(kind: str, seed: Any) -> str:
    """A deterministic opaque token (signature, encrypted content): base64 of a digest."""
    digest = hashlib.sha256(f"{kind}\n{_canon(seed)}".encode()).hexdigest()
    return base64.b64encode(f"fake-{kind}:{digest}".encode()).decode()


def new_id(prefix: str) -> str:
    """A fresh id such as ``msg_…``, ``toolu_…``, ``resp_…``."""
    return prefix + uuid.uuid4().hex[:24]


def sse_event(kind: str, data: dict[str, Any]) -> str:
    """One named SSE event: ``event: kind`` and its JSON data."""
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"
