"""Compression phase 3, the builtin summariser: a structured summary of the middle, free.

Issue 11 ("Phases", item 3): the compressed middle of a history is replaced by a summary
in a structured template, updated iteratively from the previous summary. With
``summariser = "builtin"`` (the default) the summary is built deterministically from the
messages themselves — no model call, zero cost, zero latency. The template's sections
follow hermes-behaviour.md §2.6 (its fallback summary, §2.7, is the closest relative);
the heuristics and wording are ours.

Rules:

The overview: docs/architecture/context.md, 'The summary's role and mark'.

:class:`Summary` holds the sections as tuples of short one-line entries; :func:`render`
writes them as stable Markdown-ish text (a fixed header, sections in a fixed order, empty
ones left out); :func:`bound` cuts a summary to a size; :func:`builtin_summary` builds one.

The heuristics, per section (every line put on one line and clipped):

* goal — the previous summary's goal if it has one, else the text of the first user
  message of the middle with text (clipped to :data:`GOAL_CHARS`).
* pending_asks — user messages with text not followed, later in the middle, by an
  assistant message with text. The previous summary's asks stay pending unless the middle
  holds an assistant text at all (it then answered them: they move to completed_actions
  as ``Answered: <ask>``). Only the newest :data:`MAX_PENDING_ASKS` are kept.
* completed_actions — one line per answered tool call, in the order of the results:
  ``domain.context.prune_lines.summary`` (tool, target, outcome). A result answering no call is
  summarised with its own name (or ``tool``).
* active_state — calls still waiting for a result (``Awaiting [name] args``) and the last
  assistant text of the middle (``Last reply: …``).
* blocked — tool results that failed: a non-zero exit code, or a line mentioning
  ``error``, ``traceback``, ``exception``, ``failed`` or ``fatal``; the line is the
  call's one-line summary followed by the first such line of output. (A search whose
  hits mention ``error`` is a false positive; cheap to read past, costly to miss.)
* decisions — sentences of assistant text with a cue word (``must``, ``don't``,
  ``never``, ``always``, ``decided``, ``we will``, …) and sentences of user text with a
  decision cue (``decided``, ``we will``, ``let's``, ``go with``, …).
* constraints — sentences of user text with a constraint cue (``must``, ``don't``,
  ``do not``, ``never``, ``always``, ``only``, ``should not``, ``make sure``, …).
* relevant_files — paths from tool-call arguments (keys such as ``path``, ``file``,
  ``filename``, also lists of them) and from user/assistant text (a rooted path, or one
  ending in a known extension; URLs removed first, and a bare ``a/b`` is left out as too
  often prose), deduplicated, in order of first appearance. Tool *output* is not read for
  paths: a directory listing would drown the section.
* critical_context — system-role text inside the middle and sentences with ``important``,
  ``remember``, ``note that``, ``critical`` or ``warning``.

Opaque parts (images, audio, reasoning) are ignored: nothing of them is summarised.

Decisions (the issue is silent on them):

* Iterative merge: every section of the new summary is the previous one's lines followed
  by the new lines not already there (exact-match deduplication), so summarising twice
  never loses what the first summary held — unless :func:`bound` has to cut it. This
  holds for active_state too, so it keeps older ``Last reply``/``Awaiting`` lines (the
  newest last); a call answered only in a later middle leaves its ``Awaiting`` line, and
  its result is summarised by the result's own name.
* :func:`bound` cuts the *oldest* line of the *longest* section (in characters) until the
  rendered text fits, never the goal or the pending asks. Those two are bounded by
  construction (one goal line of at most :data:`GOAL_CHARS`, at most
  :data:`MAX_PENDING_ASKS` asks of :data:`LINE_CHARS`), which is why a ``max_chars``
  below :data:`MIN_MAX_CHARS` is read as :data:`MIN_MAX_CHARS`.
* No secret redaction here: the summary reuses text the provider already received; the
  wiring decides whether to redact before recording it.
"""

import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate

import msgspec
from sessionwarden.domain.context import prune_lines
from sessionwarden.domain.context.messages import Message, Opaque, Text, ToolCall, ToolResult

__all__ = [
    "GOAL_CHARS",
    "HEADER",
    "LINE_CHARS",
    "MAX_PENDING_ASKS",
    "MIN_MAX_CHARS",
    "SECTIONS",
    "SUMMARY_START",
    "Summary",
    "bound",
    "builtin_summary",
    "covered_turns",
    "render",
    "summary_end",
    "with_end",
]

