"""One proxied call's record: what the proxy knows about it, and how its outcome is logged.

:func:`record_call` is the single place a call's outcome enters the log: the upstream
response (status, latency, rate-limit headers) and exactly one UsageRecorded, committed
together; it releases the call's key first and returns only once both are durable. It
runs at most once per call, whichever path (normal end, upstream error, client gone,
shutdown) gets there first.
"""

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.errors import ActorUnavailable, UsageRejected
from sessionwarden.actors.messages import Leased, RecordUsage, Release, Responded
from sessionwarden.actors.ratelimits import parse_rate_limits
from sessionwarden.actors.usage import CanonicalUsage, estimate_usage
from sessionwarden.actors.usage import normalise_usage as normalise
from sessionwarden.cmd.config import ProviderConfig
from sessionwarden.cmd.runtime import Runtime
from sessionwarden.events import RateLimitBucketSeen, UpstreamResponded, UsageRecorded
from sessionwarden.redact import default_redactor

__all__ = ["ProxiedCall", "record_call", "release_key", "short"]

_encode = msgspec.json.Encoder().encode


class ProxiedCall:
    """What the proxy knows about one call while it is in flight."""

    __slots__ = ("call_id", "lease", "messages", "model", "provider", "recorded", "session_id",
                 "started", "stream")

    def __init__(self, session_id: str, provider: ProviderConfig, model: str, messages: Any,
                 stream: bool) -> None:
        self.call_id = uuid.uuid4().hex
        self.session_id = session_id
        self.provider = provider
        self.model = model
        self.messages = messages
        self.stream = stream
        self.lease: Leased | None = None
        self.recorded = False
        self.started = time.perf_counter()


def release_key(rt: Runtime, call: ProxiedCall, status: int) -> None:
    """Give the call's key back to the pool (once)."""
    lease = call.lease
    if lease is not None:
        call.lease = None
        try:
            rt.ref("credentials").tell(Release(lease.provider, lease.fingerprint, call.call_id,
                                               status))
        except Exception:
            logger.warning("call {}: could not release its key", call.call_id)


async def record_call(
    rt: Runtime, call: ProxiedCall, status: int, headers: dict[str, str], usage_block: object,
    *, output: object = None, error: str = "", has_output: bool = False,
    disconnected: bool = False,
) -> None:
    """Record the upstream response and the call's usage; return once durable.

    Runs at most once per call, whichever path (normal end, error, cancellation) gets
    there first.
    """
    if call.recorded:
        return
    call.recorded = True
    latency_ms = round((time.perf_counter() - call.started) * 1000, 3)
    credential = call.lease.fingerprint if call.lease else ""
    limits = parse_rate_limits(headers, datetime.now(UTC)) if headers else None
    responded = UpstreamResponded(
        call_id=call.call_id, session_id=call.session_id, status=status, latency_ms=latency_ms,
        credential=credential,
        rate_limits=tuple(
            RateLimitBucketSeen(b.name, b.limit, b.remaining, b.reset_seconds)
            for b in (limits.buckets if limits else ())
        ),
        retry_after_seconds=limits.retry_after_seconds if limits else None,
        error=error,
    )
    usage, flags = _usage(call, usage_block, output, has_output)
    raw = ""
    if usage_block is not None:
        raw = short(default_redactor.redact(_encode(usage_block).decode()), 2000)
    record = UsageRecorded(
        call_id=call.call_id, session_id=call.session_id, provider=call.provider.name,
        model=call.model, credential=credential, status=status,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens, source=usage.source, raw_usage=raw,
        flags=flags, stream=call.stream, client_disconnected=disconnected,
    )
    release_key(rt, call, status)
    try:
        await ask(rt.session_ref(call.session_id), Responded(responded, record), timeout=60.0)
    except ActorUnavailable:
        # The session shard is restarting: the usage row matters most, record it directly.
        logger.warning("call {}: session actor unavailable; response not recorded", call.call_id)
        await ask(rt.ref("ledger"), RecordUsage(record), timeout=60.0)


def _usage(
    call: ProxiedCall, block: object, output: object, has_output: bool
) -> tuple[CanonicalUsage, tuple[str, ...]]:
    if not has_output:
        return CanonicalUsage(source="missing"), ()
    try:
        usage = normalise(call.provider.api_mode, block)
    except UsageRejected as exc:
        return estimate_usage(call.messages, output), (f"rejected:{exc.field or 'usage'}",)
    if usage.source == "missing":
        return estimate_usage(call.messages, output), ("usage_missing",)
    return usage, tuple(usage.flags)


def short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
