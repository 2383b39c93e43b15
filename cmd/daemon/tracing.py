"""OpenTelemetry traces: one span per proxied call, per the GenAI semantic conventions.

Optional (the ``otel`` extra: the official SDK and its OTLP/HTTP exporter): ``[otel]
endpoint`` set makes the runtime build a :class:`Tracing` that the call path
(``proxy/calls.complete``, and ``proxy/relay`` for a refusal) hands each finished call to,
queued for a background thread that posts batches to ``{endpoint}/v1/traces``.

Rules:
- A span is made only once the call's completion is durable, from what the log recorded
  (tokens, cost, attempts), the request as admitted (notices, the daemon's own answer) and
  the events admission decided for it (``ProxiedCall.decided``: spills, a compression,
  handed back with the verdict, never read from the log again).
- Export never blocks or fails a call: the queue is bounded, a full queue or a failed
  export drops spans, counted in ``sessionwarden_otel_spans_dropped_total`` (by reason),
  and any error while building a span is logged, never raised.
- A span's ids are derived from its call id, so a side call (the summariser, which ends
  before the call it serves) names its parent's span before that span exists: it is a
  child span of the call it served, with no map kept in memory.
- A span is made finished: the SDK's ``ReadableSpan``, handed to its batch processor
  (whose exporter is the SDK's OTLP one), not ``tracer.start_span`` then ``end``. That
  path is for instrumenting code while it runs (a context to propagate, a sampler,
  attributes validated one by one, a lock per span); a call here is over, its ids and
  attributes made by this module (strings, ints and bools only, bounded here). The live
  span was a third of a span's CPU (``bench/otel_floor.py``); most of the rest is the
  exporter's protobuf encoding, in its thread, about 2 µs per attribute.
- No message content unless ``[otel] capture_content``: then the last request item, with
  the daemon's keys scrubbed, at most 4 KB. A key is never an attribute: only its
  fingerprint (``sessionwarden.credential``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

from loguru import logger
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from prometheus_client import CollectorRegistry, Counter
from sessionwarden.config import OtelConfig, ProviderConfig
from sessionwarden.domain.calls import CallOutcome, CallRequest
from sessionwarden.events import CallCompleted, ContextCompressed, Event, ToolResultSpilled
from sessionwarden.redact import default_redactor

__all__ = ["MAX_QUEUE", "ProxiedCall", "Tracing"]

#: Spans waiting for export at most; more are dropped (and counted).
MAX_QUEUE = 2048
#: Captured content at most, in bytes (``capture_content``).
MAX_CONTENT = 4096
#: One export request's timeout, in seconds (a slow receiver delays only the exporter).
EXPORT_TIMEOUT_S = 5.0
#: Every span is sampled: one per call is the point (and the queue bounds it).
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: The status of a span that did not fail (shared: a Status is immutable).
_UNSET = Status(StatusCode.UNSET)
#: The prefix of the grace call's notice (``domain/runaway/budget.grace_notice``).
_GRACE = "iteration budget spent"


class ProxiedCall(Protocol):
    """What a span is made of: ``proxy/calls.ProxiedCall``.

    Not imported: that module imports the runtime, which imports this one.
    """

    @property
    def call_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def parent(self) -> str: ...
    @property
    def started(self) -> float: ...

    provider: ProviderConfig
    model: str
    admitted: CallRequest | None
    client_request: CallRequest | None
    side: CallRequest | None
    decided: tuple[Event, ...]

    def outcome(self, outcome: str, **facts: Any) -> CallOutcome: ...


def _ids(call_id: str) -> tuple[int, int]:
    """The trace id and span id of ``call_id``'s span (module doc: a child finds them)."""
    digest = hashlib.blake2b(call_id.encode(), digest_size=24).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:], "big") or 1


class _CountingExporter(SpanExporter):
    """The OTLP exporter, with the spans of a failed export counted as dropped."""

    def __init__(self, inner: OTLPSpanExporter, dropped: Counter) -> None:
        self._inner, self._dropped = inner, dropped

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._dropped.labels(reason="export_failed").inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _BoundedProcessor(BatchSpanProcessor):
    """A batch processor that counts the spans a full queue drops."""

    def __init__(self, exporter: SpanExporter, dropped: Counter) -> None:
        super().__init__(exporter, max_queue_size=MAX_QUEUE, schedule_delay_millis=1000,
                         max_export_batch_size=512)
        self._dropped = dropped

    def on_end(self, span: ReadableSpan) -> None:
        queue = getattr(self._batch_processor, "_queue", None)
        if queue is not None and len(queue) >= MAX_QUEUE:
            self._dropped.labels(reason="queue_full").inc()
        super().on_end(span)


