"""What the guardrails read in a history: call signatures, failures, result hashes, categories.

Issue 25 after hermes-behaviour.md §9: each tool call paired with its result becomes one
:class:`Observation` — the tool, a signature (name + hash of canonical arguments, never
the raw arguments), whether it failed and a hash of its result — and each tool name
falls into the categories the rules need (idempotent, mutating, failure-tolerant,
progress, poller). Pure: text in, hashes and flags out.

Rules:

* Signatures: SHA-256 of the name and the arguments' canonical JSON (sorted keys, compact
  separators, ``ensure_ascii=False``); blank arguments count as ``{}`` (wires differ on a
  call without arguments); arguments that are not JSON are hashed as the raw string.
* Failure (:func:`failed`), first decisive signal wins: the result's error flag
  (Anthropic ``is_error``); a harness refusal (a guardrail result, ``BLOCKED…``, a runtime
  notice) is *not* a failure; a JSON object decides by ``exit_code``/``returncode``
  (also under ``metadata``, Codex's shape), a non-empty ``error`` or ``success: false``;
  text by ``Error``/``Traceback`` at its start or a shell's ``Exit code: N`` /
  ``Process exited with code N`` line. Failing those, §9's fallback ("error" or "failed"
  in the first 500 characters, negations like "0 errors" aside) — but only for text
  results of tools that are not read-only: a file or page that mentions an error is data.
* A spill stand-in this daemon wrote is classified by its preview, not by its note.
* Result hashes cover the error flag and the content, JSON canonically; ``execute_code``
  drops its volatile ``duration_seconds`` and ``kernel.execution_count``.
* Observations come in the order of their *results* (appending messages only ever
  appends observations); a call without a result yet is not one.
* Tool names match case-insensitively; a Claude Code MCP name ``mcp__filesystem__x``
  matches Hermes's ``mcp_filesystem_x``. A tool in no set (an agent's own tools) gets the
  conservative treatment: no idempotent-repeat rule, not failure-tolerant.
"""

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
from sessionwarden.domain.context.messages import Message, Text, ToolCall, ToolResult
from sessionwarden.domain.runaway.turns import NOTICE_MARKER, SPILL_NOTE

__all__ = [
    "FAILURE_TOLERANT", "IDEMPOTENT", "MUTATING", "POLLERS", "PROGRESS", "TERMINALS",
    "WEB_SEARCH", "Observation", "failed", "is_failure_tolerant", "is_idempotent",
    "is_poller", "is_progress", "is_terminal", "is_web_search", "normal_name",
    "observations", "result_hash", "result_text", "signature",
]

_MCP_FS = ("read_file", "read_text_file", "read_multiple_files", "read_media_file",
           "list_directory", "list_directory_with_sizes", "directory_tree", "get_file_info",
           "search_files", "list_allowed_directories")
_BROWSER_ACTIONS = ("browser_click", "browser_type", "browser_press", "browser_scroll",
                    "browser_navigate")
_CLAUDE_CODE_EDITS = ("bash", "edit", "write", "multiedit", "notebookedit", "todowrite",
                      "task", "killshell", "killbash")
_CODEX = ("shell", "apply_patch", "update_plan", "exec_command", "local_shell",
          "container.exec")

#: Read-only tools: the same call with the same result again is a loop, not work.
IDEMPOTENT: frozenset[str] = frozenset({
    "read_file", "search_files", "web_search", "web_extract", "session_search",
    "skill_view", "skills_list", "browser_snapshot", "browser_console",
    "browser_get_images", *(f"mcp_filesystem_{name}" for name in _MCP_FS),
    # Claude Code's read-only tools
    "read", "glob", "grep", "ls", "webfetch", "websearch",
})
#: Tools that change something (files, processes, the outside world).
MUTATING: frozenset[str] = frozenset({
    "terminal", "execute_code", "write_file", "patch", "todo", "todo_list", "memory",
    "skill_manage", *_BROWSER_ACTIONS, "send_message", "cronjob", "cronjob_manage",
    "delegate_task", "process", "process_manage", *_CLAUDE_CODE_EDITS, *_CODEX,
})
#: Tools whose failures are the normal course of work (a red test run, a missing file
#: probed): many in a row never stop a turn (only warn).
FAILURE_TOLERANT: frozenset[str] = frozenset({
    "terminal", "execute_code", "process_manage", "process", "browser_navigate",
    "web_extract", "bash", "shell", "exec_command", "local_shell", "container.exec",
})
#: Tools whose success marks progress: the next retry of a failed call is a new experiment.
PROGRESS: frozenset[str] = frozenset({
    "write_file", "patch", "terminal", "execute_code", *_BROWSER_ACTIONS, "process",
    "delegate_task", "send_message", "cronjob", "cronjob_manage", "todo", "todo_list",
    "memory", "skill_manage", *_CLAUDE_CODE_EDITS, *_CODEX,
})
#: Tools that wait on something else: asking again with the same answer is expected.
#: Names ending ``_get_result`` or ``_poll`` are pollers too.
POLLERS: frozenset[str] = frozenset({"process_manage", "bashoutput", "write_stdin"})
#: Shells and interpreters: their recovery advice is to look around (``pwd && ls -la``).
TERMINALS: frozenset[str] = frozenset({
    "terminal", "execute_code", "process", "bash", "shell", "exec_command", "local_shell",
    "container.exec",
})
#: Web searches, counted against the per-turn cap.
WEB_SEARCH: frozenset[str] = frozenset({"web_search", "websearch"})

