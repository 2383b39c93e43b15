"""The floor of an exported span on the OpenTelemetry SDK, next to sessionwarden's span.

Run ``.venv/bin/python bench/otel_floor.py [--spans N] [--rounds R] [--profile]``. In one
process, through one ``cmd/daemon/tracing.Tracing`` (its provider, bounded batch processor
and OTLP/HTTP exporter) posting to a sink on 127.0.0.1 (a separate process, so its CPU is
not counted), each round makes N spans of each kind, then flushes:

* ``bare``: ``tracer.start_span(name, attributes={one})`` then ``end()`` (a tracer of
  the SDK's ``TracerProvider`` on the same processor): the least a span made the SDK's
  usual way costs;
* ``bare readable``: a finished ``ReadableSpan`` with one attribute handed to the same
  processor, as ``Tracing`` hands its spans: the least a span exported through this
  processor and exporter costs, whatever builds it; the ceiling of any implementation;
* ``same attributes``: as ``bare readable``, with the attributes of a ``sessionwarden``
  span made once beforehand: what exporting that many attributes costs, the floor of
  any implementation that sends them;
* ``sessionwarden``: ``Tracing.record`` of a plain proxied call (ok, usage, cost, its
  admission's IterationCounted), as ``proxy/calls.complete`` hands it over;
* ``with events``: the same call with a failover, a spill and a compaction (span events).

Spans are made 1,000 at a time, each thousand flushed before the next (the processor's
queue holds 2,048: more would be dropped, not exported). Printed per kind: this
process's CPU per span (every thread: the batch processor's export
thread encodes and posts), the calling thread's share (what runs on the daemon's event
loop), medians over rounds; then each kind as a multiple of ``bare``. The daemon's whole
CPU per small call (``bench/floor.py``) is the scale to read these against. ``--profile``
prints where the calling thread's time goes for ``sessionwarden`` (cProfile).
Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, TraceFlags, Tracer
from prometheus_client import CollectorRegistry
from sessionwarden.cmd.daemon.tracing import Tracing
from sessionwarden.config import OtelConfig, ProviderConfig
from sessionwarden.domain.calls import CallOutcome, CallRequest, RequestShape
from sessionwarden.events import (
    CallAttempt,
    CallCompleted,
    ContextCompressed,
    Event,
    IterationCounted,
    ToolResultSpilled,
)

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: A sink that answers every export 200 and keeps nothing; prints its port.
SINK = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class Call:
    """A finished proxied call, as ``proxy/calls.ProxiedCall`` hands it to the tracer."""

    def __init__(self, n: int, decided: tuple[Event, ...],
                 attempts: tuple[CallAttempt, ...]) -> None:
        self.call_id = f"{n:016d}"
        self.session_id = "bench-otel"
        self.parent = ""
        self.started = time.perf_counter() - 0.002
        self.provider = ProviderConfig(name="fake", base_url="http://127.0.0.1:1/v1")
        self.model = "gpt-test"
        self.admitted: CallRequest | None = CallRequest(
            call_id=self.call_id, session_id=self.session_id, provider="fake",
            model="gpt-test", api_mode="chat_completions",
            shape=RequestShape(model="fake/gpt-test", message_count=2, prompt_chars=40),
            body=None)
        self.client_request = self.admitted
        self.side: CallRequest | None = None
        self.decided = decided
        self._attempts = attempts

    def outcome(self, outcome: str, **facts: Any) -> CallOutcome:
        return CallOutcome(call_id=self.call_id, session_id=self.session_id, outcome=outcome,
                           provider="fake", credential="fp-0123456789", model=self.model,
                           attempts=self._attempts, **facts)


def done(call: Call) -> CallCompleted:
    return CallCompleted(call_id=call.call_id, status=200, latency_ms=2.0,
                         credential="fp-0123456789", input_tokens=12, output_tokens=9,
                         response_id="chatcmpl-0123456789", cost=str(Decimal("0.000042")),
                         cost_status="exact", cost_source="genai-prices")


def plain(n: int) -> Call:
    return Call(n, (IterationCounted(call_id=f"{n:016d}", turn="t", used=1),), ())


def eventful(n: int) -> Call:
    cid = f"{n:016d}"
    return Call(n, (
        IterationCounted(call_id=cid, turn="t", used=1),
        ToolResultSpilled(call_id=cid, message=3, tool="terminal", file="ab" * 16,
                          chars=150_000, bytes=150_000, preview_chars=2_000),
        ContextCompressed(call_id=cid, tokens_before=13_000, tokens_after=4_000,
                          threshold=12_750, messages_before=80, messages_after=12,
                          summarised=60, pruned=4),
    ), (CallAttempt(credential="fp-9876543210", status=429, error_class="rate_limit"),))


#: Spans made between two flushes (under the processor's queue of 2,048).
CHUNK = 1000


def run(tracing: Tracing, tracer: Tracer, kind: str, spans: int,
        start: int) -> tuple[float, float]:
    """CPU per span in µs: the whole process, and the calling thread only."""
    calls = ([plain(start + i) for i in range(spans)] if kind == "sessionwarden"
             else [eventful(start + i) for i in range(spans)] if kind == "with events"
             else [])
    finished = [(c, done(c), c.outcome("ok", status=200)) for c in calls]
    scope = InstrumentationScope("bench")
    model: Any = plain(start)  # a ProxiedCall as far as the tracer is concerned
    same = tracing._attributes(model, done(model), model.outcome("ok", status=200),
                               model.admitted, "chat")
    whole = caller = 0.0
    for chunk in range(0, spans, CHUNK):
        process, thread = time.process_time(), time.thread_time()
        if kind == "bare":
            for i in range(chunk, min(chunk + CHUNK, spans)):
                tracer.start_span("chat gpt-test", attributes={
                    "sessionwarden.call.id": f"{start + i:016d}"}).end()
        elif kind in ("bare readable", "same attributes"):
            for i in range(chunk, min(chunk + CHUNK, spans)):
                now = time.time_ns()
                tracing.processor.on_end(ReadableSpan(
                    "chat gpt-test", context=SpanContext(start + i, i + 1, False, SAMPLED),
                    resource=tracing.resource,
                    attributes=(same if kind == "same attributes"
                                else {"sessionwarden.call.id": f"{start + i:016d}"}),
                    start_time=now, end_time=now, instrumentation_scope=scope))
        else:
            for call, completed, outcome in finished[chunk:chunk + CHUNK]:
                tracing.record(call, completed, outcome)  # type: ignore[arg-type]
        caller += time.thread_time() - thread
        if not tracing.flush(30.0):
            raise RuntimeError("the export did not finish")
        whole += time.process_time() - process
    return whole / spans * 1e6, caller / spans * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=5000, help="spans per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="profile the calling thread of the sessionwarden kind")
    args = parser.parse_args()
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        tracing = Tracing(OtelConfig(endpoint=f"http://127.0.0.1:{port}"), CollectorRegistry())
        provider = TracerProvider(resource=tracing.resource)
        provider.add_span_processor(tracing.processor)
        tracer = provider.get_tracer("bench")
        kinds = ["bare", "bare readable", "same attributes", "sessionwarden", "with events"]
        run(tracing, tracer, "sessionwarden", 500, 10**9)  # warm-up: imports, the connection
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            run(tracing, tracer, "sessionwarden", args.spans, 2 * 10**9)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        whole: dict[str, list[float]] = {k: [] for k in kinds}
        caller: dict[str, list[float]] = {k: [] for k in kinds}
        for r in range(args.rounds):
            for i, kind in enumerate(kinds[r % 5:] + kinds[: r % 5]):
                w, c = run(tracing, tracer, kind, args.spans, (r * 5 + i + 1) * 10**6)
                whole[kind].append(w)
                caller[kind].append(c)
                print(f"  round {r + 1} {kind:13s} {w:7.1f} µs/span, caller {c:7.1f}",
                      file=sys.stderr)
        tracing.shutdown()
        print(f"\n{args.spans} spans per kind and round, {args.rounds} rounds")
        print("kind            CPU µs/span (median)   calling thread µs/span")
        for kind in kinds:
            print(f"{kind:15s} {statistics.median(whole[kind]):10.1f}"
                  f"             {statistics.median(caller[kind]):10.1f}")
        for kind in kinds[1:]:
            for floor in ("bare", "bare readable", "same attributes"):
                if kinds.index(kind) > kinds.index(floor):
                    ratios = [a / b for a, b in zip(whole[kind], whole[floor], strict=True)]
                    print(f"{kind} / {floor}: CPU {statistics.median(ratios):.2f}x")
    finally:
        sink.terminate()
        sink.wait()


if __name__ == "__main__":
    main()
