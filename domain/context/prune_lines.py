"""The one-line stand-ins of compression phase 1 (``domain.context.prune``): summaries and notes.

A pruned tool result must still tell the model what happened: which tool, on what, and
what came back. :func:`summary` builds that line from the call's arguments and the
result's text, per tool kind (recognised by name, with common aliases).

Rules:

The line per tool kind:

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

*JSON envelopes.* Many agents (Hermes among them) return a tool's output inside a JSON
object, ``{"output": "...", "exit_code": 0}`` or ``{"content": "...", "total_lines":
…}``, written on one line. When a result's text is such an object (:func:`main_text`),
its line counts and first lines are those of its main text field: the first of
:data:`MAIN_TEXT_KEYS` holding a string; with none, an array under
:data:`MAIN_LIST_KEYS` (a search's matches or files) counts one line per entry. The
size in chars stays the result's own, and the exit code is still read from the whole
text (an envelope's ``"exit_code": 2`` is found there).

*Speed.* A compression summarises hundreds of results of up to 100,000 characters, so
nothing here runs a regular expression over a whole output: :func:`clip` flattens only
the head it keeps, lines are counted without being built (:func:`count_lines`), and the
exit code is looked for only where the text says ``exit`` (:func:`fold` keeps positions
so a case-insensitive search can start at the candidates).
"""

import re
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["MAIN_LIST_KEYS", "MAIN_TEXT_KEYS", "STAND_IN_MAX_CHARS", "clip", "count_lines",
           "dedupe_note", "envelope", "envelope_main", "exit_code", "fold", "main_text",
           "summary"]

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
_NON_SPACE = re.compile(r"\S")
_decode = msgspec.json.Decoder().decode


def clip(text: str, limit: int = STAND_IN_MAX_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``…`` when longer."""
    # Flattening a head of the text flattens a head of the whole (a whitespace run cut
    # short still becomes one space), so only as much as is kept is ever flattened.
    size = 2 * limit + 64
    while size < len(text):
        flat = _SPACES.sub(" ", text[:size]).lstrip()
        if len(flat.rstrip()) > limit:
            return flat[: limit - 1] + "…"
        size *= 4
    flat = _SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


#: What ``str.splitlines`` splits on (``\r\n`` counts once).
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def count_lines(text: str) -> int:
    """``len(text.splitlines())``, without building the lines."""
    if not text:
        return 0
    lines = text.count("\n")
    returns = text.count("\r")
    if returns:
        lines += returns - text.count("\r\n")
    for mark in _BREAKS[2:7] if text.isascii() else _BREAKS[2:]:
        if mark in text:
            lines += text.count(mark)
    return lines + (text[-1] not in _BREAKS)


def fold(text: str) -> str:
    """``text`` lower-cased, position for position, for a case-insensitive search.

    Every character that an ASCII letter matches under ``re.IGNORECASE`` becomes that
    letter (``İ``, ``ı`` → ``i``, ``ſ`` → ``s``, ``K`` → ``k``), and no character changes
    the length: so where ``fold(text)`` has a lower-case ASCII word is a superset of
    where such a pattern can start in ``text``.
    """
    if text.isascii():
        return text.lower()
    return text.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()


def exit_code(text: str, folded: str | None = None) -> str:
    """The exit code ``text`` states first (``"exit code: 2"``, ``"exit_code": 2``), or ``""``."""
    low = folded if folded is not None else fold(text)
    at = low.find("exit")
    while at >= 0:
        # A match starts at "exit" (or at a quote just before it, same group): the
        # leftmost candidate where the pattern holds is what a search would find.
        found = _EXIT.match(text, at)
        if found:
            return found.group(1)
        at = low.find("exit", at + 1)
    return ""


#: The keys of a JSON envelope's main text, in order of preference.
MAIN_TEXT_KEYS = ("output", "stdout", "content")
#: The keys of a JSON envelope's list of results (one line each) when it has no text.
MAIN_LIST_KEYS = ("matches", "files", "results")


def envelope(text: str) -> dict[str, Any] | None:
    """``text`` decoded when it is a JSON object (a tool's envelope), else None."""
    if not text.startswith("{") or not text.endswith("}"):
        return None
    try:
        value = _decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def envelope_main(value: Mapping[str, Any]) -> str | list[object] | None:
    """An envelope's main text, else its list of results, else None (module doc)."""
    for key in MAIN_TEXT_KEYS:
        found = value.get(key)
        if isinstance(found, str):
            return found
    for key in MAIN_LIST_KEYS:
        found = value.get(key)
        if isinstance(found, list):
            return found
    return None


def main_text(text: str) -> str | list[object]:
    """The main text of a JSON-envelope result (module doc), else ``text`` itself.

    A list (the envelope's results) when it has no main text but such a list.
    """
    value = envelope(text)
    main = envelope_main(value) if value is not None else None
    return text if main is None else main


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


def _lines(main: str | list[object]) -> int:
    return count_lines(main) if isinstance(main, str) else len(main)


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, clipped, without splitting all of it."""
    found = _NON_SPACE.search(text)
    if found is None:
        return "(empty)"
    start = found.start()  # on the first non-blank line; clip drops what precedes it
    size = 2 * _VALUE_CHARS + 64
    while True:
        chunk = text[start:start + size]
        line = chunk.splitlines()[0]
        if len(line) < len(chunk) or start + size >= len(text):
            return clip(line, _VALUE_CHARS)  # the whole line
        if len(_SPACES.sub(" ", line).strip()) > _VALUE_CHARS:
            return clip(line, _VALUE_CHARS)  # the line's head decides its clip
        size *= 4


def summary(name: str, arguments: str, text: str) -> str:
    """One informative line for a result of tool ``name`` (module doc); never raises."""
    args = _arguments(arguments)
    kind = _KINDS.get(name.lower(), "")
    label = f"[{clip(name, _NAME_CHARS) or 'tool'}]"
    size = f"{len(text):,} chars"
    path = _value(args, *_PATH_KEYS) or "?"
    if kind in ("web_search", "fetch"):
        main: str | list[object] = text  # sizes only: no need to read an envelope
    else:
        main = main_text(text)
    if kind == "read":
        start = _value(args, "offset", "start_line", "line", "from")
        where = f" from line {start}" if start else ""
        line = f"{label} {path}{where} → {_lines(main):,} lines, {size}"
    elif kind == "write":
        written = args.get("content")
        count = f", {count_lines(written):,} lines written" if isinstance(written, str) else ""
        line = f"{label} {path}{count} → {_first_line(main if isinstance(main, str) else text)}"
    elif kind == "terminal":
        command = _value(args, "command", "cmd", "script", "input") or "?"
        code = exit_code(text) or "?"
        line = f"{label} $ {command} → exit {code}, {_lines(main):,} lines of output"
    elif kind == "search":
        pattern = _value(args, "pattern", "query", "regex", "glob", "q") or "?"
        where = _value(args, "path", "dir", "directory", "cwd") or "."
        line = f"{label} '{pattern}' in {where} → {_lines(main):,} lines"
    elif kind == "edit":
        line = f"{label} {path} → {_first_line(main if isinstance(main, str) else text)}"
    elif kind == "web_search":
        line = f"{label} '{_value(args, 'query', 'q', 'search') or '?'}' → {size}"
    elif kind == "fetch":
        line = f"{label} {_value(args, 'url', 'urls', 'href') or '?'} → {size}"
    else:
        shown = [f"{key}={clip(str(value), 40)}" for key, value in list(args.items())[:2]]
        line = f"{label} {', '.join(shown)} → {_lines(main):,} lines, {size}"
    return clip(line)