def _operation(api_mode: str) -> str:
    """``gen_ai.operation.name``: every door is a chat (Chat Completions, Messages, Responses)."""
    return "chat" if api_mode in ("chat_completions", "messages", "responses") else api_mode


class Tracing:
    """The span of each finished call, exported in the background."""

    def __init__(self, config: OtelConfig, registry: CollectorRegistry) -> None:
        """Build the bounded batch processor and its OTLP/HTTP exporter."""
        self.config = config
        self.dropped = Counter("sessionwarden_otel_spans_dropped",
                               "OpenTelemetry spans dropped: a full export queue, or an "
                               "export that failed", ["reason"], registry=registry)
        self.resource = Resource.create({"service.name": config.service_name})
        self.scope = InstrumentationScope("sessionwarden")
        exporter = OTLPSpanExporter(endpoint=config.endpoint.rstrip("/") + "/v1/traces",
                                    timeout=EXPORT_TIMEOUT_S)
        self.processor = _BoundedProcessor(_CountingExporter(exporter, self.dropped),
                                           self.dropped)

    def record(self, call: ProxiedCall, done: CallCompleted | None,
               outcome: CallOutcome) -> None:
        """The span of a call whose completion is durable (never raises)."""
        try:
            self._record(call, done, outcome, None)
        except Exception as exc:
            logger.warning("call {}: no trace span: {}", call.call_id, exc)

    def refused(self, call: ProxiedCall, status: int, kind: str, message: str) -> None:
        """The span of a call admission refused (a cap, a bad request; never raises)."""
        try:
            outcome = call.outcome("refused", status=status, error=message)
            self._record(call, None, outcome, (kind, message))
        except Exception as exc:
            logger.warning("call {}: no trace span: {}", call.call_id, exc)

    def _record(self, call: ProxiedCall, done: CallCompleted | None, outcome: CallOutcome,
                refusal: tuple[str, str] | None) -> None:
        request = call.admitted or call.client_request or call.side
        now_ns = time.time_ns()
        start_ns = now_ns - int((time.perf_counter() - call.started) * 1e9)
        end_ns = max(now_ns, start_ns)
        trace_id, span_id = _ids(call.call_id)
        parent = None
        if request is not None and request.parent_call:
            trace_id, parent_id = _ids(request.parent_call)  # in its parent's trace
            parent = SpanContext(trace_id, parent_id, is_remote=False, trace_flags=_SAMPLED)
        operation = _operation(call.provider.api_mode)
        requested = request.shape.model if request is not None else call.model
        events: list[SpanEvent] = []
        for attempt in outcome.attempts:
            events.append(SpanEvent("sessionwarden.failover", {
                "sessionwarden.credential": attempt.credential,
                "http.response.status_code": attempt.status,
                "error.type": attempt.error_class or str(attempt.status)}, end_ns))
        if request is not None:
            for notice in request.notices:
                name = ("sessionwarden.grace_call" if _GRACE in notice
                        else "sessionwarden.notice")
                events.append(SpanEvent(name, {"sessionwarden.notice": notice[:500]}, end_ns))
            if request.reply is not None:
                events.append(SpanEvent("sessionwarden.answered", {
                    "sessionwarden.reason": request.reply.refused,
                    "http.response.status_code": request.reply.status}, end_ns))
        for event in call.decided:
            if isinstance(event, ToolResultSpilled):
                events.append(SpanEvent("sessionwarden.spill", _spilled(event), end_ns))
            elif isinstance(event, ContextCompressed):
                events.append(SpanEvent("sessionwarden.compaction", _compressed(event),
                                        end_ns))
        if refusal is not None:
            events.append(SpanEvent("sessionwarden.refused", {
                "sessionwarden.reason": refusal[0],
                "sessionwarden.message": refusal[1][:500]}, end_ns))
        status = _UNSET
        if outcome.outcome not in ("ok", "answered"):
            status = Status(StatusCode.ERROR, outcome.error[:200] or outcome.outcome)
        # The finished span itself (module doc: why not ``tracer.start_span``).
        self.processor.on_end(ReadableSpan(
            f"{operation} {requested}",
            context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED),
            parent=parent, resource=self.resource,
            attributes=self._attributes(call, done, outcome, request, operation),
            events=events, kind=SpanKind.CLIENT, status=status, start_time=start_ns,
            end_time=end_ns, instrumentation_scope=self.scope))

    def _attributes(self, call: ProxiedCall, done: CallCompleted | None,
                    outcome: CallOutcome, request: CallRequest | None,
                    operation: str) -> dict[str, Any]:
        """The span's attributes: the GenAI conventions', then ours."""
        found: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": call.provider.name,
            "gen_ai.request.model": request.shape.model if request is not None else call.model,
            "gen_ai.response.model": call.model,
            "gen_ai.conversation.id": call.session_id,
            "sessionwarden.call.id": call.call_id,
            "sessionwarden.outcome": outcome.outcome,
            "sessionwarden.credential": outcome.credential,
        }
        if outcome.status:
            found["http.response.status_code"] = outcome.status
        if done is not None:
            found.update({
                "gen_ai.usage.input_tokens": done.input_tokens + done.cache_read_tokens
                + done.cache_write_tokens,
                "gen_ai.usage.output_tokens": done.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": done.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": done.cache_write_tokens,
                "sessionwarden.usage.source": done.source,
                "sessionwarden.cost.status": done.cost_status,
            })
            if done.response_id:
                found["gen_ai.response.id"] = done.response_id
            if done.cost is not None:
                found["sessionwarden.cost.usd"] = done.cost
        if outcome.outcome not in ("ok", "answered"):
            found["error.type"] = outcome.error_class or outcome.outcome
        if call.parent:
            found["sessionwarden.parent_session"] = call.parent
        if request is not None and request.purpose:
            found["sessionwarden.purpose"] = request.purpose
        if request is not None and request.parent_call:
            found["sessionwarden.parent_call"] = request.parent_call
        if self.config.capture_content and request is not None:
            content = _last_item(request)
            if content:
                found["gen_ai.input.messages"] = content
        return found

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (tests; blocking)."""
        return self.processor.force_flush(int(timeout_s * 1000))

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Export what is queued for at most ``timeout_s``, then stop the exporter thread."""
        try:
            self.processor._batch_processor.shutdown(timeout_millis=int(timeout_s * 1000))
        except Exception as exc:
            logger.warning("OpenTelemetry export did not shut down cleanly: {}", exc)


