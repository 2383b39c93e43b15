"""Tool-loop guardrails: a turn's observations folded into counters, warnings and stops.

Issue 25 after hermes-behaviour.md §9, as a proxy sees it: every answered tool call of
the turn (``domain.runaway.signals``) is folded, one at a time and incrementally, into an
immutable :class:`GuardState`; rules that reach their thresholds give :class:`Finding`
values, each with a model-facing message and §9's recovery advice. ``GuardState()`` is a
fresh turn: everything resets with a new user message. Pure: no clock, no I/O.

Rules:

* **exact_failure** (2/5): the same signature failing again; a success of the call, or
  progress (a successful :data:`~sessionwarden.domain.runaway.signals.PROGRESS` tool: an
  edit, a shell command) since its last failure, restarts the count — the fix-and-retest
  loop is work. **same_tool_failure** (3/8): a tool failing in a row, whatever its
  arguments, restarted the same way; a failure-tolerant tool (a shell) never reaches stop.
* **idempotent_no_progress** (2/5): a read-only tool's call returning the same result as
  its previous one (a failure clears the record). Tools in no category never get it.
* **identical_streak** (3/5): consecutive identical calls with identical results, any
  tool; **cycle**: the same 2–4 calls with the same results repeating, counted in full
  laps (warn 3, stop at the no-progress stop), within the last 64 observations. Pollers
  are exempt from both (a cycle only of pollers too).
* **web_search_cap**: the web search past ``max_web_searches`` (0: no cap) stops.
* Levels: ``"stop"`` means "refuse the call". A rule reaching its stop threshold gives a
  ``"stop"`` only under ``hard_stop``, else a ``"warn"`` with ``at_stop`` set; a cap is a
  stop even with ``hard_stop`` off (§9: caps apply always). The first stop of a turn
  stays in :attr:`GuardState.halted`.
* Re-arming: a counter's finding is raised only by the observation that grew it, so a
  warning is never repeated at the same count; the cycle rule remembers the laps it
  reported and speaks again at each further lap, and afresh once a broken cycle resumes.
* One finding per concern: exact_failure hides a same_tool_failure of no higher level,
  exact_failure and idempotent_no_progress hide identical_streak; with a stop, only stops.
"""

import hashlib
from collections.abc import Iterable
from typing import Literal, NamedTuple

import msgspec
from sessionwarden.config import GuardrailsConfig
from sessionwarden.domain.runaway.signals import (
    Observation,
    is_failure_tolerant,
    is_idempotent,
    is_poller,
    is_progress,
    is_terminal,
    is_web_search,
    normal_name,
)
from sessionwarden.domain.runaway.turns import runtime_notice

__all__ = ["Finding", "GuardSettings", "GuardState", "Level", "Rule", "fold",
           "observe", "stop_text", "warning_notice"]

#: A finding's level: ``"stop"`` refuses the call, ``"warn"`` adds a notice.
Level = Literal["warn", "stop"]
#: The rule that fired.
Rule = Literal["exact_failure", "same_tool_failure", "idempotent_no_progress",
               "identical_streak", "cycle", "web_search_cap"]


class GuardSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Thresholds, each ``(warn_at, stop_at)``; the defaults are §9's."""

    hard_stop: bool = False
    exact_failure: tuple[int, int] = (2, 5)
    same_tool_failure: tuple[int, int] = (3, 8)
    idempotent_no_progress: tuple[int, int] = (2, 5)
    identical_streak: tuple[int, int] = (3, 5)
    #: In full laps of the cycle.
    cycle: tuple[int, int] = (3, 5)
    #: The shortest and longest cycle looked for, in calls.
    cycle_periods: tuple[int, int] = (2, 4)
    #: Laps are counted within this many latest observations.
    cycle_window: int = 64
    #: Web searches one turn may make (0: no cap).
    max_web_searches: int = 50

    @classmethod
    def from_config(cls, cfg: GuardrailsConfig) -> "GuardSettings":
        """The settings of ``[guardrails]``; streaks and cycles stop at the no-progress stop."""
        stop = cfg.idempotent_no_progress[1]
        return cls(
            hard_stop=cfg.hard_stop, exact_failure=cfg.exact_failure,
            same_tool_failure=cfg.same_tool_failure,
            idempotent_no_progress=cfg.idempotent_no_progress,
            identical_streak=(min(3, stop), stop), cycle=(min(3, stop), stop),
            max_web_searches=cfg.max_web_searches)


class Finding(msgspec.Struct, frozen=True):
    """A rule that fired on an observation.

    Attributes:
        rule: the rule.
        level: ``"stop"`` (refuse the call) or ``"warn"``.
        tool: the tool (a cycle: its tools, comma-separated).
        signature: the call's signature (a cycle: a hash of its calls' signatures, in
            any order).
        count: the rule's count (a cycle: full laps; a cap: the searches made).
        message: what the model is told, with the recovery advice.
        at_stop: the count reached the rule's stop threshold (whatever the level).
    """

    rule: Rule
    level: Level
    tool: str
    signature: str
    count: int
    message: str
    at_stop: bool = False


