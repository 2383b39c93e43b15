"""One session's context status, read from the log: ``status --session`` and the control API.

:func:`read_status` reads the session's stream (read-only: it works beside a live daemon),
folds it (``sessionwarden.domain.context_status``) and sets the trigger of the session's
model from the configuration. :func:`status_json` is the one JSON form, printed by
``status --session ID --json`` and answered by ``GET /v1/sessions/{id}``;
:func:`status_text` the block a person reads. The threshold is the configured one
*now*: a config changed since the session's calls shows the new trigger.
"""

from datetime import datetime
from typing import Any

import msgspec
from sessionwarden.cmd.terminal import printable
from sessionwarden.config import Config, ModelConfig
from sessionwarden.domain.compression import trigger_tokens
from sessionwarden.domain.context_status import ContextStatus, fold_context, with_threshold
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CODEC, Event
from sessionwarden.store import EventLog

__all__ = ["model_entry", "read_status", "status_json", "status_text"]


def model_entry(config: Config, provider: str, model: str) -> ModelConfig | None:
    """The ``[[models]]`` entry a call to ``model`` (as sent upstream) on ``provider`` used.

    A ``[[models]]`` name is sent upstream as it is, on its provider, so both the name
    and ``<provider>/<name>`` lead here; any other ``<provider>/<model>`` has no entry.
    """
    return config.model_for(provider, model)


def read_status(log: EventLog, config: Config, session_id: str) -> ContextStatus | None:
    """The context status of ``session_id``, or None if the log has no such session."""
    events: list[tuple[Event, datetime]] = [
        (CODEC.decode(r.type, r.data), datetime.fromisoformat(r.recorded_at))
        for r in log.read_stream(session_stream(session_id))
    ]
    if not events:
        return None
    status = fold_context(session_id, events)
    threshold = trigger_tokens(model_entry(config, status.provider, status.model),
                               config.compression)
    return with_threshold(status, threshold, enabled=config.compression.enabled)


def _times(value: Any) -> Any:
    """``value`` with every datetime as the log writes times (microseconds, ``+00:00``)."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    return value


def status_json(status: ContextStatus) -> dict[str, Any]:
    """``status`` as a JSON object, plus ``context_percent``.

    Times are written as ``usage --json`` writes them (``2026-12-01T09:00:00.000000+00:00``).
    ``context_percent`` is the context figure's share of the threshold (None when either
    is unknown).
    """
    data: dict[str, Any] = _times(msgspec.to_builtins(status, builtin_types=(datetime,)))
    figure, threshold = status.context, status.threshold_tokens
    data["context_percent"] = (round(100.0 * figure.tokens / threshold, 1)
                               if figure is not None and threshold else None)
    return data


def _n(value: int) -> str:
    return f"{value:,}"


def _time(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def status_text(status: ContextStatus, now: datetime) -> str:
    """The block ``status --session ID`` prints; every string from the log is escaped."""
    data = status_json(status)
    model = printable(f"{status.provider}/{status.model}") if status.model else "-"
    side = f", {status.summariser_calls} summariser" if status.summariser_calls else ""
    refused = f", {status.refused} refused" if status.refused else ""
    lines = [
        f"session: {printable(status.session_id)}",
        f"model: {model}",
        f"calls: {status.calls}{side}{refused} "
        f"(first {_time(status.started_at)}, last {_time(status.last_at)})",
    ]
    threshold = "-" if status.threshold_tokens is None else _n(status.threshold_tokens)
    off = "" if status.compression_enabled else "; compression disabled"
    if status.context is None:
        lines.append(f"context: no call yet / threshold {threshold} tokens{off}")
    else:
        lines.append(f"context: {_n(status.context.tokens)} / {threshold} tokens "
                     f"({data['context_percent']} %, {status.context.source}){off}")
    last = status.last_compression
    text = f"compressions: {status.compressions}"
    if last is not None:
        focus = f", focus {printable(repr(last.focus))}" if last.focus else ""
        text += (f"\n  last {_time(last.at)}: {printable(last.trigger)}, "
                 f"{printable(last.summariser)}, {_n(last.tokens_before)} -> "
                 f"{_n(last.tokens_after)} tokens (saved {_n(last.saved_tokens)}, "
                 f"{last.saved_percent} %), {last.summarised} messages summarised{focus}")
    lines.append(text)
    text = f"spills: {status.spills}"
    if status.spills:
        truncated = (f"; {status.spills_truncated} truncated inline"
                     if status.spills_truncated else "")
        text += f" ({_n(status.spilled_bytes)} bytes{truncated})"
    lines.append(text)
    if status.history_resets:
        lines.append(f"history resets: {status.history_resets}")
    failure = status.last_failure
    text = f"summariser failures: {status.summariser_failures}"
    if failure is not None:
        state = "active" if failure.cooldown_until > now else "over"
        text += (f"\n  last {_time(failure.at)}: {printable(failure.model)}: "
                 f"{printable(failure.reason)} ({printable(failure.action)}), cooldown until "
                 f"{_time(failure.cooldown_until)} ({state})")
    lines.append(text)
    pending = status.pending_compaction
    if pending is not None:
        focus = f", focus {printable(repr(pending.focus))}" if pending.focus else ""
        lines.append(f"compaction requested: {_time(pending.requested_at)}{focus} "
                     "(done at the session's next call)")
    return "\n".join(lines)
