"""Context governance benchmark: our governance pass against Hermes Agent's compressor.

Run ``.venv/bin/python bench/context.py [--quick] [--no-hermes] [--session PATH]``. The
input is ``../shared/bench/hermes_session.json.gz`` (a real tool-heavy session, 2,001
messages, 7.3 MB; see its README) and its *first-trigger prefix*, the shortest prefix
that ends on a tool result and whose JSON reaches 96,000 tokens at 4 characters a token
(157 messages).

Section "cold governance pass" (issue 11, "Speed and memory"): for each input, in rounds
(every mode once per round, medians over rounds, ratios as medians of per-round ratios):

* Hermes Agent 0.19.0's ``ContextCompressor`` in its own venv, ``bench/.hermes-venv``
  (gitignored; ``pip install --no-deps hermes-agent==0.19.0`` on first use), driven by
  ``bench/hermes_driver.py`` in a subprocess: ``compress`` end to end with the summary
  call answering a fixed text, ``compress`` with the whole summariser replaced by that
  text (phases 1, 2 and 4, like-for-like with ours), the part of that spent in Hermes's
  rough whole-history estimate, and phase 1 alone;
* ours, in this process: what the context stage runs on a first call carrying the whole
  session, on the daemon's objects (chat items, decoded and governed outside the timed
  region, as Hermes gets its messages parsed): the spill (``spill_turns.plan_spills`` +
  ``apply_spills``), ``compaction.prepare`` (the cut, phase 1 on the head) and
  ``compaction.finish`` (assembly, new items) around the same fixed summary text;
* our phase 3, ``domain.context.summary.builtin_summary`` of the prepared middle and
  ``compaction.builtin``, on their own line (Hermes has no summary without a model);
* the floor (``tool_pairs`` + one pass over every part) and the decode the stage does
  before governing (digest + ``read_item`` of every item);
* msgspec's decode of the whole request body, the reference of the resend target.

If hermes-agent cannot be installed or driven, the script says so in one line and prints
our figures alone. Sections are functions taking the loaded :class:`Inputs`; more can be
appended to :data:`SECTIONS`. Numbers only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from sessionwarden.config import CompressionConfig, ToolsConfig
from sessionwarden.domain.context.compression import (
    Compaction,
    Prepared,
    builtin,
    finish,
    prepare,
    summary_budget,
    tokens_of,
)
from sessionwarden.domain.context.history import GovernedHistory, Item, digest
from sessionwarden.domain.context.messages import Message, history_chars, tool_pairs
from sessionwarden.domain.context.spill import Limits, resolve_limits
from sessionwarden.domain.context.spill_turns import SpillOutcome, apply_spills, plan_spills
from sessionwarden.domain.context.summary import builtin_summary
from sessionwarden.domain.context.trigger import trigger_tokens
from sessionwarden.upstream.chat_completions import ChatItems

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SESSION = ROOT.parent / "shared" / "bench" / "hermes_session.json.gz"
HERMES_VENV = BENCH / ".hermes-venv"
HERMES_PY = HERMES_VENV / "bin" / "python"
HERMES_MARKER = HERMES_VENV / ".installed"
HERMES_REQUIREMENT = "hermes-agent==0.19.0"
DRIVER = BENCH / "hermes_driver.py"

#: Both sides are timed in CPU time of their process (``hermes_driver.py`` too): on a
#: shared 2-core machine, wall time counts whatever else runs.
CLOCK = time.process_time
#: The window both sides are set up for (Hermes: ``config_context_length``).
CONTEXT_LENGTH = 128_000
#: The first-trigger prefix: Hermes's trigger at 128K (75 %, its small-window floor).
PREFIX_TRIGGER_TOKENS = 96_000
#: Where the spill notes say files are (nothing is written: decisions only).
SPILL_DIR = "/var/lib/sessionwarden/spill"
#: The chat-completions codec, as the daemon reads and writes items.
CODEC = ChatItems()

_SUMMARY_SECTIONS = (
    ("Historical Task Snapshot", "User asked (deterministic, from compacted turns): 'Search "
     "the codebase for every place we handle large file streaming and list them.'"),
    ("Goal", "Audit and harden the streaming and file-handling paths of the project, "
     "keeping the public API unchanged and the test suite green."),
    ("Constraints & Preferences", "- Python 3.11 only; no new dependencies.\n- Keep diffs "
     "small and reviewable; run the full test suite before each commit.\n- Never print or "
     "log credentials."),
    ("Completed Actions", "\n".join(
        f"{n}. PATCH src/module_{n}.py — fixed an off-by-one in the chunked reader, tests "
        f"pass [tool: patch]" for n in range(1, 13))),
    ("Active State", "- Working tree has uncommitted edits in src/streams.py and "
     "tests/test_streams.py.\n- Last test run: 412 passed, 2 failed (test_large_upload, "
     "test_resume_partial)."),
    ("Historical In-Progress State", "- Was tracing why resume_partial re-reads the first "
     "block after a seek."),
    ("Blocked", "- test_large_upload times out on the CI runner only (network sandbox)."),
    ("Key Decisions", "- Use a bounded queue between the reader and the writer.\n- Keep the "
     "legacy read_all() as a thin wrapper for compatibility."),
    ("Resolved Questions", "- Chunk size stays 64 KiB (measured: no gain above)."),
    ("Historical Pending User Asks", "- List every large-file streaming call site with a "
     "one-line assessment."),
    ("Relevant Files", "- src/streams.py\n- src/io/chunked.py\n- src/http/upload.py\n- "
     "tests/test_streams.py\n- tests/test_upload.py\n- docs/streaming.md"),
    ("Historical Remaining Work", "- Fix test_resume_partial.\n- Document the bounded "
     "queue.\n- Re-run the benchmarks."),
    ("Critical Context", "- The CI runner has no outbound network; tests that download "
     "must use the local fixture server on port 8765.\n- The previous maintainer's notes "
     "in docs/streaming.md are out of date on chunk sizes."),
)
#: The fixed summary text both sides get (a structured 3.6 KB summary, as the anchor's).
SUMMARY = "\n\n".join(f"## {title}\n{body}" for title, body in _SUMMARY_SECTIONS)
SUMMARY = (SUMMARY + "\n\n" + "Additional detail: " + "the session read, searched and "
           "patched the streaming code across many files. " * 40)[:3600]


def log(msg: str = "") -> None:
    print(msg, flush=True)


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (nproc {os.cpu_count()})"


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ms(x: float) -> str:
    return f"{x:.2f}" if x == x else "–"


# -- inputs ---------------------------------------------------------------------------------


@dataclass
class Input:
    """One input: its chat messages and request body, and the daemon's view of them.

    As the context stage sees a request: the leading system items apart, the others as
    raw items (``rest``) decoded once (``decoded``); ``history`` is the governed history
    after their spill, as the stage builds it before deciding to compress (digests and
    token estimates made when the items were appended), and ``reader`` hands
    ``prepare`` the messages decoded here instead of decoding every item again.
    """

    name: str
    messages: list[dict[str, Any]]
    body: bytes
    leading: int
    rest: list[bytes]
    decoded: list[Message]
    history: GovernedHistory
    reader: Decoded


@dataclass
class Inputs:
    """Everything a section gets: the session, its inputs and the run's settings."""

    path: Path
    inputs: list[Input]
    rounds: int
    warmup: int
    hermes: bool


