"""The rules of the error classifier, in pipeline order (pure).

:mod:`sessionwarden.domain.classifier` documents the pipeline and the decisions; this
module holds its steps: :meth:`Facts.early` (§7 steps 1-5), :func:`by_status` (step 7),
:func:`by_code` (step 8) and :func:`by_message` (step 9 and the timeout/disconnect
phrases), plus the two verdicts several steps share: :func:`rate_limit` (transient or
genuine, hermes-behaviour.md §5) and :func:`billing`.
"""

import msgspec
from sessionwarden.domain.classification import (
    GENUINE_MIN_RESET,
    Classification,
    ErrorClass,
    Recovery,
)
from sessionwarden.domain.error_body import ErrorBody
from sessionwarden.domain.error_patterns import Patterns
from sessionwarden.domain.ratelimits import RateLimitBucket, RateLimitSnapshot

__all__ = ["Facts", "billing", "by_code", "by_message", "by_status", "rate_limit"]


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
        wanted: tuple[str, ...] = getattr(self.patterns, name)
        found: str = next((code for code in self.body.codes if code in wanted), "")
        return found

    def where(self) -> str:
        return str(self.status) if self.status else "no status"

    def early(self) -> Classification | None:
        """§7 steps 1-5: content policy, thinking signature, long-context tier, grammar."""
        if phrase := self.has("content_policy"):
            return Classification(error_class="content_policy", recovery="relay",
                                  reason=f"{self.where()}: content policy '{phrase}'")
        if (self.status in (0, 400) and "thinking" in self.body.text
                and (phrase := self.has("thinking_signature"))):
            return Classification(error_class="format_error", recovery="relay",
                                  reason=f"{self.where()}: thinking signature '{phrase}'")
        if self.status in (0, 429) and (phrase := self.has("long_context_tier")):
            return Classification(error_class="context_overflow", recovery="compress_and_retry",
                                  reason=f"{self.where()}: long-context tier '{phrase}'")
        if self.status in (0, 400, 500) and (phrase := self.has("grammar")):
            return Classification(error_class="format_error", recovery="relay",
                                  reason=f"{self.where()}: grammar '{phrase}'")
        return None


_RECOVERY: dict[ErrorClass, Recovery] = {
    "overloaded": "retry",
    "server_error": "retry",
    "timeout": "retry",
    "context_overflow": "compress_and_retry",
    "payload_too_large": "compress_and_retry",
}


def _simple(facts: Facts, error_class: ErrorClass, rule: str, phrase: str = "") -> Classification:
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


def _auth(facts: Facts, rule: str) -> Classification:
    """A 401 or a bad key: dead until replaced (revoked when the provider says so)."""
    revoked = facts.has("revoked_key") or facts.code("revoked_key")
    return Classification(error_class="auth", recovery="rotate", key_specific=True,
                          key_state="dead", auth="revoked" if revoked else "invalid",
                          reason=f"{facts.where()}: {rule}" + (f" '{revoked}'" if revoked else ""))


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


def _bucket_reset(bucket: RateLimitBucket, age: float) -> float | None:
    if bucket.reset_seconds is None:
        return None
    return bucket.reset_seconds - age


def _exhausted(facts: Facts) -> tuple[RateLimitBucket, float, str] | None:
    """The exhausted bucket with the longest reset ≥ 60 s, from headers or known state."""
    best: tuple[RateLimitBucket, float, str] | None = None
    sources = [(facts.snapshot, 0.0, "header")]
    if facts.last_known is not None:
        sources.append((facts.last_known, facts.last_known_age, "last known"))
    for snapshot, age, origin in sources:
        for bucket in snapshot.buckets:
            if origin == "last known" and not bucket.limit:
                continue  # §5: only buckets with a limit > 0 count from the known state
            reset = _bucket_reset(bucket, age)
            if bucket.exhausted and reset is not None and reset >= GENUINE_MIN_RESET and (
                best is None or reset > best[1]
            ):
                best = (bucket, reset, origin)
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
    if facts.body.reset_seconds is not None:
        return facts.body.reset_seconds, facts.body.reset_source
    return None, ""


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
    daily = facts.has("genuine_limit")
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


def _transient_signal(facts: Facts) -> str:
    if phrase := facts.has("transient_signals"):
        return f"'{phrase}'"
    if facts.body.reset_seconds is not None or facts.snapshot.retry_after_seconds is not None:
        return "a stated reset"
    if any(b.reset_seconds is not None for b in facts.snapshot.buckets):
        return "a reset header"
    return ""


def _usage_limit(facts: Facts, phrase: str) -> Classification:
    """§7: a usage cap is a rate limit when it says it will lift soon, else billing."""
    if signal := _transient_signal(facts):
        reset, _ = _reset(facts, ("requests_1h", "requests"))
        long_reset = reset is not None and reset >= GENUINE_MIN_RESET
        return rate_limit(facts, f"usage limit '{phrase}' with {signal}", long_reset)
    return billing(facts, f"usage limit '{phrase}' without a reset")


def _by_429(facts: Facts) -> Classification:
    if phrase := facts.has("overloaded"):
        return _simple(facts, "overloaded", "capacity", phrase)
    if facts.has("upstream_limit"):
        return rate_limit(facts, "upstream")
    if code := facts.code("billing_codes"):
        return billing(facts, f"code {code}")
    if code := facts.code("rate_limit_codes"):
        return rate_limit(facts, f"code {code}")
    if phrase := facts.has("billing"):
        return billing(facts, f"'{phrase}'")
    if phrase := facts.has("rate_limit"):
        return rate_limit(facts, f"'{phrase}'")
    if phrase := facts.has("usage_limit"):
        return _usage_limit(facts, phrase)
    return rate_limit(facts, "bare 429")


