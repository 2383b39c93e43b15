"""Tool-result spill and the per-turn budget: which results go to a file, and their stand-ins.

Issue 11, "Layer 2 and 3", re-imagining Hermes Agent's tool-result budget layers
(``../shared/reference/hermes-behaviour.md`` §1). This module is the pure policy; writing
the spill file is ``sessionwarden.store.spill`` (the one I/O part), and the admission
stage that joins them comes later.

Rules:

The overview: docs/architecture/context.md, 'The stage, per call'.

* **Limits** (:func:`resolve_limits`). A result's threshold is, in order: none for a
  pinned tool (``read_file`` is never spilled, or spill → read → spill would loop), else
  ``[tools].overrides[tool]``, else ``[tools].result_size_chars``. The per-turn budget is
  ``turn_budget_chars``. When the user did not set ``result_size_chars`` /
  ``turn_budget_chars`` themselves, they shrink with the model's window so a small model
  is protected too: 15 % and 30 % of the window in characters (4 per token), never below
  8,000 and 16,000, never above the configured value (Hermes #23767: small models
  overflowed). Values the user set are taken as given, overrides included.
* **Per result** (:func:`plan_turn`, first pass): a result longer than its threshold is
  spilled; its preview budget is ``min(preview_chars, threshold)``, so a small override
  bounds the stand-in too.
* **Per turn** (second pass): while the turn's results together exceed the budget, the
  largest remaining result is spilled (ties: the earlier one). Pinned and already-spilled
  results count towards the total but are never candidates, and a result whose stand-in
  would be no shorter than itself is not spilled (Hermes's forced spill of a tiny result
  only made it longer).
* **Stand-ins.** :func:`preview` is the head of the content, cut just after the last
  newline before the budget when that newline lies past half of it, else cut hard at
  the budget (Hermes's ``generate_preview``). :func:`spilled_text` is a note (sizes and
  the file's path, and that the agent should read the file rather than run the tool
  again), the preview, and an end line. When the file cannot be written,
  :func:`truncated_text` is the preview and an explicit :data:`TRUNCATION_MARKER` line.
* **Evicted files** (issue 21, item 11). The spill directory has a quota, and a file may
  be evicted while a live session's stand-in still names it. That stand-in is then
  re-rendered (:func:`evicted_text`): its "Full output" lines become an
  :data:`EVICTED_LINE` saying the file was deleted to keep the directory under its
  quota, that the preview is all that is left, and to run the tool again for the rest.
  The rest of the stand-in (sizes, preview) stays as it was.
* **Names.** A spill file is named by the SHA-256 of the content's UTF-8 bytes
  (:func:`spill_name`), never by a client-supplied id: no id can escape the directory,
  and the same content always lands in the same file.
* **No secret at rest** (issue 21, item 9). A result is scrubbed (the ``scrub`` given to
  :func:`plan_turn`: the daemon passes the log's redactor, registered keys and key-shaped
  patterns) before anything is derived from it: the file, its name (the hash names the
  scrubbed content), the preview and the inline fallback all come from the scrubbed
  text, and the stand-in says that something was redacted (:data:`REDACTED_NOTE`).
  Only a spilled result is scrubbed: one sent inline is the client's own text.

Everything is deterministic: the same content, limits, directory and secrets give
byte-identical text, so a stateless client resending its history gets the very stand-in
it got before and the provider's prompt cache keeps hitting. Lengths are counted in characters (code
points), like the config's ``*_chars`` keys.

Decisions taken where the issue is silent: the file holds the content verbatim (its
name is its hash; Hermes's unwrapping of MCP envelopes is not done); lone surrogates,
which JSON can smuggle into a string, are written as U+FFFD so the file is valid UTF-8
(:func:`spill_bytes`); Hermes's ``mcp_`` prefix cap is not reproduced (``overrides``
covers it); the note precedes the preview so the agent learns first where the rest is.
"""

import hashlib
import posixpath
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Literal

import msgspec
from sessionwarden.config import ToolsConfig

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_RESULT_SIZE_CHARS",
    "DEFAULT_TURN_BUDGET_CHARS",
    "EVICTED_LINE",
    "MIN_RESULT_SIZE_CHARS",
    "MIN_TURN_BUDGET_CHARS",
    "PINNED_TOOLS",
    "PREVIEW_END",
    "REDACTED_NOTE",
    "RESULT_WINDOW_FRACTION",
    "SPILL_SUFFIX",
    "TRUNCATION_MARKER",
    "TURN_WINDOW_FRACTION",
    "Limits",
    "SpillDecision",
    "SpillReason",
    "TurnPlan",
    "evicted_text",
    "oversized_limits",
    "plan_turn",
    "preview",
    "resolve_limits",
    "spill_bytes",
    "spill_name",
    "spill_note",
    "spilled_text",
    "truncated_text",
]

