"""The classifier's shared facts and its rate-limit and billing verdicts (pure).

:class:`Facts` is what one failure says, with the two lookups every rule uses (a phrase
list against the body's text, a code list against its codes). :func:`rate_limit` decides
*transient* or *genuine* (hermes-behaviour.md §5) and which reset applies; :func:`billing`
exhausts the key, or the whole pool when the provider's keys share one account. The
pipeline that calls them is :mod:`sessionwarden.domain.classify.rules`.
"""

import msgspec
from sessionwarden.domain.classify.classification import (
    GENUINE_MIN_RESET,
    Classification,
    ErrorClass,
    Recovery,
)
from sessionwarden.domain.classify.error_body import ErrorBody
from sessionwarden.domain.classify.patterns import Patterns
from sessionwarden.domain.keys.ratelimits import RateLimitBucket, RateLimitSnapshot

__all__ = ["Facts", "billing", "rate_limit", "simple", "transient_signal", "usage_limit"]


class Facts(msgspec.Struct, frozen=True, kw_only=True):
    """What one failure says: status, patterns, body, headers' buckets, known state."""

    status: int
    patterns: Patterns
    body: ErrorBody
    snapshot: RateLimitSnapshot
    last_known: RateLimitSnapshot | None
    last_known_age: float
    shared_limits: bool

    def has(self, name: str) -> str:
        """The first phrase of list ``name`` found in the body's text, else ``""``."""
        text = self.body.text
        if not text:
            return ""
        phrases: tuple[str, ...] = getattr(self.patterns, name)
        for phrase in phrases:
            if phrase in text:
                return phrase
        return ""

    def code(self, name: str) -> str:
        """The first body code that is in list ``name``, else ``""``."""
        codes = self.body.codes
        if not codes:
            return ""
        wanted: tuple[str, ...] = getattr(self.patterns, name)
        for code in codes:
            if code in wanted:
                return code
        return ""

    def where(self) -> str:
        """The status for a reason text (``"429"``, ``"no status"``)."""
        return str(self.status) if self.status else "no status"


_RECOVERY: dict[ErrorClass, Recovery] = {
    "overloaded": "retry",
    "server_error": "retry",
    "timeout": "retry",
    "context_overflow": "compress_and_retry",
    "payload_too_large": "compress_and_retry",
}


def simple(facts: Facts, error_class: ErrorClass, rule: str, phrase: str = "") -> Classification:
    """A class whose recovery follows from the class alone (not key-specific)."""
    recovery = _RECOVERY.get(error_class, "relay")
    retry_hint = facts.snapshot.retry_after_seconds if recovery == "retry" else None
    suffix = f" '{phrase}'" if phrase else ""
    return Classification(
        error_class=error_class,
        recovery=recovery,
        reset_seconds=retry_hint,
        reset_source="retry-after" if retry_hint is not None else "",
        reason=f"{facts.where()}: {rule}{suffix}",
    )

def _pool_or_key(facts: Facts) -> tuple[Recovery, bool]:
    return ("bench_pool", False) if facts.shared_limits else ("bench_key", True)


def billing(facts: Facts, rule: str) -> Classification:
    """Out of money or quota: the key (or the shared pool) is exhausted until a reset."""
    recovery, key_specific = _pool_or_key(facts)
    reset, source = _reset(facts, ())
    return Classification(error_class="billing", recovery=recovery,
                          key_specific=key_specific, key_state="exhausted",
                          reset_seconds=reset, reset_source=source,
                          reason=f"{facts.where()}: billing {rule}")


def _exhausted(facts: Facts) -> tuple[RateLimitBucket, float, str] | None:
    """The exhausted bucket with the longest reset ≥ 60 s, from headers or known state.

    The headers' buckets first, then the known state's (their age subtracted); a later
    bucket wins only with a strictly longer reset.
    """
    best: tuple[RateLimitBucket, float, str] | None = None
    for bucket in facts.snapshot.buckets:
        reset = bucket.reset_seconds
        if reset is not None and reset >= GENUINE_MIN_RESET and bucket.exhausted and (
            best is None or reset > best[1]
        ):
            best = (bucket, reset, "header")
    if facts.last_known is not None:
        age = facts.last_known_age
        for bucket in facts.last_known.buckets:
            if not bucket.limit or bucket.reset_seconds is None:
                continue  # §5: only buckets with a limit > 0 count from the known state
            reset = bucket.reset_seconds - age
            if reset >= GENUINE_MIN_RESET and bucket.exhausted and (
                best is None or reset > best[1]
            ):
                best = (bucket, reset, "last known")
    return best


