"""The rules of the error classifier, in pipeline order (pure).

:mod:`sessionwarden.domain.classify.classifier` documents the pipeline and the decisions; this
module holds its steps: :func:`model_code` (a model-not-found code, before any phrase),
:func:`early` (hermes-behaviour.md §7 steps 1-5),
:func:`by_status` (step 7), :func:`by_code` (step 8) and :func:`by_message` (step 9 and
the timeout/disconnect phrases). The verdicts several steps share (rate limit, billing)
are in :mod:`sessionwarden.domain.classify.limits`.
"""

from sessionwarden.domain.classify.classification import Classification
from sessionwarden.domain.classify.limits import (
    Facts,
    billing,
    rate_limit,
    simple,
    transient_signal,
    usage_limit,
)

__all__ = ["by_code", "by_message", "by_status", "early", "model_code"]


#: The statuses a model-not-found code is believed with (OpenAI answers 404, or 403 for
#: a model the project may not use; a gateway 400/422); 0: a streamed error event.
_MODEL_STATUSES = frozenset({0, 400, 403, 404, 422})


def model_code(facts: Facts) -> Classification | None:
    """A model-not-found code: the request's fault, before any phrase is read.

    The message next to it quotes the model, whose name the client chose: read first, a
    billing or revoked phrase in that name would bench the key (issue 21 §1).
    """
    if facts.status in _MODEL_STATUSES and (code := facts.code("model_not_found_codes")):
        return simple(facts, "model_not_found", "code", code)
    return None


def early(facts: Facts) -> Classification | None:
    """§7 steps 1-5: content policy, thinking signature, long-context tier, grammar."""
    if phrase := facts.has("content_policy"):
        return Classification(error_class="content_policy", recovery="relay",
                              reason=f"{facts.where()}: content policy '{phrase}'")
    if (facts.status in (0, 400) and "thinking" in facts.body.text
            and (phrase := facts.has("thinking_signature"))):
        return Classification(error_class="format_error", recovery="relay",
                              reason=f"{facts.where()}: thinking signature '{phrase}'")
    if facts.status in (0, 429) and (phrase := facts.has("long_context_tier")):
        return Classification(error_class="context_overflow", recovery="compress_and_retry",
                              reason=f"{facts.where()}: long-context tier '{phrase}'")
    if facts.status in (0, 400, 500) and (phrase := facts.has("grammar")):
        return Classification(error_class="format_error", recovery="relay",
                              reason=f"{facts.where()}: grammar '{phrase}'")
    return None


def _auth(facts: Facts, rule: str) -> Classification:
    """A 401 or a bad key: it rests (``exhausted``, the pool's auth TTL), dead if revoked.

    Only the provider's saying the key is revoked, disabled, deleted or leaked (a code,
    or those words with the request's quotes cut) makes it ``dead`` until ``keys
    reset``: a plain 401 may be a glitch that passes (issue 21 §2: a flapping 401 once
    killed every key for good).
    """
    revoked = facts.code("revoked_key") or facts.has("revoked_key")
    return Classification(error_class="auth", recovery="rotate", key_specific=True,
                          key_state="dead" if revoked else "exhausted",
                          auth="revoked" if revoked else "invalid",
                          reason=f"{facts.where()}: {rule}" + (f" '{revoked}'" if revoked else ""))


def _by_429(facts: Facts) -> Classification:
    if phrase := facts.has("overloaded"):
        return simple(facts, "overloaded", "capacity", phrase)
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
        return usage_limit(facts, phrase)
    return rate_limit(facts, "bare 429")