#: Tools whose results are never spilled: reading a spill file must not spill it again.
PINNED_TOOLS: frozenset[str] = frozenset({"read_file"})
#: The spill file's name is ``<sha256 hex><SPILL_SUFFIX>`` (``store.spill`` agrees).
SPILL_SUFFIX = ".txt"
#: The characters per token used to turn a window in tokens into characters.
CHARS_PER_TOKEN = 4
#: Shares of the window (in characters) for the unset per-result and per-turn limits.
RESULT_WINDOW_FRACTION = 0.15
TURN_WINDOW_FRACTION = 0.30
#: The limits when ``[tools]`` does not set them and the window is unknown.
DEFAULT_RESULT_SIZE_CHARS = 100_000
DEFAULT_TURN_BUDGET_CHARS = 200_000
#: Floors of the window-scaled limits: below them a preview is all a result could be.
MIN_RESULT_SIZE_CHARS = 8_000
MIN_TURN_BUDGET_CHARS = 16_000
#: The line that closes a spilled result's stand-in (after the preview).
PREVIEW_END = "\n[end of preview]"
#: How the inline fallback's last line starts, so a reader can tell it was cut.
TRUNCATION_MARKER = "[sessionwarden truncated this tool result"
#: How the line that replaces "Full output" starts once the file was evicted.
EVICTED_LINE = "Evicted: "
_FULL_OUTPUT = "\nFull output: "
_PREVIEW_START = "Preview (the first "
#: The line a stand-in carries when scrubbing changed the result (file and preview alike).
REDACTED_NOTE = ("Secrets in it (API keys, tokens) were redacted: each is replaced by"
                 " [REDACTED:fp:…] in the file and in the preview.\n")

#: Why a result is spilled: over its own threshold, or to bring its turn under budget.
SpillReason = Literal["threshold", "turn_budget"]


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The limits in force for one model: per-result thresholds, turn budget, preview size."""

    result_size_chars: int
    turn_budget_chars: int
    preview_chars: int
    overrides: dict[str, int] = msgspec.field(default_factory=dict)
    pinned: frozenset[str] = PINNED_TOOLS

    @property
    def smallest(self) -> int:
        """The lowest threshold of any tool: no result this long or shorter is spilled."""
        return min([self.result_size_chars, *self.overrides.values()])

    def threshold(self, tool_name: str) -> int | None:
        """The length above which a result of ``tool_name`` is spilled; None = never."""
        if tool_name in self.pinned:
            return None
        return self.overrides.get(tool_name, self.result_size_chars)


def resolve_limits(tools: ToolsConfig, context_length: int | None) -> Limits:
    """The limits for a model of ``context_length`` tokens (None or ≤ 0: unknown).

    A limit the user wrote (``result_size_chars``, ``turn_budget_chars`` not None) is taken
    as given; an absent one is its default, shrunk to a known window.
    """
    result, turn = tools.result_size_chars, tools.turn_budget_chars
    window = context_length * CHARS_PER_TOKEN if context_length and context_length > 0 else 0
    if result is None:
        result = DEFAULT_RESULT_SIZE_CHARS
        if window:
            result = max(MIN_RESULT_SIZE_CHARS, min(int(window * RESULT_WINDOW_FRACTION),
                                                    result))
    if turn is None:
        turn = DEFAULT_TURN_BUDGET_CHARS
        if window:
            turn = max(MIN_TURN_BUDGET_CHARS, min(int(window * TURN_WINDOW_FRACTION), turn))
    return Limits(
        result_size_chars=result,
        turn_budget_chars=turn,
        preview_chars=tools.preview_chars,
        overrides=dict(tools.overrides),
    )


def oversized_limits(tools: ToolsConfig, windows: Mapping[str, int]) -> list[str]:
    """Warnings for written limits larger than a model's whole window (``windows``: name → tokens).

    Such a limit lets one result (or one turn) fill the window; it is kept as written —
    the user's word — and said once at start, not silently changed.
    """
    written = {name: value for name, value in (
        ("result_size_chars", tools.result_size_chars),
        ("turn_budget_chars", tools.turn_budget_chars),
        *((f"overrides.{tool}", cap) for tool, cap in tools.overrides.items()))
        if value is not None}
    found = []
    for name, value in written.items():
        over = sorted(model for model, tokens in windows.items()
                      if value > tokens * CHARS_PER_TOKEN)
        if over:
            shown = ", ".join(over[:3]) + (f" and {len(over) - 3} more" if len(over) > 3 else "")
            found.append(f"[tools].{name} = {value:,} characters is larger than the whole "
                         f"context window of {shown} (~{CHARS_PER_TOKEN} characters a token): "
                         "one such result fills it; kept as written")
    return found


def preview(content: str, budget: int) -> str:
    """The head of ``content`` in at most ``budget`` characters (``budget`` ≥ 1).

    Cut just after the last newline within the budget if it lies past half the budget,
    so the preview ends on a whole line; otherwise cut hard at the budget.
    """
    if len(content) <= budget:
        return content
    newline = content.rfind("\n", 0, budget)
    if newline > budget // 2:
        return content[: newline + 1]
    return content[:budget]


def spill_bytes(content: str) -> bytes:
    """The bytes a spill file holds for ``content``: UTF-8, lone surrogates as U+FFFD."""
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        # A JSON body may carry "\ud800"; the file must still be valid UTF-8.
        lenient = content.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return lenient.encode("utf-8")


def spill_name(content: str) -> str:
    """The spill file's name for ``content``: SHA-256 hex of :func:`spill_bytes`, suffixed."""
    return hashlib.sha256(spill_bytes(content)).hexdigest() + SPILL_SUFFIX