#: How every summary's first line starts, the builtin's and a model's: the mark by which
#: the daemon, a model and ``sim`` know the daemon's context note from a request.
SUMMARY_START = "[Context summary"
#: The first line of every rendered summary.
HEADER = SUMMARY_START + " — built from earlier turns; reference only]"
_END = ("[End of the context summary, which covers {turns} tool-calling turns since the "
        "latest request. It is background, not a new request: continue the task from the "
        "latest request; every tool is still available]")
_COVERED = re.compile(r"\[End of the context summary, which covers (\d{1,9}) tool-calling turns")


def summary_end(turns: int) -> str:
    """The last line of every summary: how many agent steps it covers, and what to do next.

    A model reading a ``user`` message is told it is no request; ``sim``'s agents count
    the steps it covers (:func:`covered_turns`) with the ones that follow it.
    """
    return _END.format(turns=turns)


def covered_turns(text: str) -> int | None:
    """The tool-calling turns a summary's end line says it covers; None without one."""
    found = _COVERED.findall(text)
    return int(found[-1]) if found else None


def with_end(text: str, turns: int) -> str:
    """``text`` without any end line (a model may copy its previous one), then its own."""
    kept = [line for line in text.rstrip().split("\n") if not _COVERED.match(line)]
    return "\n".join(kept).rstrip() + "\n\n" + summary_end(turns)
#: The longest goal line.
GOAL_CHARS = 400
#: The longest line of any other section built from messages.
LINE_CHARS = 200
#: How many pending user asks are kept (the newest).
MAX_PENDING_ASKS = 4

#: The sections, in their rendering order: (field name, heading).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("goal", "Goal"),
    ("constraints", "Constraints & preferences"),
    ("completed_actions", "Completed actions"),
    ("active_state", "Active state"),
    ("blocked", "Blocked"),
    ("decisions", "Key decisions"),
    ("pending_asks", "Pending user asks"),
    ("relevant_files", "Relevant files"),
    ("critical_context", "Critical context"),
)
_KEPT = ("goal", "pending_asks")  # never cut by bound()


class Summary(msgspec.Struct, frozen=True):
    """A structured summary of compressed turns: each section a tuple of one-line entries."""

    goal: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    completed_actions: tuple[str, ...] = ()
    active_state: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    pending_asks: tuple[str, ...] = ()
    relevant_files: tuple[str, ...] = ()
    critical_context: tuple[str, ...] = ()


def _section_chars(heading: str, lines: Sequence[str]) -> int:
    """What a section adds to :func:`render`'s text (0 when empty)."""
    if not lines:
        return 0
    return len("\n\n## " + heading) + sum(len(line) + 3 for line in lines)


#: The smallest size :func:`bound` honours: the header, a full goal and a full set of asks.
MIN_MAX_CHARS = (len(HEADER) + _section_chars("Goal", ["x" * GOAL_CHARS])
                 + _section_chars("Pending user asks", ["x" * LINE_CHARS] * MAX_PENDING_ASKS))


def render(summary: Summary) -> str:
    """The summary as text, the same for equal summaries.

    :data:`HEADER`, then each non-empty section as a blank line, ``## Heading`` and one
    ``- line`` per entry, in :data:`SECTIONS` order.
    """
    out = [HEADER]
    for field, heading in SECTIONS:
        lines: tuple[str, ...] = getattr(summary, field)
        if lines:
            out += ["", "## " + heading]
            out += ["- " + line for line in lines]
    return "\n".join(out)