_POLL_SUFFIXES = ("_get_result", "_poll")
_FALLBACK_CHARS = 500
_REFUSALS = ("BLOCKED", "[Tool loop", NOTICE_MARKER)
_ERROR_PREFIXES = ("Error", "Traceback")
_EXIT = re.compile(r"^(?:exit code:?|process exited with code)\s*(-?\d+)",
                   re.IGNORECASE | re.MULTILINE)
_FALLBACK = re.compile(r"error|failed", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:no|0|zero|without)\s+(?:errors?|failures?|failed)\b",
                      re.IGNORECASE)
_PREVIEW_START = "Preview (the first "
_VOLATILE_TOOLS = frozenset({"execute_code"})


def normal_name(name: str) -> str:
    """The name the category sets use: lower case, MCP filesystem names in Hermes's form."""
    lowered = name.lower()
    if lowered.startswith("mcp__filesystem__"):
        return "mcp_filesystem_" + lowered[len("mcp__filesystem__"):]
    return lowered


def is_idempotent(name: str) -> bool:
    """Whether ``name`` is a read-only tool (:data:`IDEMPOTENT`)."""
    return normal_name(name) in IDEMPOTENT


def is_failure_tolerant(name: str) -> bool:
    """Whether failures of ``name`` are routine (:data:`FAILURE_TOLERANT`)."""
    return normal_name(name) in FAILURE_TOLERANT


def is_progress(name: str) -> bool:
    """Whether a success of ``name`` marks progress (:data:`PROGRESS`)."""
    return normal_name(name) in PROGRESS


def is_poller(name: str) -> bool:
    """Whether ``name`` polls (:data:`POLLERS`, or a ``_get_result``/``_poll`` suffix)."""
    lowered = normal_name(name)
    return lowered in POLLERS or lowered.endswith(_POLL_SUFFIXES)


def is_terminal(name: str) -> bool:
    """Whether ``name`` is a shell or an interpreter (:data:`TERMINALS`)."""
    return normal_name(name) in TERMINALS


def is_web_search(name: str) -> bool:
    """Whether ``name`` is a web search (:data:`WEB_SEARCH`)."""
    return normal_name(name) in WEB_SEARCH


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def signature(name: str, arguments: str) -> str:
    """SHA-256 (hex) of the tool's name and its canonical arguments (module doc)."""
    if not arguments.strip():
        body = "{}"
    else:
        try:
            body = _canonical(json.loads(arguments))
        except ValueError:  # not JSON (or a NaN spelling json refuses): the raw string
            body = arguments
    return hashlib.sha256(f"{name}\x00{body}".encode()).hexdigest()


def result_text(result: ToolResult) -> str:
    """The text the model reads in ``result``: its text parts, joined."""
    texts = [part.text for part in result.parts if isinstance(part, Text)]
    return texts[0] if len(texts) == 1 else "\n".join(texts)


def _json(text: str) -> Any:
    if not text.startswith(("{", "[")):
        return None
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError):  # ValueError: an integer out of range
        return None


def _refusal(text: str, value: Any) -> bool:
    return (text.startswith(_REFUSALS) or "guardrail_refusal" in text[:_FALLBACK_CHARS]
            or (isinstance(value, dict) and "guardrail" in value))


def _json_verdict(value: dict[str, Any]) -> bool | None:
    """A JSON object's own say: True/False when it carries a status, else None."""
    verdict: bool | None = None
    metadata = value.get("metadata")
    for holder in (value, metadata if isinstance(metadata, dict) else {}):
        for key in ("exit_code", "returncode", "exitCode"):
            code = holder.get(key)
            if isinstance(code, int | float) and not isinstance(code, bool):
                if code != 0:
                    return True
                verdict = False
    error = value.get("error")
    if error not in (None, "", False, {}, []):
        return True
    if value.get("success") is False:
        return True
    if "success" in value or "error" in value:
        verdict = False
    return verdict


