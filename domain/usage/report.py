"""One session's usage and cost, folded from its events: the ``/usage`` figures of ``status``.

:func:`fold_usage` reads one session's events, oldest first, and tallies its completed
calls (``CallCompleted``) by who made them: the client's own calls, and the daemon's
side calls (a ``CallAdmitted`` with ``purpose`` set, e.g. the model summariser's
``"summary"``) by purpose. The session's ``total`` includes its side calls; each part is
also shown apart. Each :class:`UsageTally` has the tokens by kind, the cost and how much
of it is not a plain ``actual`` amount:

- ``cost`` is the exact Decimal sum (a string), or None (``unknown``) as soon as one call
  has no price: an unknown cost is never shown as a number, let alone $0. ``priced_cost``
  still sums the calls that have a price, and ``unknown_requests`` counts the others;
- ``cost_status`` follows ``usage``'s rules: ``unknown`` when a call is unknown (or no
  call completed yet), the calls' common status when they share one, else ``partial``;
- ``estimated_requests`` and ``estimated_cost``: calls priced from our estimate because
  the upstream sent no usage (or usage that was rejected);
- ``sources``: as in ``usage``, the calls whose token counts are not the provider's.

It also keeps which key served the session's latest client call (``last_provider``,
``last_credential``): the rate-limit line of ``status --session`` shows that key's last
recorded buckets (:class:`RateLimitLine`, built from ``view_ratelimits`` rows by
:func:`rate_limit_line`). Pure: nothing here reads the log or the clock.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

import msgspec
from sessionwarden.domain.keys.ratelimits import RateLimitBucket
from sessionwarden.domain.usage.recorded import EXACT, combined_status, read_cost
from sessionwarden.events import CallAdmitted, CallCompleted, Event

__all__ = [
    "TOKEN_KINDS",
    "RateLimitLine",
    "RateLimitReading",
    "SessionUsage",
    "UsageTally",
    "fold_usage",
    "rate_limit_line",
]

#: The token kinds, in the order every view shows them.
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")


class UsageTally(msgspec.Struct, frozen=True, kw_only=True):
    """The completed calls of one part of a session (see the module docstring)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: str | None = None
    cost_status: str = "unknown"
    priced_cost: str | None = None
    unknown_requests: int = 0
    estimated_requests: int = 0
    estimated_cost: str | None = None
    sources: dict[str, int] = msgspec.field(default_factory=dict)

    def tokens(self, kind: str) -> int:
        """The tokens of ``kind`` (one of :data:`TOKEN_KINDS`)."""
        value: int = getattr(self, f"{kind}_tokens")
        return value


class SessionUsage(msgspec.Struct, frozen=True, kw_only=True):
    """A session's usage: ``total`` = ``client`` + every part of ``side_calls``.

    ``side_calls`` is keyed by purpose (``"summary"``); ``in_flight`` counts the calls
    admitted and not completed yet (not in any tally).
    """

    total: UsageTally
    client: UsageTally
    side_calls: dict[str, UsageTally]
    in_flight: int = 0
    last_provider: str = ""
    last_credential: str = ""


class RateLimitReading(msgspec.Struct, frozen=True):
    """One ``view_ratelimits`` row: a bucket of a key as last recorded, at ``observed_at``."""

    bucket: RateLimitBucket
    observed_at: datetime


class RateLimitLine(msgspec.Struct, frozen=True, kw_only=True):
    """The last recorded buckets of the key a session last used.

    ``reset_at`` (per bucket, same order) is when the provider said the bucket refills:
    the recording time plus its ``reset_seconds``. A bucket that merely counts down is
    not recorded on every call (``domain/ratelimits.worth_recording``), so ``remaining``
    may be older than ``observed_at`` suggests for a busy key: it is the last band seen.
    """

    provider: str
    credential: str
    observed_at: datetime
    buckets: tuple[RateLimitBucket, ...]
    reset_at: tuple[datetime | None, ...]


