"""Spans the export cannot take are dropped, never waited for, and counted by why."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry, Counter
from sessionwarden.cmd.daemon.tracing import MAX_QUEUE, Tracing, _BoundedProcessor
from sessionwarden.config import OtelConfig

#: Spans ended at once while the exporter is stuck.
SENT = MAX_QUEUE + 512 + 200


def span(n: int) -> ReadableSpan:
    context = SpanContext(trace_id=n + 1, span_id=n + 1, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(name=f"chat {n}", context=context, start_time=1, end_time=2)


class Stuck(SpanExporter):
    """An exporter that holds its first batch until released: the queue fills behind it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_full_queue_drops_spans_at_once_and_counts_them() -> None:
    registry = CollectorRegistry()
    dropped = Counter("dropped", "", ["reason"], registry=registry)
    stuck = Stuck()
    processor = _BoundedProcessor(stuck, dropped)
    try:
        for n in range(SENT):  # more than the queue and the one batch out
            processor.on_end(span(n))
        lost = registry.get_sample_value("dropped_total", {"reason": "queue_full"})
        assert lost is not None and lost >= SENT - MAX_QUEUE - 512
    finally:
        stuck.release.set()
        processor.shutdown()
    assert stuck.exported + lost == SENT  # every span exported or counted


def test_an_export_the_receiver_refuses_is_counted_as_failed() -> None:
    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(400)  # not retryable: the exporter gives up at once
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry = CollectorRegistry()
    tracing = Tracing(OtelConfig(endpoint=f"http://127.0.0.1:{server.server_address[1]}"),
                      registry)
    try:
        for n in range(3):
            tracing.processor.on_end(span(n))
        tracing.flush(5)
        assert registry.get_sample_value("sessionwarden_otel_spans_dropped_total",
                                         {"reason": "export_failed"}) == 3
    finally:
        tracing.shutdown(0.5)
        server.shutdown()