class _Entry(NamedTuple):
    """An observation as the streak and cycle rules compare it."""

    key: str
    tool: str
    signature: str
    poller: bool


class GuardState(msgspec.Struct, frozen=True):
    """One turn's guardrail state; ``GuardState()`` is a fresh turn (module doc).

    Attributes:
        observed: observations folded.
        progress: progress marks so far (a failure count remembers the mark it saw).
        exact: signature → (consecutive failures, progress mark).
        same_tool: normalised tool name → (failures in a row, progress mark).
        no_progress: signature → (result hash, times in a row) for read-only tools.
        streak: the identical-call streak's length; ``streak_key`` its call and result.
        recent: the latest observations, as many as the longest cycle.
        runs: per period p, the trailing observations equal to the one p before.
        cycle_reported: the laps last reported for the current cycle (0: none).
        web_searches: web searches made.
        halted: the turn's first stop, if any.
    """

    observed: int = 0
    progress: int = 0
    exact: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)
    same_tool: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)
    no_progress: dict[str, tuple[str, int]] = msgspec.field(default_factory=dict)
    streak: int = 0
    streak_key: str = ""
    recent: tuple[_Entry, ...] = ()
    runs: tuple[int, ...] = ()
    cycle_reported: int = 0
    web_searches: int = 0
    halted: Finding | None = None


def _advice(tool: str) -> str:
    if is_terminal(tool):
        return ("Run `pwd && ls -la` to check where you are and that the paths exist, and"
                " check the command itself (its name, flags, quoting) before running it again.")
    if is_idempotent(tool):
        return "Check the path or query (list the directory or search first)."
    return ("Read the error, check the arguments against the tool's description, or use"
            " another tool.")


def _texts(rule: Rule, tool: str, count: int, settings: GuardSettings) -> str:
    if rule == "exact_failure":
        return (f"{tool} failed {count} times with the same arguments. Repeating the same call"
                f" will not change the result. {_advice(tool)}")
    if rule == "same_tool_failure":
        return f"{tool} failed {count} times in a row. {_advice(tool)}"
    if rule == "idempotent_no_progress":
        return (f"{tool} returned the same result {count} times for the same call: you already"
                " have this result in the conversation. Use it and move on.")
    if rule == "identical_streak":
        return (f"This is call {count} in a row to {tool} with the same arguments and the same"
                " result: you already have this result. Change approach.")
    if rule == "cycle":
        return (f"The calls {tool} keep repeating in the same order with the same results"
                f" ({count} laps): you are going in circles. Stop repeating them and change"
                " approach: use what you have, or try something different.")
    return (f"This turn has made {count} web searches, past its cap of"
            f" {settings.max_web_searches}. Do not search again in this turn: answer with"
            " what you have found.")


class _Work:
    """The mutable copy a fold works on (frozen again at its end)."""

    def __init__(self, state: GuardState) -> None:
        self.observed, self.progress = state.observed, state.progress
        self.exact, self.same_tool = dict(state.exact), dict(state.same_tool)
        self.no_progress = dict(state.no_progress)
        self.streak, self.streak_key = state.streak, state.streak_key
        self.recent, self.runs = list(state.recent), list(state.runs)
        self.reported, self.searches = state.cycle_reported, state.web_searches
        self.halted = state.halted

    def freeze(self) -> GuardState:
        return GuardState(self.observed, self.progress, self.exact, self.same_tool,
                          self.no_progress, self.streak, self.streak_key, tuple(self.recent),
                          tuple(self.runs), self.reported, self.searches, self.halted)


def _finding(rule: Rule, tool: str, signature: str, count: int, limits: tuple[int, int],
             settings: GuardSettings, always: bool = False) -> Finding:
    at_stop = count >= limits[1]
    level: Level = "stop" if at_stop and (settings.hard_stop or always) else "warn"
    return Finding(rule, level, tool, signature, count,
                   _texts(rule, tool, count, settings), at_stop)


def _failure(work: _Work, obs: Observation, settings: GuardSettings) -> list[Finding]:
    found: list[Finding] = []
    mark = work.progress
    count, seen = work.exact.get(obs.signature, (0, mark))
    count = (count if seen == mark else 0) + 1
    work.exact[obs.signature] = (count, mark)
    name = normal_name(obs.tool)
    same, seen = work.same_tool.get(name, (0, mark))
    same = (same if seen == mark else 0) + 1
    work.same_tool[name] = (same, mark)
    work.no_progress.pop(obs.signature, None)
    if count >= settings.exact_failure[0]:
        found.append(_finding("exact_failure", obs.tool, obs.signature, count,
                              settings.exact_failure, settings))
    if same >= settings.same_tool_failure[0]:
        finding = _finding("same_tool_failure", obs.tool, obs.signature, same,
                           settings.same_tool_failure, settings)
        if is_failure_tolerant(obs.tool) and finding.at_stop:
            finding = msgspec.structs.replace(finding, level="warn", at_stop=False)
        found.append(finding)
    return found