def rate_limit_line(provider: str, credential: str,
                    readings: Iterable[RateLimitReading]) -> RateLimitLine | None:
    """The line for ``provider``'s key ``credential`` from its rows; None when it has none."""
    rows = sorted(readings, key=lambda r: r.bucket.name)
    if not rows:
        return None
    return RateLimitLine(
        provider=provider, credential=credential,
        observed_at=max(r.observed_at for r in rows),
        buckets=tuple(r.bucket for r in rows),
        reset_at=tuple(None if r.bucket.reset_seconds is None
                       else r.observed_at + timedelta(seconds=r.bucket.reset_seconds)
                       for r in rows))


class _Part:
    """The running sums of one :class:`UsageTally`."""

    def __init__(self) -> None:
        self.requests = self.unknown = self.estimated = 0
        self.tokens = dict.fromkeys(TOKEN_KINDS, 0)
        self.statuses: set[str] = set()
        self.priced = self.estimated_sum = Decimal(0)
        self.sources: dict[str, int] = {}

    def add(self, event: CallCompleted) -> None:
        self.requests += 1
        for kind in TOKEN_KINDS:
            self.tokens[kind] += getattr(event, f"{kind}_tokens")
        if event.source != "provider":
            self.sources[event.source] = self.sources.get(event.source, 0) + 1
        amount = read_cost(event.cost)
        if amount is None or event.cost_status == "unknown":
            self.unknown += 1
            self.statuses.add("unknown")
            return
        self.statuses.add(event.cost_status)
        self.priced = EXACT.add(self.priced, amount)
        if event.cost_status == "estimated":
            self.estimated += 1
            self.estimated_sum = EXACT.add(self.estimated_sum, amount)

    def merge(self, other: "_Part") -> None:
        self.requests += other.requests
        self.unknown += other.unknown
        self.estimated += other.estimated
        for kind in TOKEN_KINDS:
            self.tokens[kind] += other.tokens[kind]
        self.statuses |= other.statuses
        self.priced = EXACT.add(self.priced, other.priced)
        self.estimated_sum = EXACT.add(self.estimated_sum, other.estimated_sum)
        for source, n in other.sources.items():
            self.sources[source] = self.sources.get(source, 0) + n

    def tally(self) -> UsageTally:
        status = combined_status(self.statuses)
        priced = self.requests > self.unknown
        return UsageTally(
            requests=self.requests,
            **{f"{kind}_tokens": n for kind, n in self.tokens.items()},
            cost=None if status == "unknown" else str(self.priced),
            cost_status=status,
            priced_cost=str(self.priced) if priced else None,
            unknown_requests=self.unknown,
            estimated_requests=self.estimated,
            estimated_cost=str(self.estimated_sum) if self.estimated else None,
            sources=dict(sorted(self.sources.items())))


def fold_usage(events: Iterable[Event]) -> SessionUsage:
    """Fold one session's events, oldest first; events of other kinds are ignored."""
    purposes: dict[str, str] = {}  # call id -> purpose ("" for a client's call)
    providers: dict[str, str] = {}
    client = _Part()
    side: dict[str, _Part] = {}
    last_provider = last_credential = ""
    for event in events:
        if isinstance(event, CallAdmitted):
            purposes[event.call_id] = event.purpose
            providers[event.call_id] = event.provider
        elif isinstance(event, CallCompleted):
            purpose = purposes.pop(event.call_id, "")
            provider = providers.pop(event.call_id, "")
            if purpose:
                side.setdefault(purpose, _Part()).add(event)
                continue
            client.add(event)
            if event.credential:
                last_provider, last_credential = provider, event.credential
    total = _Part()
    for part in (client, *side.values()):
        total.merge(part)
    return SessionUsage(
        total=total.tally(), client=client.tally(),
        side_calls={purpose: part.tally() for purpose, part in sorted(side.items())},
        in_flight=len(purposes), last_provider=last_provider,
        last_credential=last_credential)