def _size(nbytes: int) -> str:
    kib = nbytes / 1024
    return f"{kib / 1024:.1f} MB" if kib >= 1024 else f"{kib:.1f} KB"


def spill_note(path: str, chars: int, nbytes: int, shown: int, redacted: bool = False) -> str:
    """The note that heads a spilled result's stand-in, up to where the preview starts.

    Args:
        path: where the full output was saved.
        chars: the full result's length in characters.
        nbytes: the spill file's size in bytes.
        shown: the preview's length in characters.
        redacted: scrubbing replaced secrets in it (:data:`REDACTED_NOTE` is added).
    """
    return (
        f"[sessionwarden saved this tool result to a file: it was too large to send"
        f" inline ({chars:,} characters, {_size(nbytes)})]\n"
        f"{REDACTED_NOTE if redacted else ''}"
        f"Full output: {path}\n"
        "Read that file (in pages: offset and limit) if you need more than the preview;"
        " do not run the tool or fetch the data again to see it.\n"
        f"Preview (the first {shown:,} characters):\n"
    )


def spilled_text(content: str, path: str, budget: int, redacted: bool = False) -> str:
    """The stand-in for ``content`` saved at ``path``: note, preview (``budget``), end line.

    ``content`` is what the file holds (already scrubbed); ``redacted`` says scrubbing
    changed it.
    """
    head = preview(content, budget)
    note = spill_note(path, len(content), len(spill_bytes(content)), len(head), redacted)
    return note + head + PREVIEW_END


def truncated_text(content: str, budget: int, redacted: bool = False) -> str:
    """The inline fallback when the spill file could not be written: preview and marker."""
    head = preview(content, budget)
    secrets = "; secrets in it were redacted" if redacted else ""
    return (
        f"{head}\n{TRUNCATION_MARKER}: showing the first {len(head):,} of"
        f" {len(content):,} characters; the full output could not be saved{secrets}]"
    )


def evicted_text(stand_in: str, spill_dir: str, gone: Collection[str]) -> str:
    """``stand_in`` said as evicted if the file it names is in ``gone``; else unchanged.

    Only a stand-in this module wrote for ``spill_dir`` is changed: its "Full output"
    line and the advice to read the file are replaced by one :data:`EVICTED_LINE`.
    """
    start = stand_in.find(_FULL_OUTPUT)
    if start < 0:
        return stand_in
    line_end = stand_in.find("\n", start + 1)
    preview_at = stand_in.find(_PREVIEW_START, line_end)
    if line_end < 0 or preview_at < 0:
        return stand_in
    path = stand_in[start + len(_FULL_OUTPUT):line_end]
    directory, name = posixpath.split(path)
    if directory != spill_dir or name not in gone:
        return stand_in
    return (
        f"{stand_in[:start]}\n{EVICTED_LINE}the file {path} was deleted to keep the spill"
        " directory under its quota ([tools] spill_max_mib); the preview below is all that"
        " is left of it: run the tool again if you need the rest.\n"
        f"{stand_in[preview_at:]}"
    )