def _success(work: _Work, obs: Observation, settings: GuardSettings) -> list[Finding]:
    work.exact.pop(obs.signature, None)
    work.same_tool.pop(normal_name(obs.tool), None)
    if is_progress(obs.tool):
        work.progress += 1
    if not is_idempotent(obs.tool):
        return []
    last, times = work.no_progress.get(obs.signature, ("", 0))
    times = times + 1 if last == obs.result_hash else 1
    work.no_progress[obs.signature] = (obs.result_hash, times)
    if times < settings.idempotent_no_progress[0]:
        return []
    return [_finding("idempotent_no_progress", obs.tool, obs.signature, times,
                     settings.idempotent_no_progress, settings)]


def _cycle(work: _Work, entry: _Entry, settings: GuardSettings) -> list[Finding]:
    shortest, longest = settings.cycle_periods
    recent, runs = work.recent, work.runs
    runs.extend([0] * (longest + 1 - len(runs)))
    for period in range(1, longest + 1):
        runs[period] = runs[period] + 1 if len(recent) >= period and \
            recent[-period].key == entry.key else 0
    recent.append(entry)
    del recent[:-longest]
    for period in range(shortest, longest + 1):
        laps = min(runs[period] + period, settings.cycle_window) // period
        pattern = recent[-period:]
        if (laps < 2 or len(pattern) < period or len({e.key for e in pattern}) < 2
                or all(e.poller for e in pattern)):
            continue
        if laps < settings.cycle[0] or laps <= work.reported:
            return []
        work.reported = laps
        tools = ", ".join(dict.fromkeys(e.tool for e in pattern))
        # sorted: the same cycle has the same id whichever call it is caught on
        cycle_id = hashlib.sha256("\x00".join(sorted(e.signature for e in pattern)).encode())
        return [_finding("cycle", tools, cycle_id.hexdigest(), laps, settings.cycle,
                         settings)]
    work.reported = 0  # no cycle: re-armed for the next one
    return []


def _prune(found: list[Finding]) -> list[Finding]:
    levels = {finding.rule: finding.level for finding in found}
    exact = levels.get("exact_failure")
    kept = [f for f in found if not (
        (f.rule == "identical_streak" and ({"exact_failure", "idempotent_no_progress"}
                                            & levels.keys()))
        or (f.rule == "same_tool_failure" and exact is not None
            and (exact == "stop" or f.level == "warn")))]
    stops = [finding for finding in kept if finding.level == "stop"]
    return stops or kept


def _step(work: _Work, obs: Observation, settings: GuardSettings) -> list[Finding]:
    found: list[Finding] = []
    work.observed += 1
    if is_web_search(obs.tool):
        work.searches += 1
        cap = settings.max_web_searches
        if cap > 0 and work.searches > cap:
            found.append(_finding("web_search_cap", obs.tool, obs.signature,
                                  work.searches, (cap + 1, cap + 1), settings, True))
    found += (_failure if obs.failed else _success)(work, obs, settings)
    entry = _Entry(f"{obs.signature}:{obs.result_hash}", obs.tool, obs.signature,
                   is_poller(obs.tool))
    if entry.key == work.streak_key:
        work.streak += 1
    else:
        work.streak_key, work.streak = entry.key, 1
    if not entry.poller and work.streak >= settings.identical_streak[0]:
        found.append(_finding("identical_streak", obs.tool, obs.signature, work.streak,
                              settings.identical_streak, settings))
    found += _cycle(work, entry, settings)
    found = _prune(found)
    if work.halted is None:
        work.halted = next((f for f in found if f.level == "stop"), None)
    return found


def fold(state: GuardState, observations: Iterable[Observation],
         settings: GuardSettings) -> tuple[GuardState, tuple[Finding, ...]]:
    """Fold ``observations`` in order; the same as :func:`observe` on each in turn."""
    work = _Work(state)
    found: list[Finding] = []
    for obs in observations:
        found += _step(work, obs, settings)
    return work.freeze(), tuple(found)


def observe(state: GuardState, obs: Observation,
            settings: GuardSettings) -> tuple[GuardState, tuple[Finding, ...]]:
    """Fold one observation: the next state and the findings it raised."""
    return fold(state, (obs,), settings)


def warning_notice(findings: Iterable[Finding]) -> str:
    """The runtime notice that carries ``findings`` to the model (one line each)."""
    lines = [f"- {f.rule} ({f.tool}, count {f.count}): {f.message}" for f in findings]
    return runtime_notice("tool-loop warning", "\n".join(lines))


def stop_text(finding: Finding) -> str:
    """The daemon's own answer when ``finding`` stops a call (it is not forwarded)."""
    return runtime_notice("tool-loop guardrail stopped this turn", (
        f"{finding.message}\nsessionwarden answered this call itself without sending it"
        f" (rule {finding.rule}, {finding.tool}, count {finding.count}). Summarise what is"
        " done and what is left; a new user message starts a new turn."))