def _preview(text: str) -> str:
    """A spill stand-in's preview (what the tool said), or ``text`` itself."""
    if not text.startswith(SPILL_NOTE):
        return text
    start = text.find(_PREVIEW_START)
    line_end = text.find("\n", start)
    return text if start < 0 or line_end < 0 else text[line_end + 1:]


def failed(result: ToolResult, tool: str | None = None) -> bool:
    """Whether ``result`` reports a failure (module doc); ``tool`` defaults to its name."""
    if getattr(result, "error", False):
        return True
    text = _preview(result_text(result)).lstrip()
    value = _json(text)
    if _refusal(text, value):
        return False
    if isinstance(value, dict):
        return bool(_json_verdict(value))
    if value is not None:
        return False  # a JSON list: data
    if text.startswith(_ERROR_PREFIXES):
        return True
    head = text[:_FALLBACK_CHARS]
    code = _EXIT.search(head)
    if code is not None:
        return int(code.group(1)) != 0
    name = tool if tool is not None else result.name
    if name is not None and is_idempotent(name):
        return False  # a file or page mentioning an error is content, not a verdict
    return _FALLBACK.search(_NEGATED.sub("", head)) is not None


def _without_volatile(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    kept = {key: item for key, item in value.items() if key != "duration_seconds"}
    kernel = kept.get("kernel")
    if isinstance(kernel, dict):
        kept["kernel"] = {k: v for k, v in kernel.items() if k != "execution_count"}
    return kept


def result_hash(result: ToolResult, tool: str | None = None) -> str:
    """SHA-256 (hex) of the result's flag and content, JSON canonically (module doc)."""
    digest = hashlib.sha256(b"1" if getattr(result, "error", False) else b"0")
    name = normal_name(tool if tool is not None else result.name or "")
    for part in result.parts:
        if isinstance(part, Text):
            value = _json(part.text.strip())
            if value is None:
                digest.update(b"\x00t" + part.text.encode())
                continue
            if name in _VOLATILE_TOOLS:
                value = _without_volatile(value)
            digest.update(b"\x00j" + msgspec.json.encode(value, order="sorted"))
        else:  # an image or file the tool returned: its bytes as sent
            digest.update(b"\x00o" + part.kind.encode() + b"\x00" + part.raw)
    return digest.hexdigest()


class Observation(NamedTuple):
    """One tool call with its result, as the guardrails see it.

    Attributes:
        tool: the tool's name as the call gave it.
        signature: :func:`signature` of the call.
        failed: :func:`failed` of the result.
        result_hash: :func:`result_hash` of the result.
        call_id: the call's id (``""`` for a legacy call).
        result_index: the index of the message holding the result.
    """

    tool: str
    signature: str
    failed: bool
    result_hash: str
    call_id: str
    result_index: int


def _observe(call: ToolCall, result: ToolResult, index: int) -> Observation:
    return Observation(call.name, signature(call.name, call.arguments),
                       failed(result, call.name), result_hash(result, call.name),
                       call.id, index)


def _seed_start(messages: Sequence[Message], since: int) -> int:
    """Where to start pairing so results from ``since`` on find their calls.

    Back over the results just before ``since`` to the assistant message whose calls they
    answer: results follow their calls, so pairing from there equals pairing from 0.
    """
    index = since - 1
    while index >= 0 and any(isinstance(p, ToolResult) for p in messages[index].parts):
        index -= 1
    if index >= 0 and any(isinstance(p, ToolCall) for p in messages[index].parts):
        return index
    return since


def observations(messages: Sequence[Message], since: int = 0) -> list[Observation]:
    """Each answered call's :class:`Observation`, in result order, for results from ``since``.

    Pairing is by id, a result answering the earliest open call with its id (as
    :func:`~sessionwarden.domain.context.messages.tool_pairs`). With ``since`` only the
    messages from the assistant turn before ``since`` on are read: O(new messages).
    """
    open_calls: dict[str, list[ToolCall]] = {}
    found: list[Observation] = []
    for index in range(_seed_start(messages, since), len(messages)):
        calls: list[ToolCall] = []
        for part in messages[index].parts:
            if isinstance(part, ToolResult):
                waiting = open_calls.get(part.call_id)
                if waiting:
                    call = waiting.pop(0)
                    if index >= since:
                        found.append(_observe(call, part, index))
            elif isinstance(part, ToolCall):
                calls.append(part)
        for call in calls:  # results before calls within one message (as tool_pairs)
            open_calls.setdefault(call.id, []).append(call)
    return found
