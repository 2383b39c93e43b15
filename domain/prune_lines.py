"""The one-line stand-ins of compression phase 1 (``domain.prune``): summaries and notes.

A pruned tool result must still tell the model what happened: which tool, on what, and
what came back. :func:`summary` builds that line from the call's arguments and the
result's text, per tool kind (recognised by name, with common aliases):

* read — ``[read_file] src/app.py from line 40 → 120 lines, 4,210 chars``
* write — ``[write_file] notes.md, 12 lines written → Wrote 12 lines``
* terminal — ``[terminal] $ make test → exit 2, 37 lines of output`` (the exit code read
  from the output, ``?`` when it does not say)
* search — ``[search_files] 'TODO' in src → 12 lines``
* edit — ``[patch] src/app.py → Applied 1 hunk``
* web search — ``[web_search] 'msgspec structs' → 3,120 chars``
* fetch — ``[web_fetch] https://example.org → 9,004 chars``
* anything else — ``[name] key=value, key=value → 7 lines, 1,234 chars`` (first two
  arguments).

Every value is put on one line and clipped, and every line is at most
:data:`STAND_IN_MAX_CHARS` long (:func:`clip`), so a stand-in is always shorter than a
result phase 1 prunes and is never pruned again. Deterministic; never raises, whatever
the arguments hold (not JSON, not an object, odd types). Our own wording: inspired by
Hermes's ``_summarize_tool_result`` (hermes-behaviour.md §2.4), not a copy of it.
"""

import re
from typing import Any

import msgspec

__all__ = ["STAND_IN_MAX_CHARS", "clip", "dedupe_note", "summary"]

#: The longest a stand-in line can be; phase 1 never prunes a result this short.
STAND_IN_MAX_CHARS = 200
_VALUE_CHARS = 80
_NAME_CHARS = 40
_ID_CHARS = 64

_KINDS: dict[str, str] = {}
for _kind, _names in {
    "read": ("read_file", "read", "view", "cat", "open_file", "file_read", "view_file"),
    "write": ("write_file", "write", "create_file", "file_write"),
    "terminal": ("terminal", "bash", "shell", "run_command", "execute_command", "exec",
                 "run_shell_command", "run_terminal_cmd"),
    "search": ("search_files", "grep", "search", "find_files", "glob", "ripgrep",
               "grep_search", "file_search"),
    "edit": ("patch", "edit_file", "edit", "apply_patch", "str_replace",
             "str_replace_editor", "replace_in_file"),
    "web_search": ("web_search", "search_web"),
    "fetch": ("web_extract", "fetch", "web_fetch", "fetch_url", "browse", "open_url"),
}.items():
    for _name in _names:
        _KINDS[_name] = _kind

_PATH_KEYS = ("path", "file_path", "filename", "file", "target_file", "target")
_EXIT = re.compile(r'"?exit[ _]?(?:code|status)?"?\s*[:=]?\s*(-?\d+)', re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_decode = msgspec.json.Decoder().decode


def clip(text: str, limit: int = STAND_IN_MAX_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``…`` when longer."""
    flat = _SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def dedupe_note(call_id: str) -> str:
    """The stand-in of an older copy of a result whose newest copy answers ``call_id``."""
    if not call_id:
        return "[same output as a later tool result]"
    return f"[same output as the later call {clip(call_id, _ID_CHARS)}]"


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        value = _decode(arguments)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _value(args: dict[str, Any], *keys: str) -> str:
    """The first of ``keys`` in ``args`` with a usable value, as a clipped string."""
    for key in keys:
        value = args.get(key)
        if isinstance(value, list) and value:
            more = f" (+{len(value) - 1} more)" if len(value) > 1 else ""
            return clip(str(_scalar(value[0])), _VALUE_CHARS) + more
        if value is not None and value != "":
            return clip(str(_scalar(value)), _VALUE_CHARS)
    return ""


def _scalar(value: object) -> object:
    if isinstance(value, dict):  # e.g. {"url": ...} in a list of links
        for key in ("url", "href", "path"):
            if key in value:
                return value[key]
    return value


def _lines(text: str) -> int:
    return len(text.splitlines())


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return clip(line, _VALUE_CHARS)
    return "(empty)"


def summary(name: str, arguments: str, text: str) -> str:
    """One informative line for a result of tool ``name`` (module doc); never raises."""
    args = _arguments(arguments)
    kind = _KINDS.get(name.lower(), "")
    label = f"[{clip(name, _NAME_CHARS) or 'tool'}]"
    size = f"{len(text):,} chars"
    path = _value(args, *_PATH_KEYS) or "?"
    if kind == "read":
        start = _value(args, "offset", "start_line", "line", "from")
        where = f" from line {start}" if start else ""
        line = f"{label} {path}{where} → {_lines(text):,} lines, {size}"
    elif kind == "write":
        written = args.get("content")
        count = f", {_lines(written):,} lines written" if isinstance(written, str) else ""
        line = f"{label} {path}{count} → {_first_line(text)}"
    elif kind == "terminal":
        command = _value(args, "command", "cmd", "script", "input") or "?"
        found = _EXIT.search(text)
        code = found.group(1) if found else "?"
        line = f"{label} $ {command} → exit {code}, {_lines(text):,} lines of output"
    elif kind == "search":
        pattern = _value(args, "pattern", "query", "regex", "glob", "q") or "?"
        where = _value(args, "path", "dir", "directory", "cwd") or "."
        line = f"{label} '{pattern}' in {where} → {_lines(text):,} lines"
    elif kind == "edit":
        line = f"{label} {path} → {_first_line(text)}"
    elif kind == "web_search":
        line = f"{label} '{_value(args, 'query', 'q', 'search') or '?'}' → {size}"
    elif kind == "fetch":
        line = f"{label} {_value(args, 'url', 'urls', 'href') or '?'} → {size}"
    else:
        shown = [f"{key}={clip(str(value), 40)}" for key, value in list(args.items())[:2]]
        line = f"{label} {', '.join(shown)} → {_lines(text):,} lines, {size}"
    return clip(line)
