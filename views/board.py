"""The live page's board: every session, key and breaker, folded from the log as it grows.

The page (``cmd/daemon/ui``) shows this fold: per session its model, calls, latest
context against its limits, compactions, spills, spend against its cap and last outcome;
per provider its keys and breaker. An in-memory fold of the whole log, caught up in a
worker thread when a page asks: the call path pays nothing, a restart rebuilds it.

Rules:

- The fold is lean on purpose: a session costs a few dozen fields whatever its length
  (the latest client call's id, not every call's), a call in flight one map entry until
  its completion, bounded as ``views/metrics.py`` bounds its own.
- Amounts are exact Decimals here and exact strings in :meth:`Board.snapshot`; a call of
  unknown cost is counted, never taken for $0 silently.
- The cap is the session's own, as set through the control API, else the configured
  default; it holds the session's subtree, so the page shows the subtree's spend next
  to it (children folded into their parents' ``subtree_spent``, one level per child as
  the ledger walks them).
"""

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sessionwarden.domain.session import session_id_of
from sessionwarden.events import (
    BUDGETS_STREAM,
    CODEC,
    BreakerChanged,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    ContextCompressed,
    CredentialAdded,
    CredentialRemoved,
    Event,
    GuardrailTripped,
    IterationCounted,
    KeyStateChanged,
    SessionCapSet,
    SessionStarted,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog, RecordedEvent

__all__ = ["CATCH_UP_LIMIT", "LIVE_FOR", "Board", "LiveBoard"]

#: A session whose last event is this recent is shown as live.
LIVE_FOR = timedelta(minutes=5)
#: The most events one catch-up folds: the first page after a long log catches up in steps.
CATCH_UP_LIMIT = 200_000
#: Calls admitted and not yet completed, remembered at most (a crash leaves some open).
_OPEN_KEPT = 100_000


@dataclass
class _Session:
    """What the board holds of one session."""

    model: str = ""
    client: str = ""
    parent: str = ""
    started_at: str = ""
    last_at: str = ""
    calls: int = 0
    side_calls: int = 0
    refused: int = 0
    latest_call: str = ""
    context_tokens: int = 0
    context_source: str = ""
    threshold: int | None = None
    window: int | None = None
    compressions: int = 0
    tokens_saved: int = 0
    spills: int = 0
    spent: Decimal = Decimal(0)
    unknown_cost: int = 0
    last_status: int | None = None
    last_outcome: str = ""
    warnings: int = 0
    stopped: str = ""

    def row(self, session_id: str, cap: Decimal | None, subtree: Decimal,
            now: datetime) -> dict[str, Any]:
        live = bool(self.last_at) and now - datetime.fromisoformat(self.last_at) <= LIVE_FOR
        return {
            "id": session_id, "model": self.model, "client": self.client,
            "parent": self.parent or None, "started_at": self.started_at,
            "last_at": self.last_at, "live": live, "calls": self.calls,
            "side_calls": self.side_calls, "refused": self.refused,
            "context": {"tokens": self.context_tokens, "source": self.context_source,
                        "threshold": self.threshold, "window": self.window},
            "compressions": self.compressions, "tokens_saved": self.tokens_saved,
            "spills": self.spills, "spent": str(self.spent), "subtree_spent": str(subtree),
            "unknown_cost_calls": self.unknown_cost,
            "cap": None if cap is None else str(cap),
            "last_status": self.last_status, "last_outcome": self.last_outcome or None,
            "guardrail_warnings": self.warnings, "stopped_by": self.stopped or None,
        }


@dataclass
class _Key:
    state: str = "ok"
    until: str | None = None
    reason: str = ""
    calls: int = 0
    removed: bool = False


class Board:
    """The pure fold: :meth:`add` each recorded event in order, :meth:`snapshot` at any time."""

    def __init__(self, default_cap: Decimal | None = None) -> None:
        """An empty board; ``default_cap`` is the configured session cap, if any."""
        self.default_cap = default_cap
        self.sessions: dict[str, _Session] = {}
        self.caps: dict[str, Decimal | None] = {}
        self.keys: dict[tuple[str, str], _Key] = {}
        self.breakers: dict[str, dict[str, Any]] = {}
        self._open: dict[str, tuple[str, str]] = {}  # call id -> (session, provider)

    def add(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event (events this version cannot read are skipped)."""
        if not CODEC.knows(recorded.type):
            return
        event = CODEC.decode(recorded.type, recorded.data)
        session_id = session_id_of(recorded.stream)
        if session_id is not None:
            self._session(session_id, event, recorded.recorded_at)
        elif recorded.stream == BUDGETS_STREAM and isinstance(event, SessionCapSet):
            self.caps[event.session_id] = None if event.usd is None else Decimal(event.usd)
        else:
            self._pool(event)

    def _session(self, session_id: str, event: Event, at: str) -> None:
        s = self.sessions.get(session_id)
        if s is None:
            s = self.sessions[session_id] = _Session(started_at=at)
        s.last_at = at
        if isinstance(event, SessionStarted):
            s.model = s.model or event.model
            s.client, s.parent = event.client, event.parent_session_id or ""
        elif isinstance(event, CallAdmitted):
            if len(self._open) >= _OPEN_KEPT:
                self._open.clear()
            self._open[event.call_id] = (session_id, event.provider)
            if event.purpose:  # the summariser's side call: metered, not the context
                s.side_calls += 1
                return
            s.calls += 1
            s.model = f"{event.provider}/{event.model}"
            s.latest_call = event.call_id
            s.context_tokens, s.context_source = event.estimated_tokens, "estimated"
            if event.limits is not None:
                s.threshold, s.window = event.limits.threshold, event.limits.window
        elif isinstance(event, CallCompleted):
            self._completed(s, event)
        elif isinstance(event, CallRefused):
            s.refused += 1
            s.last_status, s.last_outcome = event.status, f"refused: {event.code or event.stage}"
        elif isinstance(event, ContextCompressed):
            s.compressions += 1
            s.tokens_saved += max(0, event.tokens_before - event.tokens_after)
        elif isinstance(event, ToolResultSpilled):
            s.spills += 1
        elif isinstance(event, GuardrailTripped):
            s.warnings += not event.stopped
            if event.stopped:
                s.stopped = f"guardrail {event.rule}"
        elif isinstance(event, IterationCounted) and not event.child:
            if event.decision in ("grace", "answer"):
                s.stopped = "iteration budget"
            elif s.stopped == "iteration budget":
                s.stopped = ""  # a new turn

    def _completed(self, s: _Session, event: CallCompleted) -> None:
        _, provider = self._open.pop(event.call_id, ("", ""))
        s.last_status, s.last_outcome = event.status, event.outcome
        if event.cost is None:
            s.unknown_cost += 1
        else:
            s.spent += Decimal(event.cost)
        if event.call_id == s.latest_call and event.source == "provider":
            s.context_tokens = (event.input_tokens + event.cache_read_tokens
                                + event.cache_write_tokens)
            s.context_source = "real"
        if provider and event.credential:
            self.keys.setdefault((provider, event.credential), _Key()).calls += 1

    def _pool(self, event: Event) -> None:
        if isinstance(event, CredentialAdded):
            key = self.keys.setdefault((event.provider, event.fingerprint), _Key())
            key.removed = False
        elif isinstance(event, CredentialRemoved):
            self.keys.setdefault((event.provider, event.fingerprint), _Key()).removed = True
        elif isinstance(event, KeyStateChanged):
            key = self.keys.setdefault((event.provider, event.fingerprint), _Key())
            key.state, key.until, key.reason = event.state, event.until, event.reason
        elif isinstance(event, BreakerChanged):
            self.breakers[event.provider] = {"state": event.state, "until": event.until,
                                             "reason": event.reason}

    def _subtree(self, session_id: str, children: dict[str, list[str]]) -> Decimal:
        total, seen, todo = Decimal(0), {session_id}, [session_id]
        while todo:  # a recorded cycle adds no session twice, so the walk ends
            current = todo.pop()
            total += self.sessions[current].spent
            for child in children.get(current, ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return total

    def snapshot(self, now: datetime, limit: int = 100) -> dict[str, Any]:
        """The board as the page reads it: the ``limit`` latest sessions, keys, breakers."""
        children: dict[str, list[str]] = {}
        for sid, s in self.sessions.items():
            if s.parent in self.sessions:
                children.setdefault(s.parent, []).append(sid)
        latest = sorted(self.sessions.items(), key=lambda kv: kv[1].last_at, reverse=True)
        rows = [s.row(sid, self.caps.get(sid, self.default_cap),
                      self._subtree(sid, children), now) for sid, s in latest[:limit]]
        providers: dict[str, dict[str, Any]] = {}
        for (provider, fp), key in sorted(self.keys.items()):
            state = "removed" if key.removed else key.state
            if key.until and state not in ("ok", "dead", "removed") and (
                    datetime.fromisoformat(key.until) <= now):
                state = "ok"  # the bench is over: the pool takes it at its next lease
            entry = providers.setdefault(provider, {"keys": [], "breaker": None})
            entry["keys"].append({"fingerprint": fp, "state": state, "until": key.until,
                                  "reason": key.reason, "calls": key.calls})
        for provider, breaker in sorted(self.breakers.items()):
            providers.setdefault(provider, {"keys": [], "breaker": None})["breaker"] = breaker
        return {"sessions": rows, "total_sessions": len(self.sessions),
                "live_sessions": sum(r["live"] for r in rows), "providers": providers}


class LiveBoard:
    """A :class:`Board` kept caught up with a log (blocking methods: a worker thread's)."""

    def __init__(self, log: EventLog, default_cap: Decimal | None = None,
                 limit: int = CATCH_UP_LIMIT) -> None:
        """The board of ``log``, folded from its first event, ``limit`` events a catch-up."""
        self.log = log
        self.limit = limit
        self.board = Board(default_cap)
        self.position = 0
        self.lock = threading.Lock()

    def snapshot(self, now: datetime) -> dict[str, Any]:
        """Catch up with the log, then the board, with the position it reflects.

        ``caught_up`` is false when the catch-up stopped at its limit (a long log's first
        page): the caller asks again, and each time the board is nearer the head.
        """
        with self.lock:  # two pages at once fold each event once
            folded = 0
            for recorded in self.log.read_all(self.position, limit=self.limit):
                self.board.add(recorded)
                self.position = recorded.seq
                folded += 1
            return {"position": self.position, "caught_up": folded < self.limit,
                    **self.board.snapshot(now)}
