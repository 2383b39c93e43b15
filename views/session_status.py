"""One session's status, read from the log: ``status --session`` and the control API.

The ``/usage`` view of hermes-behaviour.md §11 for one session.

:func:`read_status`
reads the session's stream (read-only: it works beside a live daemon) and folds it twice,
purely: its context (``sessionwarden.domain.context.status``; the trigger of the
session's model set from the configuration) and its usage and cost
(``sessionwarden.domain.usage.report``: tokens by kind, the client's calls and the side
calls apart, the total including them). It adds the rate-limit line: the last recorded
buckets (``view_ratelimits``) of the key that served the session's latest call.
:func:`status_json` is the one JSON form, printed by ``status --session ID --json`` and
answered by ``GET /v1/sessions/{id}``; :func:`status_text` the block a person reads
(costs rounded and marked ``~``; the JSON amounts are exact strings). The threshold and
the window are the ones the session's latest call was governed under, as its CallAdmitted
recorded them; only a log older than that record shows the configured ones *now*.

Then the budget (``cmd/budget_status.read_budget``: the session's cap and its subtree's
spend as the log has it; the control API replaces it with the UsageLedgerActor's live
figures, reservations of calls in flight included) and the credit notices up for the key
the session last used (``cmd/credit_status.active_notices``), and the runaway guards'
turn (``views/runaway_status.py``).
"""

from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from sessionwarden.config import Config, ModelConfig
from sessionwarden.domain.admission.caps_stage import SessionBudget
from sessionwarden.domain.context.status import ContextStatus, fold_context, with_threshold
from sessionwarden.domain.context.trigger import DEFAULT_CONTEXT_LENGTH, trigger_tokens
from sessionwarden.domain.cost.caps import display_usd
from sessionwarden.domain.keys.ratelimits import RateLimitBucket
from sessionwarden.domain.session import session_stream
from sessionwarden.domain.usage.report import (
    TOKEN_KINDS,
    RateLimitLine,
    RateLimitReading,
    SessionUsage,
    UsageTally,
    fold_usage,
    rate_limit_line,
)
from sessionwarden.events import CODEC, Event
from sessionwarden.store import EventLog
from sessionwarden.text import printable
from sessionwarden.views.budget_status import read_budget
from sessionwarden.views.credit_status import active_notices, notice_line
from sessionwarden.views.projections import read_buckets
from sessionwarden.views.runaway_status import RunawayStatus, fold_runaway, runaway_lines

__all__ = ["SessionStatus", "model_entry", "read_status", "status_json", "status_text"]


class SessionStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What ``status --session`` shows of one session (see the module docstring).

    ``budget`` is what the spend caps leave the session; ``notices`` the credit notices
    up for its key (``cmd/credit_status.active_notices`` objects).
    """

    context: ContextStatus
    usage: SessionUsage
    rate_limits: RateLimitLine | None = None
    budget: SessionBudget | None = None
    notices: tuple[dict[str, Any], ...] = ()
    runaway: RunawayStatus | None = None


def model_entry(config: Config, provider: str, model: str) -> ModelConfig | None:
    """The ``[[models]]`` entry a call to ``model`` (as sent upstream) on ``provider`` used.

    A ``[[models]]`` name is sent upstream as it is, on its provider, so both the name
    and ``<provider>/<name>`` lead here; any other ``<provider>/<model>`` has no entry.
    """
    return config.model_for(provider, model)


def read_status(log: EventLog, config: Config, session_id: str,
                now: datetime) -> SessionStatus | None:
    """The status of ``session_id`` at ``now``, None if unknown."""
    events: list[tuple[Event, datetime]] = [
        (CODEC.decode(r.type, r.data), datetime.fromisoformat(r.recorded_at))
        for r in log.read_stream(session_stream(session_id))
    ]
    if not events:
        return None
    context = fold_context(session_id, events)
    entry = model_entry(config, context.provider, context.model)
    threshold = trigger_tokens(entry, config.compression)
    window = (entry.context_length if entry else None) or DEFAULT_CONTEXT_LENGTH
    usage = fold_usage(event for event, _ in events)
    notices: tuple[dict[str, Any], ...] = ()
    if usage.last_credential:
        notices = tuple(
            n for n in active_notices(log.read_connection(), now,
                                      usage.last_provider)
            if n["credential"] == usage.last_credential)
    return SessionStatus(
        context=with_threshold(context, threshold, enabled=config.compression.enabled,
                               window_tokens=window),
        usage=usage,
        rate_limits=_read_rate_limits(log, usage.last_provider, usage.last_credential),
        budget=read_budget(log, config, session_id), notices=notices,
        runaway=fold_runaway(event for event, _ in events))


def _read_rate_limits(log: EventLog, provider: str, credential: str) -> RateLimitLine | None:
    """The last recorded buckets of ``provider``'s key ``credential`` (a fingerprint)."""
    if not credential:
        return None
    readings = [RateLimitReading(bucket, at)
                for bucket, at in read_buckets(log.read_connection(), provider, credential)]
    return rate_limit_line(provider, credential, readings)


