"""The daemon's Prometheus metrics, folded from the event log as it grows.

A scrape catches up with the log (every event appended since the last one, read in a
worker thread) and folds it into counters and histograms: what the metrics say is what
the log says, and the proxy's path pays nothing for them. Gauges of state (each key's
state, each breaker) are primed from the log at start. Labels are bounded: provider,
model, outcome, status, kind — never a session or a call.

Rules:

- The OpenTelemetry GenAI metrics in Prometheus form: ``gen_ai_client_token_usage``
  (by ``gen_ai_token_type``: input, output, cache_read, cache_write, reasoning) and
  ``gen_ai_client_operation_duration_seconds``, labelled ``gen_ai_system`` (the
  provider) and ``gen_ai_request_model``.
- Counters count from the daemon's start (Prometheus's convention: a restart resets
  them); the log holds the history before it.
- Costs are exact Decimals in the log; Prometheus takes floats, so the sums here are
  floats of exact amounts (``usage`` gives the exact figure).
"""

import os
import threading
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import (
    CODEC,
    BreakerChanged,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    CallResent,
    ContextCompressed,
    Event,
    GuardrailTripped,
    IterationCounted,
    KeyStateChanged,
    SummariserFailed,
    ToolResultSpilled,
    WalCheckpointed,
)
from sessionwarden.store import EventLog, RecordedEvent

__all__ = ["CallTimings", "LogMetrics"]

_TOKEN_BUCKETS = (1, 10, 100, 1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000, 4_000_000)
_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180)
_RATIO = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25)
#: Admitted calls remembered until their completion; a call never completed (a crash)
#: must not hold memory for ever.
_OPEN_KEPT = 100_000
#: The most events one scrape folds: a scrape after a long silence catches up in steps.
CATCH_UP_LIMIT = 200_000


class CallTimings:
    """What the log does not hold: a call's time to first byte and the proxy's own time.

    Observed by the proxy as each call is sent and answered (a histogram's observe: a few
    microseconds), not folded from the log.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        """Register the two histograms in ``registry``."""
        self.first_byte = Histogram(
            "sessionwarden_time_to_first_byte_seconds",
            "From a call's arrival to the upstream's first answer (headers)", ("provider",),
            buckets=_SECONDS, registry=registry)
        self.added = Histogram(
            "sessionwarden_proxy_added_seconds",
            "The proxy's own time before a call is sent: reading, admission, a key",
            ("provider",), buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                    0.25, 1), registry=registry)

    def sent(self, provider: str, added_s: float) -> None:
        """A call's first attempt leaves, ``added_s`` after it arrived."""
        self.added.labels(provider).observe(added_s)

    def answered(self, provider: str, first_byte_s: float) -> None:
        """The upstream's answer began, ``first_byte_s`` after the call arrived."""
        self.first_byte.labels(provider).observe(first_byte_s)