def _by_400(facts: Facts) -> Classification:
    """§7 ``_classify_400``: request validation strictly before context overflow."""
    if found := facts.has("request_validation") or facts.code("request_validation_codes"):
        return _simple(facts, "format_error", "request validation", found)
    if found := facts.code("context_codes") or facts.has("context_overflow"):
        return _simple(facts, "context_overflow", "context", found)
    if phrase := facts.has("provider_policy"):
        return _simple(facts, "model_not_found", "provider policy", phrase)
    if found := facts.code("model_not_found_codes") or facts.has("model_not_found"):
        return _simple(facts, "model_not_found", "model", found)
    if facts.has("invalid_key") or facts.has("revoked_key") or facts.code("invalid_key"):
        return _auth(facts, "bad key in a 400")
    if phrase := facts.has("rate_limit"):
        return rate_limit(facts, f"'{phrase}'")
    if found := facts.code("billing_codes") or facts.has("billing"):
        return billing(facts, f"'{found}'")
    return _simple(facts, "format_error", "bad request")


def by_status(facts: Facts) -> Classification:
    """§7 step 7: the status decides, the body refines."""
    status = facts.status
    if status == 401:
        return _auth(facts, "unauthorized")
    if status == 403:
        if found := facts.has("forbidden_billing") or facts.has("billing"):
            return billing(facts, f"'{found}'")
        if facts.has("revoked_key") or facts.code("revoked_key"):
            return _auth(facts, "forbidden, key revoked")
        return Classification(error_class="auth", recovery="rotate", key_specific=True,
                              auth="forbidden", reason="403: forbidden for this key")
    if status == 402:
        phrase = facts.has("usage_limit")
        if phrase and _transient_signal(facts):
            return _usage_limit(facts, phrase)
        return billing(facts, "payment required")
    if status == 404:
        if found := facts.has("billing"):
            return billing(facts, f"'{found}'")
        if phrase := facts.has("provider_policy"):
            return _simple(facts, "model_not_found", "provider policy", phrase)
        if found := facts.code("model_not_found_codes") or facts.has("model_not_found"):
            return _simple(facts, "model_not_found", "model", found)
        if "model" in facts.body.text and "not found" in facts.body.text:
            # Ollama: "model 'mistral' not found" puts the name inside the phrase
            return _simple(facts, "model_not_found", "model … not found")
        return _simple(facts, "unknown", "not found")
    if status in (408, 504, 524):
        return _simple(facts, "timeout", "gateway or request timeout")
    if status == 413:
        return _simple(facts, "payload_too_large", "payload too large")
    if status == 429:
        return _by_429(facts)
    if status in (400, 422):
        return _by_400(facts)
    if status in (500, 502):
        if found := facts.has("request_validation") or facts.code("request_validation_codes"):
            return _simple(facts, "format_error", "request validation", found)
        if found := facts.code("context_codes") or facts.has("context_overflow"):
            return _simple(facts, "context_overflow", "context", found)
        return _simple(facts, "server_error", "server error")
    if status in (503, 529):
        if found := facts.code("context_codes") or facts.has("context_overflow"):
            return _simple(facts, "context_overflow", "context", found)
        return _simple(facts, "overloaded", "unavailable")
    if status < 500:
        return _simple(facts, "format_error", "client error")
    return _simple(facts, "server_error", "server error")


def by_code(facts: Facts) -> Classification | None:
    """§7 step 8, without an error status: the body's error code decides."""
    if code := facts.code("rate_limit_codes"):
        return rate_limit(facts, f"code {code}")
    if code := facts.code("billing_codes"):
        return billing(facts, f"code {code}")
    if code := facts.code("model_not_found_codes"):
        return _simple(facts, "model_not_found", "code", code)
    if code := facts.code("context_codes"):
        return _simple(facts, "context_overflow", "code", code)
    if code := facts.code("request_validation_codes"):
        return _simple(facts, "format_error", "code", code)
    return None


def by_message(facts: Facts) -> Classification | None:
    """§7 step 9 and the timeout/disconnect phrases, without an error status."""
    if phrase := facts.has("payload_too_large"):
        return _simple(facts, "payload_too_large", "message", phrase)
    # §7 drift: an explicit "Rate limit exceeded" is not a usage cap ("limit exceeded")
    if (phrase := facts.has("usage_limit")) and not facts.has("rate_limit"):
        return _usage_limit(facts, phrase)
    if phrase := facts.has("overloaded"):
        return _simple(facts, "overloaded", "message", phrase)
    if phrase := facts.has("billing"):
        return billing(facts, f"'{phrase}'")
    if phrase := facts.has("rate_limit"):
        return rate_limit(facts, f"'{phrase}'")
    if phrase := facts.has("request_validation"):
        return _simple(facts, "format_error", "request validation", phrase)
    if phrase := facts.has("context_overflow"):
        return _simple(facts, "context_overflow", "message", phrase)
    if facts.has("invalid_key") or facts.has("revoked_key"):
        return _auth(facts, "bad key")
    if phrase := facts.has("auth"):
        return Classification(error_class="auth", recovery="rotate", key_specific=True,
                              auth="forbidden", reason=f"no status: auth '{phrase}'")
    if phrase := facts.has("provider_policy"):
        return _simple(facts, "model_not_found", "provider policy", phrase)
    if phrase := facts.has("model_not_found"):
        return _simple(facts, "model_not_found", "message", phrase)
    if phrase := facts.has("timeout") or facts.has("disconnect"):
        return _simple(facts, "timeout", "message", phrase)
    return None