def _reset(facts: Facts, bucket_names: tuple[str, ...]) -> tuple[float | None, str]:
    """The reset of the exhausted buckets, else §5's priority order.

    §5's order: the named buckets' resets (> 0), ``Retry-After``, the body's reset. An
    exhausted bucket goes first because it is the one that must refill: §5's order alone
    would take a 0.1 s request reset while the token bucket is out for 20 s.
    """
    out = [b for b in facts.snapshot.buckets if b.exhausted and b.reset_seconds]
    if out:
        longest = max(out, key=lambda b: b.reset_seconds or 0.0)
        return longest.reset_seconds, f"header {longest.name} reset"
    for name in bucket_names:
        bucket = facts.snapshot.bucket(name)
        if bucket is not None and bucket.reset_seconds:
            return bucket.reset_seconds, f"header {name} reset"
    if facts.snapshot.retry_after_seconds is not None:
        return facts.snapshot.retry_after_seconds, "retry-after"
    return facts.body.reset()


def rate_limit(facts: Facts, rule: str, long_reset: bool = False) -> Classification:
    """A rate limit: genuine (exhausted for long: bench) or transient (cool briefly).

    ``long_reset``: the caller knows the limit is an account cap whose stated reset is
    at least :data:`GENUINE_MIN_RESET` away (a usage limit), which makes it genuine too.
    """
    where = facts.where()
    reset: float | None
    if phrase := facts.has("upstream_limit"):
        reset, source = _reset(facts, ("requests",))
        return Classification(error_class="rate_limit", recovery="retry", limit="transient",
                              reset_seconds=reset, reset_source=source,
                              reason=f"{where}: upstream rate limit '{phrase}'")
    out = _exhausted(facts)
    daily = facts.has("genuine_limit") if out is None else ""  # only the reason reads it
    if out is not None or daily or long_reset:
        if out is not None:
            bucket, reset_at, origin = out
            reset = reset_at
            source = f"{origin} {bucket.name} reset"
            why = f"bucket {bucket.name} exhausted for {reset_at:.0f}s ({origin})"
        else:
            reset, source = _reset(facts, ("requests_1h", "requests"))
            why = f"long quota '{daily}'" if daily else "usage limit with a long reset"
            if reset is not None and reset < GENUINE_MIN_RESET:
                # a daily quota does not lift in seconds (Gemini states its per-minute
                # retryDelay even then): leave the reset to the pool's TTL
                reset, source = None, ""
        recovery, key_specific = _pool_or_key(facts)
        return Classification(error_class="rate_limit", recovery=recovery,
                              key_specific=key_specific, key_state="exhausted",
                              limit="genuine", reset_seconds=reset, reset_source=source,
                              reason=f"{where}: genuine rate limit ({rule}): {why}")
    reset, source = _reset(facts, ("requests_1h", "requests"))
    if facts.shared_limits:  # another key draws on the same bucket: wait, do not rotate
        return Classification(error_class="rate_limit", recovery="retry", limit="transient",
                              reset_seconds=reset, reset_source=source,
                              reason=f"{where}: transient rate limit ({rule}), shared limits")
    return Classification(error_class="rate_limit", recovery="bench_key", key_specific=True,
                          key_state="cooling", limit="transient", reset_seconds=reset,
                          reset_source=source, reason=f"{where}: transient rate limit ({rule})")


def transient_signal(facts: Facts) -> str:
    """What says a usage cap will lift soon (a phrase, a stated reset), else ``""``."""
    if phrase := facts.has("transient_signals"):
        return f"'{phrase}'"
    if facts.body.reset()[0] is not None or facts.snapshot.retry_after_seconds is not None:
        return "a stated reset"
    if any(b.reset_seconds is not None for b in facts.snapshot.buckets):
        return "a reset header"
    return ""


def usage_limit(facts: Facts, phrase: str) -> Classification:
    """§7: a usage cap is a rate limit when it says it will lift soon, else billing."""
    if signal := transient_signal(facts):
        reset, _ = _reset(facts, ("requests_1h", "requests"))
        long_reset = reset is not None and reset >= GENUINE_MIN_RESET
        return rate_limit(facts, f"usage limit '{phrase}' with {signal}", long_reset)
    return billing(facts, f"usage limit '{phrase}' without a reset")
