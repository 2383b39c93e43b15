"""Is a 429 a genuine limit or a transient one, and when does it end (pure; time is an argument).

**Genuine or transient** (hermes-behaviour.md §5, ``is_genuine_nous_rate_limit``). A 429 is a
genuine limit only if some bucket has ``remaining ≤ 0`` and a reset ≥ 60 s — read from the
429's own headers, or from the last known state of that key (buckets with a limit > 0, their
reset counted down to ``now``). Anything else — a bare 429, a short reset, upstream capacity
("overloaded") — is transient: it cools the key briefly (``key_states``) and benches nothing
for long. Before this rule (Hermes PR #15898) one DeepSeek capacity 429 blocked every model
for 45+ minutes.

**When the limit ends** (§5 reset priority): the hourly request bucket, the request bucket,
``Retry-After``, the body's reset, else 300 s. Two corrections, decided here: a bucket's
reset counts only if that bucket is exhausted (OpenAI sends ``reset-requests: 120ms`` next to
an exhausted token bucket; believing it would retry at once), so other exhausted buckets
(the longest) come right after the request buckets and the last known state after the body;
and a genuine limit is never benched shorter than the bucket that made it genuine.
:func:`limit_failure` turns the verdict into the ``KeyFailure`` the key state machine takes
(a transient verdict with no reset anywhere leaves the cooling to its own backoff).

Headers are parsed by ``sessionwarden.domain.ratelimits`` (OpenAI durations, Anthropic
RFC 3339 or epoch resets, ``retry-after-ms``, ``retry-after`` seconds or HTTP-date); a reset
in the error body is the classifier's to read and arrives here as ``body_reset_at``.
"""

from datetime import datetime, timedelta

import msgspec
from sessionwarden.domain.key_states import KeyFailure
from sessionwarden.domain.ratelimits import RateLimitBucket, RateLimitSnapshot

__all__ = [
    "DEFAULT_RESET_SECONDS",
    "MIN_GENUINE_RESET_SECONDS",
    "LimitVerdict",
    "is_genuine",
    "limit_failure",
    "limit_verdict",
]

MIN_GENUINE_RESET_SECONDS = 60.0
DEFAULT_RESET_SECONDS = 300.0


class LimitVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What a 429 says: genuine or not, and when it ends.

    Attributes:
        genuine: a bucket is out with a reset ≥ 60 s (§5).
        reset_at: when the limit ends by the priority rule (``now`` + 300 s by default).
        source: where ``reset_at`` came from: ``requests_1h``, ``requests``,
            ``bucket:<name>``, ``retry_after``, ``body``, ``last_known:<name>`` or ``default``.
    """

    genuine: bool
    reset_at: datetime
    source: str


def _last_known(
    last_known: RateLimitSnapshot | None, observed_at: datetime | None, now: datetime
) -> list[tuple[str, float]]:
    """Exhausted last-known buckets (limit > 0) and the seconds left until their reset."""
    if last_known is None or observed_at is None:
        return []
    elapsed = (now - observed_at).total_seconds()
    return [
        (b.name, b.reset_seconds - elapsed) for b in last_known.buckets
        if b.exhausted and b.limit is not None and b.limit > 0 and b.reset_seconds is not None
    ]


def _own(snapshot: RateLimitSnapshot) -> list[RateLimitBucket]:
    return [b for b in snapshot.buckets if b.exhausted and b.reset_seconds is not None]


def is_genuine(
    snapshot: RateLimitSnapshot, now: datetime, *,
    last_known: RateLimitSnapshot | None = None, last_known_at: datetime | None = None,
) -> bool:
    """Whether a 429 with ``snapshot`` (its headers) is a genuine limit (§5).

    ``last_known`` is the key's last recorded snapshot, observed at ``last_known_at``.
    """
    return _genuine_seconds(snapshot, now, last_known, last_known_at) is not None


def _genuine_seconds(
    snapshot: RateLimitSnapshot, now: datetime,
    last_known: RateLimitSnapshot | None, last_known_at: datetime | None,
) -> float | None:
    """The longest reset (s) among the buckets that make the limit genuine, or None."""
    resets = [b.reset_seconds for b in _own(snapshot) if b.reset_seconds is not None]
    resets += [left for _, left in _last_known(last_known, last_known_at, now)]
    genuine = [r for r in resets if r >= MIN_GENUINE_RESET_SECONDS]
    return max(genuine) if genuine else None


def limit_verdict(
    snapshot: RateLimitSnapshot, now: datetime, *,
    last_known: RateLimitSnapshot | None = None, last_known_at: datetime | None = None,
    body_reset_at: datetime | None = None,
) -> LimitVerdict:
    """Judge a 429: genuine or transient, and when it ends (module docstring).

    Args:
        snapshot: the 429's rate-limit headers (``parse_rate_limits``).
        now: when the 429 arrived.
        last_known: the key's last recorded buckets.
        last_known_at: when ``last_known`` was observed.
        body_reset_at: a reset the error body gave (the classifier's), if any.
    """
    own = {b.name: b.reset_seconds for b in _own(snapshot) if b.reset_seconds}
    candidates: list[tuple[str, float | None]] = [
        ("requests_1h", own.pop("requests_1h", None)),
        ("requests", own.pop("requests", None)),
    ]
    if own:
        name = max(own, key=lambda n: own[n] or 0.0)
        candidates.append((f"bucket:{name}", own[name]))
    candidates.append(("retry_after", snapshot.retry_after_seconds))
    if body_reset_at is not None:
        candidates.append(("body", (body_reset_at - now).total_seconds()))
    known = _last_known(last_known, last_known_at, now)
    if known:
        name, left = max(known, key=lambda item: item[1])
        candidates.append((f"last_known:{name}", left))
    source, seconds = next(
        ((s, v) for s, v in candidates if v is not None and v > 0),
        ("default", DEFAULT_RESET_SECONDS),
    )
    genuine = _genuine_seconds(snapshot, now, last_known, last_known_at)
    if genuine is not None and genuine > seconds:
        seconds = genuine
    return LimitVerdict(
        genuine=genuine is not None, reset_at=now + timedelta(seconds=seconds), source=source,
    )


def limit_failure(verdict: LimitVerdict, status: int | None = 429, *,
                  shared_limits: bool = False) -> KeyFailure:
    """The key failure a judged 429 is: a genuine limit, or a transient one (cooling)."""
    return KeyFailure(
        kind="genuine_limit" if verdict.genuine else "transient_limit", status=status,
        reset_at=None if verdict.source == "default" and not verdict.genuine else verdict.reset_at,
        shared_limits=shared_limits,
    )