def bound(summary: Summary, max_chars: int) -> Summary:
    """``summary`` cut until ``render`` fits ``max(max_chars, MIN_MAX_CHARS)`` characters.

    Drops the oldest line of the longest cuttable section, again and again; the goal and
    the pending asks are never cut (module doc).
    """
    limit = max(max_chars, MIN_MAX_CHARS)
    sections = {field: getattr(summary, field) for field, _ in SECTIONS}
    headings = dict(SECTIONS)
    sizes = {field: _section_chars(headings[field], sections[field]) for field in sections}
    total = len(HEADER) + sum(sizes.values())
    if total <= limit:
        return summary
    first = dict.fromkeys(sections, 0)  # the oldest line still kept, per section
    order = [field for field, _ in SECTIONS if field not in _KEPT]
    while total > limit:
        candidates = [field for field in order if first[field] < len(sections[field])]
        if not candidates:
            break
        field = max(candidates, key=lambda name: sizes[name])  # first of equals: stable
        # It stays the one cut while it is longer than every other candidate (or as long
        # as one that comes after it): cut its lines in a row, the others do not change.
        rivals = [sizes[name] + (order.index(name) < order.index(field))
                  for name in candidates if name != field]
        beat = max(rivals, default=-1)  # it must stay >= beat to be cut again
        lines = sections[field]
        while total > limit and first[field] < len(lines) and sizes[field] >= beat:
            total -= len(lines[first[field]]) + 3
            sizes[field] -= len(lines[first[field]]) + 3
            first[field] += 1
            if first[field] == len(lines):  # the heading goes with the last line
                total -= sizes[field]
                sizes[field] = 0
    return Summary(**{field: tuple(lines[first[field]:]) if field in first else lines
                      for field, lines in sections.items()})


# ------------------------------------------------------------------------ heuristics

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_CONSTRAINT = re.compile(
    r"\b(must|mustn't|don't|do not|never|always|only|should not|shouldn't|make sure|"
    r"avoid|required?)\b", re.IGNORECASE)
_DECISION = re.compile(
    r"\b(decided|decide|we will|we'll|let's|go with|going with|chose|choose|instead of|"
    r"plan is)\b", re.IGNORECASE)