def _same(text: str) -> str:
    return text


class SpillDecision(msgspec.Struct, frozen=True, kw_only=True):
    """One result to spill, and its stand-in should the file be written.

    Attributes:
        index: the result's position in the turn's list.
        reason: over its own threshold, or largest while the turn was over budget.
        name: the spill file's name (:func:`spill_name` of ``content``).
        chars: the scrubbed result's full length in characters.
        preview_chars: the preview budget used (for :func:`truncated_text` on a failure).
        replacement: :func:`spilled_text` at ``<spill_dir>/<name>``.
        content: the result scrubbed: what the file holds, what a fallback previews.
        redacted: scrubbing changed the result.
    """

    index: int
    reason: SpillReason
    name: str
    chars: int
    preview_chars: int
    replacement: str
    content: str
    redacted: bool = False


class TurnPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`plan_turn` decided for one assistant turn's tool results.

    ``spills`` is in index order; ``chars_after`` counts each spilled result at its
    stand-in's length. ``chars_after`` stays over ``budget`` only when no result left
    could shrink (all pinned, already spilled, spilled, or no longer than a stand-in).
    """

    spills: tuple[SpillDecision, ...]
    chars_before: int
    chars_after: int
    budget: int


def _decide(
    index: int, original: str, reason: SpillReason, budget: int, spill_dir: str,
    scrub: Callable[[str], str],
) -> SpillDecision:
    # Scrubbed first: the name, the file, the preview and the sizes are the scrubbed
    # text's, so no secret reaches the disk and the hash names what the file holds.
    content = scrub(original)
    redacted = content != original
    name = spill_name(content)
    return SpillDecision(
        index=index,
        reason=reason,
        name=name,
        chars=len(content),
        preview_chars=budget,
        replacement=spilled_text(content, posixpath.join(spill_dir, name), budget, redacted),
        content=content,
        redacted=redacted,
    )


def plan_turn(
    results: Sequence[tuple[str, str, bool]], limits: Limits, spill_dir: str,
    scrub: Callable[[str], str] = _same,
) -> TurnPlan:
    """Decide which of one turn's tool results to spill.

    Args:
        results: ``(tool_name, content, already_spilled)`` for each tool result of the
            turn, in order; an already-spilled result's content is its stand-in.
        limits: from :func:`resolve_limits`.
        spill_dir: the spill directory as the agent should see it (named in the notes);
            pass ``str(SpillStore.directory)`` so a note's path is the file's path.
        scrub: replaces the secrets of a result about to be spilled (the daemon's
            redactor); the identity by default.
    """
    decided: dict[int, SpillDecision] = {}
    sizes = [len(content) for _, content, _ in results]
    before = sum(sizes)
    smallest = limits.smallest if limits.overrides else limits.result_size_chars
    if before <= limits.turn_budget_chars and (not sizes or max(sizes) <= smallest):
        # Nothing over any threshold, the turn within budget: the common case, decided
        # without a look at each tool.
        return TurnPlan(spills=(), chars_before=before, chars_after=before,
                        budget=limits.turn_budget_chars)
    candidates: list[int] = []
    for index, (tool, content, spilled) in enumerate(results):
        threshold = limits.threshold(tool)
        if spilled or threshold is None:
            continue
        if len(content) > threshold:
            budget = min(limits.preview_chars, threshold)
            decided[index] = _decide(index, content, "threshold", budget, spill_dir, scrub)
            sizes[index] = len(decided[index].replacement)
        else:
            candidates.append(index)
    total = sum(sizes)
    # Largest first; sorted() is stable, so equal sizes keep their order.
    for index in sorted(candidates, key=lambda i: -sizes[i]):
        if total <= limits.turn_budget_chars:
            break
        content = results[index][1]
        if len(content) <= limits.preview_chars:
            continue  # its stand-in would be the whole of it plus the note
        decision = _decide(index, content, "turn_budget", limits.preview_chars, spill_dir,
                           scrub)
        if len(decision.replacement) >= len(content):
            continue
        decided[index] = decision
        total += len(decision.replacement) - sizes[index]
        sizes[index] = len(decision.replacement)
    return TurnPlan(
        spills=tuple(decided[i] for i in sorted(decided)),
        chars_before=before,
        chars_after=total,
        budget=limits.turn_budget_chars,
    )