def _by_400(facts: Facts) -> Classification:
    """§7 ``_classify_400``: request validation strictly before context overflow."""
    if found := facts.has("request_validation") or facts.code("request_validation_codes"):
        return simple(facts, "format_error", "request validation", found)
    if found := facts.code("context_codes") or facts.has("context_overflow"):
        return simple(facts, "context_overflow", "context", found)
    if phrase := facts.has("provider_policy"):
        return simple(facts, "model_not_found", "provider policy", phrase)
    if found := facts.code("model_not_found_codes") or facts.has("model_not_found"):
        return simple(facts, "model_not_found", "model", found)
    if facts.has("invalid_key") or facts.has("revoked_key") or facts.code("invalid_key"):
        return _auth(facts, "bad key in a 400")
    if phrase := facts.has("rate_limit"):
        return rate_limit(facts, f"'{phrase}'")
    if found := facts.code("billing_codes") or facts.has("billing"):
        return billing(facts, f"'{found}'")
    return simple(facts, "format_error", "bad request")


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
        if phrase and transient_signal(facts):
            return usage_limit(facts, phrase)
        return billing(facts, "payment required")
    if status == 404:
        # Not found is the request's (a model, a path), never the key's: Hermes read a
        # billing phrase here as billing, and the message quotes the client's model.
        if phrase := facts.has("provider_policy"):
            return simple(facts, "model_not_found", "provider policy", phrase)
        if found := facts.code("model_not_found_codes") or facts.has("model_not_found"):
            return simple(facts, "model_not_found", "model", found)
        if "model" in facts.body.text and "not found" in facts.body.text:
            # Ollama: "model 'mistral' not found" puts the name inside the phrase
            return simple(facts, "model_not_found", "model … not found")
        return simple(facts, "unknown", "not found")
    if status in (408, 504, 524):
        return simple(facts, "timeout", "gateway or request timeout")
    if status == 413:
        return simple(facts, "payload_too_large", "payload too large")
    if status == 429:
        return _by_429(facts)
    if status in (400, 422):
        return _by_400(facts)
    if status in (500, 502):
        if found := facts.has("request_validation") or facts.code("request_validation_codes"):
            return simple(facts, "format_error", "request validation", found)
        if found := facts.code("context_codes") or facts.has("context_overflow"):
            return simple(facts, "context_overflow", "context", found)
        return simple(facts, "server_error", "server error")
    if status in (503, 529):
        if found := facts.code("context_codes") or facts.has("context_overflow"):
            return simple(facts, "context_overflow", "context", found)
        return simple(facts, "overloaded", "unavailable")
    if status < 500:
        return simple(facts, "format_error", "client error")
    return simple(facts, "server_error", "server error")


def by_code(facts: Facts) -> Classification | None:
    """§7 step 8, without an error status: the body's error code decides."""
    if code := facts.code("rate_limit_codes"):
        return rate_limit(facts, f"code {code}")
    if code := facts.code("billing_codes"):
        return billing(facts, f"code {code}")
    if code := facts.code("model_not_found_codes"):
        return simple(facts, "model_not_found", "code", code)
    if code := facts.code("context_codes"):
        return simple(facts, "context_overflow", "code", code)
    if code := facts.code("request_validation_codes"):
        return simple(facts, "format_error", "code", code)
    return None


def by_message(facts: Facts) -> Classification | None:
    """§7 step 9 and the timeout/disconnect phrases, without an error status."""
    if phrase := facts.has("payload_too_large"):
        return simple(facts, "payload_too_large", "message", phrase)
    # §7 drift: an explicit "Rate limit exceeded" is not a usage cap ("limit exceeded")
    if (phrase := facts.has("usage_limit")) and not facts.has("rate_limit"):
        return usage_limit(facts, phrase)
    if phrase := facts.has("overloaded"):
        return simple(facts, "overloaded", "message", phrase)
    if phrase := facts.has("billing"):
        return billing(facts, f"'{phrase}'")
    if phrase := facts.has("rate_limit"):
        return rate_limit(facts, f"'{phrase}'")
    if phrase := facts.has("request_validation"):
        return simple(facts, "format_error", "request validation", phrase)
    if phrase := facts.has("context_overflow"):
        return simple(facts, "context_overflow", "message", phrase)
    if facts.has("invalid_key") or facts.has("revoked_key"):
        return _auth(facts, "bad key")
    if phrase := facts.has("auth"):
        return Classification(error_class="auth", recovery="rotate", key_specific=True,
                              auth="forbidden", reason=f"no status: auth '{phrase}'")
    if phrase := facts.has("provider_policy"):
        return simple(facts, "model_not_found", "provider policy", phrase)
    if phrase := facts.has("model_not_found"):
        return simple(facts, "model_not_found", "message", phrase)
    if phrase := facts.has("timeout") or facts.has("disconnect"):
        return simple(facts, "timeout", "message", phrase)
    return None