def _spilled(event: ToolResultSpilled) -> dict[str, Any]:
    """A spilled tool result's event: which, why, how big, and whether it was cut inline.

    The spill file's name is a content hash, not the client's tool call id (which may be
    anything a client sends); ``message`` is the result's position in the request.
    """
    found: dict[str, Any] = {
        "gen_ai.tool.name": event.tool,
        "sessionwarden.spill.message": event.message,
        "sessionwarden.spill.reason": event.reason,
        "sessionwarden.spill.chars": event.chars,
        "sessionwarden.spill.bytes": event.bytes,
        "sessionwarden.spill.preview_chars": event.preview_chars,
        "sessionwarden.spill.truncated": event.truncated,
    }
    if event.file:
        found["sessionwarden.spill.file"] = event.file
    if event.error:
        found["sessionwarden.spill.error"] = event.error[:200]
    return found


def _compressed(event: ContextCompressed) -> dict[str, Any]:
    """A compression's event: why, by what, and what it saved (no summary text, no focus)."""
    found: dict[str, Any] = {
        "sessionwarden.compaction.trigger": event.trigger,
        "sessionwarden.compaction.summariser": event.summariser,
        "sessionwarden.compaction.source": event.source,
        "sessionwarden.compaction.tokens_before": event.tokens_before,
        "sessionwarden.compaction.tokens_after": event.tokens_after,
        "sessionwarden.compaction.tokens_saved": event.tokens_before - event.tokens_after,
        "sessionwarden.compaction.threshold": event.threshold,
        "sessionwarden.compaction.messages_before": event.messages_before,
        "sessionwarden.compaction.messages_after": event.messages_after,
        "sessionwarden.compaction.summarised": event.summarised,
        "sessionwarden.compaction.pruned": event.pruned,
        "sessionwarden.compaction.prepared": event.prepared,
        "sessionwarden.compaction.waited_ms": event.waited_ms,
    }
    if event.model:
        found["sessionwarden.compaction.model"] = event.model
    if event.saved_usd_per_call:
        found["sessionwarden.compaction.saved_usd_per_call"] = event.saved_usd_per_call
    if event.cache_write_usd:
        found["sessionwarden.compaction.cache_write_usd"] = event.cache_write_usd
    return found


def _last_item(request: CallRequest) -> str:
    """The request's last item as sent (JSON), the daemon's keys scrubbed, at most 4 KB."""
    items = getattr(request.body, "items", None)
    if not items:
        return ""
    last = items[-1]
    raw = last if isinstance(last, bytes) else str(last).encode()
    scrubbed = default_redactor.redact_bytes(default_redactor.scrub_secrets(raw))
    return scrubbed[:MAX_CONTENT].decode("utf-8", "replace")