def first_trigger_prefix(messages: Sequence[dict[str, Any]]) -> int:
    """Length of the shortest prefix ending on a tool result whose JSON reaches the trigger."""
    chars = 0
    for index, message in enumerate(messages):
        chars += len(msgspec.json.encode(message))
        if message.get("role") == "tool" and (chars + 3) // 4 >= PREFIX_TRIGGER_TOKENS:
            return index + 1
    return len(messages)


class Decoded:
    """The chat codec, but ``read_item`` returns the message decoded outside the timed region.

    ``prepare`` decodes every forwarded item (a compression may cost O(history)); Hermes
    is handed its messages decoded, so the cold pass is timed without that decode, and
    the decode is timed on its own (the "read" column).
    """

    items_key = "messages"

    def __init__(self, decoded: dict[int, Message]) -> None:
        self.decoded = decoded

    def read_item(self, raw: bytes) -> Message | str:
        return self.decoded[id(raw)]

    def write_item(self, message: Message) -> bytes:
        return CODEC.write_item(message)

    def is_system(self, raw: bytes) -> bool:
        return CODEC.is_system(raw)


def governed(name: str, messages: list[dict[str, Any]], limits: Limits) -> Input:
    """``messages`` as the context stage holds them once a first call has carried them all."""
    items = [msgspec.json.encode(message) for message in messages]
    leading = 0
    while leading < len(items) and CODEC.is_system(items[leading]):
        leading += 1
    rest = items[leading:]
    decoded = [read(raw) for raw in rest]
    plan = plan_spills(decoded, limits, SPILL_DIR, first=leading)
    spilled, _ = apply_spills(plan, SpillOutcome(), decoded, CODEC, "bench")
    kept = tuple(
        Item(digest(raw), len(raw), tokens_of(message), raw, -1) if raw is not None
        else Item(digest(rest[i]), len(rest[i]), tokens_of(message), None, i)
        for i, (message, raw) in enumerate(spilled))
    history = GovernedHistory(client=tuple(digest(raw) for raw in rest), items=kept,
                              call_id="bench", tokens=sum(item.tokens for item in kept))
    reader = Decoded({id(raw): message for raw, (message, _) in
                      zip(history.forwarded(rest), spilled, strict=True)})
    body = msgspec.json.encode({"model": "x", "messages": messages})
    return Input(name, messages, body, leading, rest, decoded, history, reader)