def _times(value: Any) -> Any:
    """``value`` with every datetime as the log writes times (microseconds, ``+00:00``)."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_times(v) for v in value]
    return value


def _builtins(value: object) -> Any:
    return _times(msgspec.to_builtins(value, builtin_types=(datetime,)))


def _rate_limits_json(line: RateLimitLine | None) -> dict[str, Any] | None:
    if line is None:
        return None
    buckets = [_builtins(b) | {"reset_at": _builtins(at)}
               for b, at in zip(line.buckets, line.reset_at, strict=True)]
    return {"provider": line.provider, "credential": line.credential,
            "observed_at": _builtins(line.observed_at), "buckets": buckets}


def status_json(status: SessionStatus) -> dict[str, Any]:
    """``status`` as one JSON object: the context's keys, then the usage view's.

    The context's keys come first, as they always were, plus ``context_percent``: the
    context figure's share of the threshold (None when either is unknown). Then
    ``usage`` (``total``, ``client``, ``side_calls`` by purpose, ``in_flight``; each
    tally's amounts exact Decimal strings, None when unknown), ``rate_limits`` (None when
    the key has no recorded buckets), ``budget`` (None) and ``notices`` (a list). Times are
    written as ``usage --json`` writes them (``2026-12-01T09:00:00.000000+00:00``).
    """
    context = status.context
    data: dict[str, Any] = _builtins(context)
    figure, threshold = context.context, context.threshold_tokens
    data["context_percent"] = (round(100.0 * figure.tokens / threshold, 1)
                               if figure is not None and threshold else None)
    usage = status.usage
    data["usage"] = {"total": _builtins(usage.total), "client": _builtins(usage.client),
                     "side_calls": _builtins(usage.side_calls),
                     "in_flight": usage.in_flight}
    data["rate_limits"] = _rate_limits_json(status.rate_limits)
    data["budget"] = None if status.budget is None else _builtins(status.budget)
    data["notices"] = [_builtins(notice) for notice in status.notices]
    data["runaway"] = None if status.runaway is None else _builtins(status.runaway)
    return data


def _n(value: int) -> str:
    return f"{value:,}"


def _time(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


#: Under a block whose costs were rounded.
ROUNDED_NOTE = "(costs rounded for display: ~; --json gives the exact amounts)"


def _usd(amount: str | None) -> str:
    return "unknown" if amount is None else display_usd(Decimal(amount))


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def _tokens_text(tally: UsageTally) -> str:
    return ", ".join(f"{kind.replace('_', ' ')} {_n(tally.tokens(kind))}"
                     for kind in TOKEN_KINDS)


def _cost_text(tally: UsageTally) -> str:
    """A tally's cost: rounded with its status, or ``unknown`` with no amount at all."""
    if tally.cost is not None:
        text = f"{_usd(tally.cost)} {tally.cost_status}"
    elif not tally.requests:
        text = "unknown (no call completed yet)"
    else:
        text = f"unknown (no known cost for {_calls(tally.unknown_requests)}"
        if tally.priced_cost is not None:
            others = tally.requests - tally.unknown_requests
            text += f"; the other {_calls(others)} cost {_usd(tally.priced_cost)}"
        text += ")"
    if tally.estimated_requests:
        text += (f"; {_calls(tally.estimated_requests)} estimated "
                 f"({_usd(tally.estimated_cost)}): no usable usage from the upstream")
    return text


def _usage_lines(usage: SessionUsage) -> list[str]:
    """Tokens and cost, side calls included, then each part apart when there are side calls."""
    total = usage.total
    notes = [f"{_calls(total.requests)} completed"
             + (", side calls included" if usage.side_calls else "")]
    if usage.in_flight:
        notes.append(f"{usage.in_flight} in flight")
    if total.sources:
        notes.append("not from the provider: "
                     + ", ".join(f"{s}: {n}" for s, n in total.sources.items()))
    lines = [f"tokens: {_tokens_text(total)} ({'; '.join(notes)})",
             f"cost: {_cost_text(total)}"]
    if usage.side_calls:
        parts = [("client", usage.client),
                 *((f"side calls ({printable(p)})", t) for p, t in usage.side_calls.items())]
        lines += [f"  {name}: {_calls(t.requests)}, {_tokens_text(t)}; cost {_cost_text(t)}"
                  for name, t in parts]
    return lines