_CRITICAL = re.compile(r"\b(important|remember|note that|critical|warning)\b", re.IGNORECASE)
_ERROR = re.compile(r"\b(error|traceback|exception|failed|fatal)\b", re.IGNORECASE)
_EXIT = re.compile(r"\bexit(?:[ _]?(?:code|status))?\"?\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# A path is rooted (``/etc/hosts``, ``./run.sh``, ``~/x``) or ends in a known extension
# (``src/app.py``, ``README.md``): a bare ``a/b`` is too often prose (``and/or``).
_EXTENSION = (r"\.(?:py|pyi|md|rst|txt|toml|json|yaml|yml|ini|cfg|js|jsx|ts|tsx|rs|go|c|h|"
              r"cpp|hpp|java|kt|rb|sh|sql|html|css|lock|csv|xml|log|env)")
_PATH = re.compile(
    r"(?<![\w/.~-])((?:~|\.{1,2})?/(?:[\w.-]+/)*[\w.-]*\w"
    r"|(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*" + _EXTENSION + r")(?![\w/])")
_EXTENSION_END = re.compile(_EXTENSION + r"(?![\w/])")
# Where _CONSTRAINT, _DECISION and _CRITICAL may match a sentence, looked for in the
# folded text at once (one pattern stands for those it is part of: "must" for
# "mustn't", "decide" for "decided"; a sentence is flattened, hence the \s+).
_CONSTRAINT_CUES = re.compile(r"must|don't|do\s+not|never|always|only|should\s+not|"
                              r"shouldn't|make\s+sure|avoid|require")
_DECISION_CUES = re.compile(r"decide|we\s+will|we'll|let's|go\s+with|going\s+with|chose|"
                            r"choose|instead\s+of|plan\s+is")
_CRITICAL_CUES = re.compile(r"important|remember|note\s+that|critical|warning")
_PATH_KEYS = ("path", "file_path", "filename", "file", "target_file", "paths", "files",
              "filepath", "output_path", "source", "destination")
_decode = msgspec.json.Decoder().decode
#: Where ``_EXIT`` and ``_ERROR`` can match: at one of these, case-insensitively.
_WORDS = ("exit", "error", "traceback", "exception", "failed", "fatal")
#: What ``str.splitlines`` splits on.
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _is_summary_text(part: object) -> bool:
    # An earlier summary in the middle is merged as ``previous`` (a model's is passed to
    # the model as its previous text), never read again as the user's words: its header
    # became a "pending ask" and its sections a "constraint".
    return isinstance(part, Text) and part.text.startswith(SUMMARY_START)


def _text(parts: Iterable[object]) -> str:
    return "\n".join(part.text for part in parts if isinstance(part, Text))


def _sentences(text: str) -> list[str]:
    return [clipped for piece in _SENTENCES.split(text)
            if (clipped := prune_lines.clip(piece, LINE_CHARS))]


def _argument_paths(arguments: str) -> list[str]:
    try:
        value = _decode(arguments)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        return []
    if not isinstance(value, dict):
        return []
    found: list[str] = []
    for key in _PATH_KEYS:
        item = value.get(key)
        for candidate in item if isinstance(item, list) else [item]:
            if isinstance(candidate, str) and candidate.strip():
                found.append(prune_lines.clip(candidate, LINE_CHARS))
    return found


def _text_paths(text: str) -> list[str]:
    if "://" in text:
        text = _URL.sub(" ", text)
    if "/" not in text and not _EXTENSION_END.search(text):
        return []  # a path has a slash or ends in an extension: no need to look
    return [prune_lines.clip(match, LINE_CHARS) for match in _PATH.findall(text)]


def _failure(text: str) -> str:
    """The first line of ``text`` saying the tool failed, or ``""``.

    A line fails when its first ``exit`` match gives a non-zero code or a failure word
    is in it. Both patterns start with one of :data:`_WORDS`, so they are tried only
    where the folded text has one (``prune_lines.fold``): an output of 100,000
    characters costs a few substring searches, not two regex scans of every line.
    """
    low = prune_lines.fold(text)
    found = {word: low.find(word) for word in _WORDS}  # the next of each, -1: no more
    nearest = min((at for at in found.values() if at >= 0), default=-1)
    if nearest < 0:
        return ""
    lines = text.splitlines(keepends=True)
    ends = list(accumulate(map(len, lines)))
    index = bisect_right(ends, nearest)
    while True:
        line = lines[index]
        end = ends[index]
        body = len(line) - (2 if line.endswith("\r\n") else 1 if line[-1] in _BREAKS else 0)
        if _fails(text, low, found, end - len(line) + body):
            return prune_lines.clip(line if body == len(line) else line[:body], LINE_CHARS)
        for word, at in found.items():  # past this line
            if 0 <= at < end:
                found[word] = low.find(word, end)
        nearest = min((at for at in found.values() if at >= 0), default=-1)
        if nearest < 0:
            return ""
        index = bisect_right(ends, nearest, index + 1)


def _envelope_failure(output: str) -> str | None:
    """The failure a JSON-envelope result reports, ``""`` for none; None if not one.

    Agents' tools often answer ``{"output": …, "exit_code": 0, "error": null}``: the
    envelope's own fields say whether the tool failed, and only its main text is
    scanned for failure lines — the key ``"error"`` of a result that succeeded is not a
    failure.
    """
    value = prune_lines.envelope(output)
    if value is None:
        return None
    code = value.get("exit_code", value.get("returncode"))
    error, stderr = value.get("error"), value.get("stderr")
    error = error.strip() if isinstance(error, str) else ""
    detail = error or (stderr.strip() if isinstance(stderr, str) else "")
    first = detail.splitlines()[0] if detail else ""
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return prune_lines.clip(f"exit {code}" + (f": {first}" if first else ""), LINE_CHARS)
    if error or value.get("success") is False or value.get("ok") is False:
        return prune_lines.clip(first or "failed", LINE_CHARS)
    main = prune_lines.envelope_main(value)
    return _failure(main) if isinstance(main, str) else ""


def _fails(text: str, low: str, found: dict[str, int], end: int) -> bool:
    """Whether the line ending at ``end`` fails, as ``_failure`` reads a line.

    ``found`` holds the next position of each word, none of them before the line.
    """
    at = found["exit"]
    while 0 <= at < end:
        match = _EXIT.match(text, at, end)  # the first match is what a search finds
        if match:
            if match.group(1).lstrip("-") != "0":
                return True
            break
        at = found["exit"] = low.find("exit", at + 1)
    for word in _WORDS[1:]:
        at = found[word]
        while 0 <= at < end:
            if _ERROR.match(text, at, end):
                return True
            at = found[word] = low.find(word, at + 1)
    return False


class _Builder:
    """Collects each section's new lines from the middle, deduplicated, in order."""

    def __init__(self) -> None:
        # dicts as ordered sets: a long middle has thousands of lines to deduplicate
        self.lines: dict[str, dict[str, None]] = {field: {} for field, _ in SECTIONS}

    def add(self, field: str, line: str) -> None:
        if line:
            self.lines[field].setdefault(line)

    def read_text(self, role: str, text: str) -> None:
        # Each cue pattern matches a sentence only where its words are in the text: most
        # texts have none, and their sentences need not be searched.
        low = prune_lines.fold(text)
        critical = _CRITICAL_CUES.search(low) is not None
        constraint = _CONSTRAINT_CUES.search(low) is not None
        decision = _DECISION_CUES.search(low) is not None
        if critical or constraint or decision:
            for sentence in _sentences(text):
                if critical and _CRITICAL.search(sentence):
                    self.add("critical_context", sentence)
                if role == "user" and constraint and _CONSTRAINT.search(sentence):
                    self.add("constraints", sentence)
                elif (decision and _DECISION.search(sentence)) or (
                        role == "assistant" and constraint and _CONSTRAINT.search(sentence)):
                    self.add("decisions", sentence)
        for path in _text_paths(text):
            self.add("relevant_files", path)

    def read_result(self, result: ToolResult, call: ToolCall | None) -> None:
        name = result.name or (call.name if call else "") or "tool"
        arguments = call.arguments if call else ""
        output = _text(result.parts)
        line = prune_lines.summary(name, arguments, output)
        self.add("completed_actions", line)
        failure = _envelope_failure(output)
        if failure is None:
            failure = _failure(output)
        if failure:
            self.add("blocked", prune_lines.clip(f"{line} — {failure}", 2 * LINE_CHARS))


def _merge(old: Iterable[str], new: Iterable[str]) -> tuple[str, ...]:
    flat = (" ".join(item.split()) for item in old)
    return tuple(dict.fromkeys([*(line for line in flat if line), *new]))


def builtin_summary(middle: Sequence[Message], previous: Summary | None,
                    max_chars: int) -> Summary:
    """The builtin summary of ``middle``, merged into ``previous``, bounded (module doc).

    Deterministic, pure and total: any messages (empty, opaque-only, odd arguments) give
    a summary whose :func:`render` is at most ``max(max_chars, MIN_MAX_CHARS)`` long.
    """
    previous = previous or Summary()
    built = _Builder()
    open_calls: dict[str, list[ToolCall]] = {}
    asks: list[str] = []  # pending user asks of the middle, oldest first
    first_user = ""
    last_reply = ""
    old_asks = [line for line in (" ".join(ask.split()) for ask in previous.pending_asks)
                if line]
    for message in middle:
        text = _text(part for part in message.parts if not _is_summary_text(part))
        if message.role == "user" and text.strip():
            first_user = first_user or text
            asks.append(prune_lines.clip(text, LINE_CHARS))
        elif message.role == "assistant" and text.strip():
            for ask in old_asks:  # answered now: recorded where it happened
                built.add("completed_actions", "Answered: " + ask)
            old_asks = []
            asks.clear()  # a reply answers every ask before it
            last_reply = text
        elif message.role == "system" and text.strip():
            built.add("critical_context", prune_lines.clip(text, LINE_CHARS))
        if message.role in ("user", "assistant"):
            built.read_text(message.role, text)
        for part in message.parts:
            if isinstance(part, ToolResult):
                waiting = open_calls.get(part.call_id)
                built.read_result(part, waiting.pop(0) if waiting else None)
            elif isinstance(part, ToolCall):
                open_calls.setdefault(part.id, []).append(part)
                for path in _argument_paths(part.arguments):
                    built.add("relevant_files", path)
            elif isinstance(part, Opaque):
                continue  # carried, never summarised
    for calls in open_calls.values():
        for call in calls:
            built.add("active_state", prune_lines.clip(
                f"Awaiting [{call.name or 'tool'}] {call.arguments}", LINE_CHARS))
    if last_reply:
        built.add("active_state", prune_lines.clip("Last reply: " + last_reply, LINE_CHARS))

    pending = list(dict.fromkeys(line for line in [*old_asks, *asks] if line))
    goal = ([prune_lines.clip(line, GOAL_CHARS) for line in previous.goal if line.strip()][:1]
            or ([prune_lines.clip(first_user, GOAL_CHARS)] if first_user.strip() else []))
    fields: dict[str, tuple[str, ...]] = {}
    for field, _ in SECTIONS:
        fields[field] = _merge(getattr(previous, field), built.lines[field])
    fields["goal"] = tuple(goal)
    fields["pending_asks"] = tuple(prune_lines.clip(ask, LINE_CHARS)
                                   for ask in pending[-MAX_PENDING_ASKS:])
    return bound(Summary(**fields), max_chars)