def read(raw: bytes) -> Message:
    message = CODEC.read_item(raw)
    if isinstance(message, str):
        raise SystemExit(f"error: the session holds an invalid message ({message})")
    return message


def load_inputs(args: argparse.Namespace) -> Inputs:
    raw = gzip.decompress(args.session.read_bytes())
    messages: list[dict[str, Any]] = msgspec.json.decode(raw)
    prefix = args.prefix or first_trigger_prefix(messages)
    limits = governance_settings()[0]
    inputs = [governed(name, messages[:count], limits)
              for name, count in (("whole", len(messages)), ("prefix", prefix))]
    return Inputs(args.session, inputs, args.rounds, args.warmup, not args.no_hermes)


# -- Hermes Agent, in its side venv -------------------------------------------------------


def ensure_hermes() -> Path | None:
    """The side venv's python with hermes-agent installed (installing it); None on failure."""
    if HERMES_MARKER.exists() and HERMES_PY.exists():
        return HERMES_PY
    log(f"installing {HERMES_REQUIREMENT} (--no-deps) into {HERMES_VENV.relative_to(ROOT)} …")
    try:
        if not HERMES_PY.exists():
            subprocess.run([sys.executable, "-m", "venv", str(HERMES_VENV)], check=True,
                           capture_output=True, timeout=300)
        pip = subprocess.run([str(HERMES_PY), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", "--no-deps", HERMES_REQUIREMENT],
                             capture_output=True, text=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"NOTE: Hermes Agent not measured: its venv could not be made ({exc})")
        return None
    if pip.returncode != 0:
        last = (pip.stderr.strip() or pip.stdout.strip()).splitlines()[-1:] or ["?"]
        log(f"NOTE: Hermes Agent not measured: pip install {HERMES_REQUIREMENT} exited "
            f"{pip.returncode} ({last[0][:200]})")
        return None
    HERMES_MARKER.write_text(HERMES_REQUIREMENT + "\n")
    return HERMES_PY


class Hermes:
    """The driver subprocess: one JSON command per line, one answer per line."""

    def __init__(self, python: Path, inputs: Inputs) -> None:
        self.proc = subprocess.Popen([str(python), str(DRIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=BENCH)
        try:
            self.info = self.ask({"session": str(inputs.path), "summary": SUMMARY,
                                  "context_length": CONTEXT_LENGTH,
                                  "inputs": {i.name: len(i.messages) for i in inputs.inputs}})
            if not self.info.get("ok"):
                raise RuntimeError(self.info.get("error", "the driver did not start"))
        except BaseException:
            self.close()
            raise

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise RuntimeError(f"the driver exited ({exc})") from None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            last = err.strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the driver exited: {last[0][:200]}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_hermes(inputs: Inputs) -> Hermes | None:
    if not inputs.hermes:
        log("Hermes Agent skipped (--no-hermes): our figures only")
        return None
    python = ensure_hermes()
    if python is None:
        return None
    try:
        hermes = Hermes(python, inputs)
    except (RuntimeError, OSError) as exc:
        log(f"NOTE: Hermes Agent not measured: its compressor could not be driven ({exc})")
        return None
    info = hermes.info
    module = Path(info["module"])
    log(f"hermes-agent {info['version']} in {HERMES_VENV.relative_to(ROOT)}, "
        f"{module.parent.name}/{module.name}; fake modules for what --no-deps left out: "
        f"{', '.join(info['stubbed']) or 'none'}")
    return hermes


# -- our governance pass ------------------------------------------------------------------


@dataclass
class ColdPass:
    """One cold pass: the time of each step (seconds) and what came out."""

    spill: float
    prepare: float
    finish: float
    spills: int
    prepared: Prepared | None
    compaction: Compaction | None

    @property
    def total(self) -> float:
        return self.spill + self.prepare + self.finish


def cold_pass(item: Input, limits: Limits, compression: CompressionConfig, threshold: int
              ) -> ColdPass:
    """What the context stage runs on a first call carrying ``item``, each step timed.

    The spill (``plan_spills`` over every new message, its stand-ins put in place:
    ``apply_spills``), then the compression as ``domain.admission.compression_stage`` runs it:
    ``compaction.prepare`` (the cut, twice when the tail is over its ceiling, and
    phase 1 on the head) and ``compaction.finish`` around the fixed summary text
    (assembly, the new items written, the new governed history).
    """
    t0 = CLOCK()
    plan = plan_spills(item.decoded, limits, SPILL_DIR, first=item.leading)
    spilled, _ = apply_spills(plan, SpillOutcome(), item.decoded, CODEC, "bench")
    t1 = CLOCK()
    # As the stage passes them: the call's new items, as governed, already read.
    prepared = prepare(item.history, item.rest, item.reader, compression, threshold,
                       known=[message for message, _ in spilled])
    t2 = CLOCK()
    compaction = (finish(prepared, SUMMARY, CODEC, summariser="bench") if prepared is not None
                  else None)
    t3 = CLOCK()
    return ColdPass(t1 - t0, t2 - t1, t3 - t2, len(plan.spills), prepared, compaction)


def governance_settings() -> tuple[Limits, CompressionConfig, int]:
    """Our defaults for a 128K model: spill limits, the compression config, the trigger."""
    compression = CompressionConfig()
    trigger = trigger_tokens(None, compression)  # no [[models]] entry: a 128K window
    return resolve_limits(ToolsConfig(), CONTEXT_LENGTH), compression, trigger


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = CLOCK()
    fn()
    return CLOCK() - t0


# -- sections -----------------------------------------------------------------------------


HERMES_VARIANTS = ("compress", "p124", "prune")


def hermes_row(hermes: Hermes, item: Input, outs: dict[tuple[str, str], Any]
               ) -> dict[str, float]:
    """One round of Hermes's variants on ``item`` (seconds)."""
    row: dict[str, float] = {}
    for variant in HERMES_VARIANTS:
        answer = hermes.ask({"input": item.name, "variant": variant})
        row[variant] = answer["ms"] / 1000
        if variant == "p124":
            row["own"] = (answer["ms"] - answer["estimate_ms"]) / 1000
        outs[(item.name, variant)] = answer
    return row


def ours_row(item: Input, settings: tuple[Limits, CompressionConfig, int],
             outs: dict[tuple[str, str], Any]) -> dict[str, float]:
    """One round of ours on ``item``: the cold pass, phase 3, the references (seconds)."""
    limits, compression, threshold = settings
    gc.collect()
    result = cold_pass(item, limits, compression, threshold)
    outs[(item.name, "ours")] = result
    row = {"cold": result.total, "spill": result.spill, "prepare": result.prepare,
           "finish": result.finish}
    prepared = result.prepared
    if prepared is not None:
        row["summary"] = timed(lambda: builtin_summary(prepared.middle, None,
                                                       summary_budget(threshold)))
        row["builtin"] = timed(lambda: builtin(prepared, CODEC, threshold))
    decoded, rest, decode = item.decoded, item.rest, msgspec.json.decode
    row["floor"] = timed(lambda: (tool_pairs(decoded), history_chars(decoded)))
    row["read"] = timed(lambda: [(digest(raw), CODEC.read_item(raw)) for raw in rest])
    row["decode"] = timed(lambda: decode(item.body))
    return row


def cold_section(inputs: Inputs) -> None:
    """Cold governance pass vs Hermes's ``compress``, phase 3 and the decode reference."""
    log("\n== cold governance pass (phases 1, 2, 4 + spill decisions) vs Hermes "
        "ContextCompressor.compress ==")
    hermes = start_hermes(inputs)
    settings = governance_settings()
    limits, compression, threshold = settings
    log(f"ours: 128K window, trigger {threshold:,} tokens, tail budget "
        f"{int(threshold * compression.target_ratio):,} tokens, spill over "
        f"{limits.result_size_chars:,} chars or turns over {limits.turn_budget_chars:,}")
    figures: dict[tuple[str, str], list[float]] = {}
    outs: dict[tuple[str, str], Any] = {}
    try:
        for round_ in range(-inputs.warmup, inputs.rounds):
            for item in inputs.inputs:
                row: dict[str, float] = {}
                if hermes is not None:
                    try:
                        row.update(hermes_row(hermes, item, outs))
                    except RuntimeError as exc:
                        log(f"NOTE: Hermes Agent dropped from the run: {exc}")
                        hermes.close()
                        hermes = None
                        row = {}
                row.update(ours_row(item, settings, outs))
                if round_ >= 0:
                    for key, value in row.items():
                        figures.setdefault((item.name, key), []).append(value)
    finally:
        if hermes is not None:
            hermes.close()
    report_cold(inputs, figures, outs)


def report_cold(inputs: Inputs, figures: dict[tuple[str, str], list[float]],
                outs: dict[tuple[str, str], Any]) -> None:
    def m(name: str, key: str) -> float:
        return med(figures.get((name, key), [])) * 1000

    def ratio(name: str, top: str, bottom: str) -> float:
        tops, bottoms = figures.get((name, top), []), figures.get((name, bottom), [])
        return med([a / b for a, b in zip(tops, bottoms, strict=False) if b > 0])

    log(f"\nmedians of {inputs.rounds} rounds after {inputs.warmup} warm-up, ms")
    log(f"{'input':<8}{'msgs':>6} | {'Hermes':>9}{'ph.1,2,4':>10}{'  w/o est.':>10}"
        f"{'prune':>8} | {'ours':>7}{'spill':>8}{'prepare':>9}{'finish':>8}"
        f" | {'floor':>7}{'read':>7}{'decode':>8}")
    for item in inputs.inputs:
        n = item.name
        log(f"{n:<8}{len(item.messages):>6} | {ms(m(n, 'compress')):>9}{ms(m(n, 'p124')):>10}"
            f"{ms(m(n, 'own')):>10}{ms(m(n, 'prune')):>8} | {ms(m(n, 'cold')):>7}"
            f"{ms(m(n, 'spill')):>8}{ms(m(n, 'prepare')):>9}{ms(m(n, 'finish')):>8}"
            f" | {ms(m(n, 'floor')):>7}{ms(m(n, 'read')):>7}{ms(m(n, 'decode')):>8}")
    log("Hermes = compress() end to end, the summary call answering the fixed text; "
        "ph.1,2,4 = with the whole summariser replaced by that text; w/o est. = ph.1,2,4 "
        "less its two rough whole-history estimates (the anchor's 'own code'); "
        "ours = spill (plan_spills + apply_spills) + compaction.prepare (cut, phase 1) + "
        "compaction.finish (assembly, new items); floor = tool_pairs + one pass over every "
        "part (history_chars), what any pass that pairs calls and reads each message "
        "costs; read = digest + read_item of every item "
        "(what the stage does before, not in ours); decode = msgspec.json.decode of the "
        "request body")
    if any(key[1] == "compress" for key in figures):
        log("\nratios Hermes / ours (medians of per-round ratios; target: ours ≥ 3× faster)")
        log(f"{'input':<8} | {'Hermes/ours':>12}{'ph.1,2,4/ours':>15}{'w/o est./ours':>15}"
            f" | {'w/o est./floor':>15}")
        for item in inputs.inputs:
            n = item.name
            cells = [ratio(n, top, "cold") for top in ("compress", "p124", "own")]
            marks = [f"{r:.1f}× {'met' if r >= 3 else 'MISSED'}" for r in cells]
            log(f"{n:<8} | {marks[0]:>12}{marks[1]:>15}{marks[2]:>15}"
                f" | {ratio(n, 'own', 'floor'):>14.1f}×")
    log("")
    for item in inputs.inputs:
        n = item.name
        ours: ColdPass = outs[(n, "ours")]
        if ours.prepared is not None:
            log(f"phase 3, builtin_summary of the {n}'s middle ({len(ours.prepared.middle):,}"
                f" messages): {ms(m(n, 'summary'))} ms; compaction.builtin (summary, "
                f"render, finish) {ms(m(n, 'builtin'))} ms")
    for item in inputs.inputs:
        n = item.name
        ours = outs[(n, "ours")]
        line = f"{n}: ours {len(item.messages):,} messages ({item.leading} system apart) → "
        done = ours.compaction
        if done is None:
            line += "not compressed"
        else:
            line += (f"{item.leading + len(done.history.items):,} (summarised "
                     f"{done.summarised:,}, {done.pruned} parts pruned, {ours.spills} "
                     f"results spilled; ≈{item.history.tokens:,} → {done.history.tokens:,} "
                     "tokens)")
        if (n, "p124") in outs:
            line += (f"; Hermes → {outs[(n, 'p124')]['out']:,} messages, "
                     f"{outs[(n, 'prune')]['pruned']:,} results pruned")
        log(line)
    for item in inputs.inputs:
        log(f"request body of the {item.name}: {len(item.body) / 1e6:.2f} MB, msgspec decode "
            f"{ms(m(item.name, 'decode'))} ms (the resend target's reference)")


#: The sections, run in order; each takes the loaded inputs.
SECTIONS: list[Callable[[Inputs], None]] = [cold_section]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds after 1 warm-up (default 9 after 2)")
    parser.add_argument("--rounds", type=int, help="timed rounds")
    parser.add_argument("--no-hermes", action="store_true",
                        help="skip Hermes Agent (no install, our figures only)")
    parser.add_argument("--session", type=Path, default=SESSION,
                        help="the session (.json.gz, a chat-completions messages list)")
    parser.add_argument("--prefix", type=int, default=0,
                        help="messages in the prefix input (default: the first-trigger prefix)")
    args = parser.parse_args()
    args.warmup = 1 if args.quick else 2
    args.rounds = args.rounds or (3 if args.quick else 9)
    if not args.session.is_file():
        sys.exit(f"error: no session file at {args.session} (give one with --session)")
    inputs = load_inputs(args)
    whole, prefix = inputs.inputs
    log(f"session {args.session} ({len(whole.messages):,} messages, "
        f"{len(whole.body) / 1e6:.1f} MB as a request body); prefix input: the first "
        f"{len(prefix.messages):,} messages")
    log(loadavg())
    for section in SECTIONS:
        section(inputs)
    log(f"\n{loadavg()}")


if __name__ == "__main__":
    main()