def _bucket_text(bucket: RateLimitBucket, reset_at: datetime | None, now: datetime) -> str:
    def number(value: int | None) -> str:
        return "?" if value is None else _n(value)
    text = f"{printable(bucket.name)} {number(bucket.remaining)}/{number(bucket.limit)} left"
    if bucket.exhausted and reset_at is not None and reset_at > now:
        text += f" (empty until {_time(reset_at)})"
    return text


def _rate_limit_lines(line: RateLimitLine | None, now: datetime) -> list[str]:
    """The compact bucket state of the key the session last used (hermes §11)."""
    if line is None:
        return []
    buckets = ", ".join(_bucket_text(b, at, now)
                        for b, at in zip(line.buckets, line.reset_at, strict=True))
    return [f"rate limits: {printable(line.provider)} key {printable(line.credential)} "
            f"(last recorded {_time(line.observed_at)}): {buckets}"]


def _budget_lines(budget: SessionBudget | None) -> list[str]:
    """What the session cap leaves: ``budget left: ~$2.09 of $2.50 (spent ~$0.41, …)``."""
    if budget is None:
        return []
    unknown = _calls(budget.unknown_calls)
    if not budget.unknown_calls:
        spent = f"spent {_usd(budget.spent)}"
    elif Decimal(budget.spent):  # never a silent $0: the unknown part is said apart
        spent = f"spent at least {_usd(budget.spent)}, {unknown} of unknown cost"
    else:
        spent = f"spent unknown: {unknown} of unknown cost"
    if Decimal(budget.reserved):
        spent += f", {_usd(budget.reserved)} reserved by calls in flight"
    if budget.parent:
        spent += f"; draws from session {printable(budget.parent)}'s cap too"
    if budget.cap is None:
        return [f"budget: no session cap ({spent}, with its subsessions)"]
    return [f"budget left: {_usd(budget.left)} of ${budget.cap} "
            f"({spent}, with its subsessions)"]


def _notice_lines(notices: tuple[dict[str, Any], ...]) -> list[str]:
    """The credit notices up for the session's key, one line each."""
    return [f"notice: {printable(notice_line(n))}" for n in notices]


def status_text(full: SessionStatus, now: datetime) -> str:
    """The block ``status --session ID`` prints; every string from the log is escaped."""
    data = status_json(full)
    status = full.context
    model = printable(f"{status.provider}/{status.model}") if status.model else "-"
    side = f", {status.summariser_calls} summariser" if status.summariser_calls else ""
    refused = f", {status.refused} refused" if status.refused else ""
    lines = [
        f"session: {printable(status.session_id)}",
        f"model: {model}",
        f"calls: {status.calls}{side}{refused} "
        f"(first {_time(status.started_at)}, last {_time(status.last_at)})",
        *_usage_lines(full.usage),
        *_rate_limit_lines(full.rate_limits, now),
        *_budget_lines(full.budget),
        *_notice_lines(full.notices),
    ]
    threshold = "-" if status.threshold_tokens is None else _n(status.threshold_tokens)
    off = "" if status.compression_enabled else "; compression disabled"
    if status.window_tokens:
        off += f"; window {_n(status.window_tokens)}"
    if not status.limits_recorded:
        off += " (as configured now)"
    if status.context is None:
        lines.append(f"context: no call yet / threshold {threshold} tokens{off}")
    else:
        lines.append(f"context: {_n(status.context.tokens)} / {threshold} tokens "
                     f"({data['context_percent']} %, {status.context.source}){off}")
    if status.cache_read_percent is not None:
        lines.append(f"prompt cache: {status.cache_read_percent} % of prompt tokens read "
                     "from the provider's cache")
    text = f"compressions: {status.compressions}"
    for one in status.recent_compressions:
        focus = f", focus {printable(repr(one.focus))}" if one.focus else ""
        ahead = (f", prepared ahead (waited {one.waited_ms} ms)" if one.prepared
                 else ", made at the call")
        cache = (f"; cache write ~${one.cache_write_usd}, saves ${one.saved_usd_per_call}"
                 " a later call" if one.cache_write_usd else "")
        text += (f"\n  {_time(one.at)}: {printable(one.trigger)}, "
                 f"{printable(one.summariser)}{ahead}, {_n(one.tokens_before)} -> "
                 f"{_n(one.tokens_after)} tokens (saved {_n(one.saved_tokens)}, "
                 f"{one.saved_percent} %), {one.summarised} messages summarised{focus}{cache}")
    if status.preparation:
        text += (f"\n  next: {status.preparation} (prepared ahead from call "
                 f"{printable(status.preparation_call)})")
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
    lines.extend(runaway_lines(full.runaway))
    if any(line.startswith(("cost: ", "  ")) and "~$" in line for line in lines):
        lines.append(ROUNDED_NOTE)
    return "\n".join(lines)