class _Commits(Collector):
    """The log writer's own count of its commits and their time, read at each scrape."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def collect(self) -> Iterator[Metric]:
        commits, seconds = self.log.commit_stats()
        yield CounterMetricFamily("sessionwarden_log_commits",
                                  "Commits of the event log that wrote", value=commits)
        yield CounterMetricFamily("sessionwarden_log_commit_seconds",
                                  "Time the log's commits took (rate: mean commit latency)",
                                  value=seconds)


class LogMetrics:
    """The registry a ``/metrics`` scrape renders, and the fold that keeps it current."""

    def __init__(self, log: EventLog, position: int, registry: CollectorRegistry) -> None:
        """Metrics of ``log``'s events after ``position`` (the daemon's start).

        Key states and breakers as of ``position`` are primed from the log (one scan).
        ``registry`` may hold other metrics already (the proxy's :class:`CallTimings`).
        """
        self.log = log
        self.registry = registry
        self.position = position
        self.lock = threading.Lock()
        self._routes: dict[str, tuple[str, str]] = {}
        #: Why the daemon answers a call itself, from the runaway events before its
        #: CallAdmitted, until its completion.
        self._answers: dict[str, str] = {}
        self._windows: dict[str, int] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._breakers: dict[str, str] = {}
        gm = ("gen_ai_system", "gen_ai_request_model")
        pm = ("provider", "model")
        self.tokens = Histogram(
            "gen_ai_client_token_usage", "Tokens a call used, by token type (OTel GenAI)",
            (*gm, "gen_ai_token_type"), buckets=_TOKEN_BUCKETS, registry=registry)
        self.duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "A call's duration from admission to its last byte (OTel GenAI)",
            (*gm, "outcome"), buckets=_SECONDS, registry=registry)
        self.calls = Counter("sessionwarden_calls", "Calls completed, by outcome and status",
                             (*pm, "outcome", "status"), registry=registry)
        self.refused = Counter("sessionwarden_refusals", "Calls refused at admission",
                               ("stage", "code"), registry=registry)
        self.cap_refusals = Counter("sessionwarden_cap_refusals",
                                    "Calls a spend cap refused, by the cap's kind",
                                    ("kind",), registry=registry)
        self.cost = Counter("sessionwarden_cost_usd", "Spend in USD (floats of exact sums)",
                            pm, registry=registry)
        self.unknown_cost = Counter("sessionwarden_unknown_cost_calls",
                                    "Calls whose cost is unknown (no price, no usage)",
                                    pm, registry=registry)
        self.failovers = Counter("sessionwarden_failovers",
                                 "Attempts that failed over to another key", ("provider",),
                                 registry=registry)
        self.errors = Counter("sessionwarden_errors", "Upstream errors relayed, by class",
                              ("provider", "error_class"), registry=registry)
        self.spills = Counter("sessionwarden_spills", "Tool results spilled to files",
                              registry=registry)
        self.spilled_bytes = Counter("sessionwarden_spilled_bytes",
                                     "Bytes of tool results spilled", registry=registry)
        self.compactions = Counter("sessionwarden_compactions",
                                   "Compressions of a session's history, by trigger",
                                   ("trigger",), registry=registry)
        self.prepared = Counter("sessionwarden_prepared_ahead_hits",
                                "Compressions applied from a preparation made ahead",
                                registry=registry)
        self.summary_failures = Counter("sessionwarden_summariser_failures",
                                        "Model summaries that failed", registry=registry)
        self.window = Histogram("sessionwarden_prompt_window_ratio",
                                "A forwarded prompt's estimated size over its window",
                                buckets=_RATIO, registry=registry)
        self.grace = Counter("sessionwarden_grace_calls",
                             "Calls sent as a turn's grace call (tools off)",
                             registry=registry)
        self.answered = Counter("sessionwarden_runaway_answers",
                                "Calls the daemon answered itself, by why", ("refused",),
                                registry=registry)
        self.guardrails = Counter("sessionwarden_guardrail_events",
                                  "Tool-loop guardrail warnings and stops, by rule",
                                  ("rule", "level"), registry=registry)
        self.appended = Counter("sessionwarden_log_events",
                                "Events appended to the log, by kind of stream", ("kind",),
                                registry=registry)
        self.key_states = Gauge("sessionwarden_key_states", "Keys in each state",
                                ("provider", "state"), registry=registry)
        self.breakers = Gauge("sessionwarden_breaker_open",
                              "Whether a provider's breaker is open (1) or closed (0)",
                              ("provider",), registry=registry)
        self.wal = Gauge("sessionwarden_log_wal_bytes", "Size of the log's WAL file",
                         registry=registry)
        self.checkpoint = Gauge("sessionwarden_log_last_checkpoint_timestamp_seconds",
                                "When the log's WAL was last checkpointed (Unix time)",
                                registry=registry)
        registry.register(_Commits(log))
        self._prime()

    def _prime(self) -> None:
        """Each key's and breaker's state as the log has it now (gauges, not counts)."""
        tags = [*CODEC.tags_of(KeyStateChanged), *CODEC.tags_of(BreakerChanged)]
        marks = ", ".join("?" for _ in tags)
        for kind, data in self.log.read_connection().execute(
                f"SELECT type, data FROM events WHERE type IN ({marks}) AND seq <= ?"
                " ORDER BY seq", (*tags, self.position)):
            self._state(CODEC.decode(str(kind), bytes(data)))
        self._gauges()

    def render(self) -> bytes:
        """Catch up with the log, then the exposition text (blocking: a worker thread's)."""
        with self.lock:  # two scrapes at once fold each event once
            self.catch_up()
            return generate_latest(self.registry)

    def catch_up(self, limit: int = CATCH_UP_LIMIT) -> int:
        """Fold the events appended since the last call (blocking: a worker thread's)."""
        folded = 0
        for recorded in self.log.read_all(self.position, limit=limit):
            self._fold(recorded)
            self.position = recorded.seq
            folded += 1
        self._gauges()
        wal = f"{self.log.path}-wal"
        self.wal.set(os.path.getsize(wal) if os.path.exists(wal) else 0)
        return folded

    def _gauges(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for (provider, _), state in self._keys.items():
            counts[provider, state] = counts.get((provider, state), 0) + 1
        self.key_states.clear()
        for (provider, state), n in counts.items():
            self.key_states.labels(provider, state).set(n)
        for provider, state in self._breakers.items():
            self.breakers.labels(provider).set(1 if state == "open" else 0)

    def _state(self, event: Event) -> None:
        if isinstance(event, KeyStateChanged):
            self._keys[event.provider, event.fingerprint] = event.state
        elif isinstance(event, BreakerChanged):
            self._breakers[event.provider] = event.state

    def _fold(self, recorded: RecordedEvent) -> None:
        stream = recorded.stream
        self.appended.labels(stream.split("-", 1)[0]).inc()
        try:
            event = CODEC.decode(recorded.type, recorded.data)
        except Exception:  # a tag of a newer version: counted, not read
            return
        session = session_id_of(stream) or ""
        if isinstance(event, CallAdmitted | CallResent | CallCompleted | CallRefused):
            self._call(session, event)
        else:
            self._other(event, recorded)

    def _call(self, session: str,
              event: CallAdmitted | CallResent | CallCompleted | CallRefused) -> None:
        if isinstance(event, CallAdmitted):
            if len(self._routes) >= _OPEN_KEPT:
                self._routes.clear()
                self._answers.clear()
            self._routes[event.call_id] = (event.provider, event.model)
            if event.limits is not None:
                self._windows[session] = event.limits.window
            window = self._windows.get(session)
            if window and not event.purpose:
                self.window.observe(event.estimated_tokens / window)
        elif isinstance(event, CallResent) and event.provider:
            self._routes[event.call_id] = (event.provider, event.model)
        elif isinstance(event, CallRefused):
            self.refused.labels(event.stage, event.code).inc()
            if event.stage == "budgets":
                self.cap_refusals.labels(event.code or "cap").inc()
        elif isinstance(event, CallCompleted):
            self._completed(event)

    def _completed(self, event: CallCompleted) -> None:
        provider, model = self._routes.pop(event.call_id, ("", ""))
        self.calls.labels(provider, model, event.outcome, str(event.status)).inc()
        self.duration.labels(provider, model, event.outcome).observe(event.latency_ms / 1000)
        for kind, n in (("input", event.input_tokens), ("output", event.output_tokens),
                        ("cache_read", event.cache_read_tokens),
                        ("cache_write", event.cache_write_tokens),
                        ("reasoning", event.reasoning_tokens)):
            if n:
                self.tokens.labels(provider, model, kind).observe(n)
        if event.cost is None:
            self.unknown_cost.labels(provider, model).inc()
        elif Decimal(event.cost):
            self.cost.labels(provider, model).inc(float(Decimal(event.cost)))
        if event.attempts:
            self.failovers.labels(provider).inc(len(event.attempts))
        if event.error_class:
            self.errors.labels(provider, event.error_class).inc()
        why = self._answers.pop(event.call_id, "iteration_budget")
        if event.outcome == "answered":  # a resend of an answered call records no reason
            self.answered.labels(why).inc()

    def _other(self, event: Event, recorded: RecordedEvent) -> None:
        if isinstance(event, ToolResultSpilled):
            self.spills.inc()
            self.spilled_bytes.inc(event.bytes)
        elif isinstance(event, ContextCompressed):
            self.compactions.labels(event.trigger).inc()
            if event.prepared:
                self.prepared.inc()
        elif isinstance(event, SummariserFailed):
            self.summary_failures.inc()
        elif isinstance(event, IterationCounted) and not event.child:
            if event.decision == "grace":
                self.grace.inc()
            elif event.decision == "answer":
                self._answers.setdefault(event.call_id, "iteration_budget")
        elif isinstance(event, GuardrailTripped):
            self.guardrails.labels(event.rule, event.level).inc()
            if event.stopped:  # a stop answers the call whatever the budget said
                self._answers[event.call_id] = "guardrail"
        elif isinstance(event, WalCheckpointed):
            self.checkpoint.set(_timestamp(recorded.recorded_at))
        else:
            self._state(event)


def _timestamp(recorded_at: str) -> float:
    return datetime.fromisoformat(recorded_at).timestamp()
