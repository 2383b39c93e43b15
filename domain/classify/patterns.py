"""The phrase lists the error classifier matches, as data (pure).

Every list comes from hermes-behaviour.md §7 ("Pattern lists", the pipeline's inline
phrases and its "newer test-pinned behaviour"), completed with the wording real providers
use (OpenAI, Anthropic, OpenRouter, DeepSeek, Gemini, vLLM, llama.cpp, Ollama); the
additions are marked in comments. :mod:`sessionwarden.domain.classify.classifier` says in which
order the lists are tried: that order, not the lists, decides most outcomes.

Matching is plain substring search over normalised text (:func:`normalise`: lowercase,
``_`` and ``-`` read as spaces, whitespace runs collapsed), so ``resource_exhausted``,
``RESOURCE-EXHAUSTED`` and ``resource exhausted`` are one phrase (§7 drift: "resource
exhausted in any separator form"). No regular expression is involved, so matching is
linear in the (capped) text whatever a hostile body contains.

**Extending per provider.** :meth:`Patterns.extended` returns a copy with more phrases in
named lists; :class:`PatternBook` keeps one :class:`Patterns` per provider. The proposed
configuration shape (read by the wiring, not by this module)::

    [providers.myproxy.error_patterns]
    rate_limit = ["slow down, cowboy"]
    billing = ["wallet empty"]

A list name outside :data:`PATTERN_LISTS`, an empty phrase or one longer than
:data:`MAX_PATTERN_CHARS` raises :class:`~sessionwarden.domain.errors.BadPatterns`.
"""

from collections.abc import Mapping, Sequence

import msgspec
from sessionwarden.domain.errors import BadPatterns

__all__ = [
    "DEFAULT_BOOK",
    "DEFAULT_PATTERNS",
    "MAX_PATTERN_CHARS",
    "PATTERN_LISTS",
    "PatternBook",
    "Patterns",
    "normalise",
]

#: A configured phrase longer than this is refused (it could never be a short marker).
MAX_PATTERN_CHARS = 200
_MAX_EXTRA_PER_LIST = 100


def normalise(text: str) -> str:
    """Lowercase ``text``, read ``_`` and ``-`` as spaces and collapse whitespace runs."""
    low = text.lower().replace("_", " ").replace("-", " ")
    if low.isascii():
        # Most error texts are ASCII with single spaces (and the newlines that join a
        # body's strings): then splitting and joining would give back the same text.
        flat = low.replace("\n", " ")
        if flat.isprintable() and "  " not in flat and flat[:1] != " " and flat[-1:] != " ":
            return flat
    return " ".join(low.split())


def _norm(phrases: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(normalise(p) for p in phrases if normalise(p)))


class Patterns(msgspec.Struct, frozen=True, kw_only=True):
    """Named phrase lists (each already normalised) the classifier's rules consult.

    Attributes:
        content_policy: the provider refused the content (§7 step 1).
        thinking_signature: a replayed reasoning block was rejected (§7 step 2; the rule
            also requires the word "thinking").
        long_context_tier: a 429 asking for a paid long-context tier (§7 step 3).
        grammar: a local server could not build a grammar from a tool schema (§7 step 5).
        billing: out of money, quota or plan (§7 billing list).
        billing_codes: error codes meaning billing (§7 step 8).
        forbidden_billing: a 403 that is a spend cap, not a permission (§7 step 7, 403).
        usage_limit: an account usage cap: billing unless a transient signal goes with it.
        transient_signals: words saying a usage cap will lift soon (§7 usage limit).
        rate_limit: explicit rate limiting (§7 rate-limit list).
        rate_limit_codes: error codes meaning rate limiting (§7 step 8).
        genuine_limit: a rate limit on a long window (a day, a month): benched, not cooled.
        upstream_limit: the limit belongs to the provider's upstream, not to our key.
        overloaded: upstream capacity, not our account (§7 overloaded list).
        request_validation: a malformed request, checked before ``context_overflow``.
        request_validation_codes: error codes of the same.
        context_overflow: the prompt does not fit the model's window (§7 context list).
        context_codes: error codes of the same.
        payload_too_large: the request is too large in bytes.
        model_not_found: the model does not exist or is not served (§7 list).
        model_not_found_codes: error codes of the same.
        provider_policy: no endpoint may serve the request under the account's policy.
        invalid_key: the key itself is not valid (also said in 400s, e.g. by Gemini).
        revoked_key: the key was revoked, disabled or leaked: it is dead until replaced.
        auth: authentication in general (§7 auth list).
        timeout: a message saying the upstream timed out.
        disconnect: a message saying the connection dropped (§7 steps 10-11).
    """

    content_policy: tuple[str, ...] = ()
    thinking_signature: tuple[str, ...] = ()
    long_context_tier: tuple[str, ...] = ()
    grammar: tuple[str, ...] = ()
    billing: tuple[str, ...] = ()
    billing_codes: tuple[str, ...] = ()
    forbidden_billing: tuple[str, ...] = ()
    usage_limit: tuple[str, ...] = ()
    transient_signals: tuple[str, ...] = ()
    rate_limit: tuple[str, ...] = ()
    rate_limit_codes: tuple[str, ...] = ()
    genuine_limit: tuple[str, ...] = ()
    upstream_limit: tuple[str, ...] = ()
    overloaded: tuple[str, ...] = ()
    request_validation: tuple[str, ...] = ()
    request_validation_codes: tuple[str, ...] = ()
    context_overflow: tuple[str, ...] = ()
    context_codes: tuple[str, ...] = ()
    payload_too_large: tuple[str, ...] = ()
    model_not_found: tuple[str, ...] = ()
    model_not_found_codes: tuple[str, ...] = ()
    provider_policy: tuple[str, ...] = ()
    invalid_key: tuple[str, ...] = ()
    revoked_key: tuple[str, ...] = ()
    auth: tuple[str, ...] = ()
    timeout: tuple[str, ...] = ()
    disconnect: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in PATTERN_LISTS:
            msgspec.structs.force_setattr(self, name, _norm(getattr(self, name)))

    def extended(self, extra: Mapping[str, Sequence[str]]) -> "Patterns":
        """A copy with ``extra[name]`` phrases appended to each named list.

        Raises:
            BadPatterns: an unknown list name, a phrase that is not a non-empty string of
                at most :data:`MAX_PATTERN_CHARS` characters, or too many phrases.
        """
        changes: dict[str, tuple[str, ...]] = {}
        for name, phrases in extra.items():
            if name not in PATTERN_LISTS:
                raise BadPatterns(f"unknown error pattern list {name!r}")
            if isinstance(phrases, str) or len(phrases) > _MAX_EXTRA_PER_LIST:
                raise BadPatterns(f"error patterns {name!r}: expected a list of phrases")
            for phrase in phrases:
                if not isinstance(phrase, str) or not 0 < len(phrase) <= MAX_PATTERN_CHARS:
                    raise BadPatterns(f"error patterns {name!r}: a phrase is empty or too long")
                if not normalise(phrase):
                    raise BadPatterns(f"error patterns {name!r}: a phrase is only blanks")
            changes[name] = getattr(self, name) + tuple(phrases)
        return msgspec.structs.replace(self, **changes)


#: The names of the lists of :class:`Patterns`, the keys :meth:`Patterns.extended` takes.
PATTERN_LISTS: tuple[str, ...] = Patterns.__struct_fields__


class PatternBook(msgspec.Struct, frozen=True, kw_only=True):
    """The default :class:`Patterns` and the per-provider extensions of it."""

    default: Patterns
    by_provider: dict[str, Patterns] = msgspec.field(default_factory=dict)

    def for_provider(self, provider: str) -> Patterns:
        """The patterns that apply to ``provider`` (the default when it has none)."""
        return self.by_provider.get(provider, self.default)

    def with_provider(self, provider: str, extra: Mapping[str, Sequence[str]]) -> "PatternBook":
        """A copy where ``provider`` uses the default patterns extended by ``extra``."""
        by_provider = dict(self.by_provider)
        by_provider[provider] = self.default.extended(extra)
        return PatternBook(default=self.default, by_provider=by_provider)


DEFAULT_PATTERNS = Patterns(
    content_policy=(
        "flagged for possible cybersecurity risk", "trusted access for cyber",
        "violates our usage policies", "violates openai's usage policies",
        "your request was flagged by", "prompt was flagged by our safety",
        "responses cannot be generated due to safety", "content_filter",
        "responsibleaipolicyviolation",
        # additions: OpenAI, Azure and OpenRouter moderation wording
        "content management policy", "invalid prompt: your prompt was flagged",
        "input was flagged", "requires moderation",
    ),
    # §7 step 2: with "thinking" somewhere in the text
    thinking_signature=("signature", "cannot be modified", "must remain as they were"),
    long_context_tier=("extra usage is required for long context", "long context requests"),
    grammar=("error parsing grammar", "json schema to grammar", "unable to generate parser"),
    billing=(
        "insufficient credits", "insufficient_quota", "insufficient balance", "credit balance",
        "credits exhausted", "no usable credits", "top up your credits", "payment required",
        "billing hard limit", "exceeded your current quota", "account is deactivated",
        "plan does not include", "out of funds", "balance_depleted",
        "not available on the free tier",
        # additions: Anthropic spend caps, OpenRouter and DeepSeek wording
        "spend limit", "regain access on", "add more credits", "purchase credits",
        "billing details", "never purchased credits", "negative credit balance",
    ),
    billing_codes=("insufficient_quota", "billing_not_active", "payment_required",
                   "insufficient_credits", "no_usable_credits", "balance_depleted",
                   "model_not_supported_on_free_tier", "billing_error",
                   "enforced_spend_limit_reached"),
    forbidden_billing=("key limit exceeded", "spending limit"),
    usage_limit=("usage limit", "quota", "limit exceeded", "key limit exceeded",
                 "limit reached"),
    transient_signals=("try again", "retry", "resets at", "reset in", "resets in", "wait",
                       "requests remaining", "periodic", "window", "per minute"),
    rate_limit=(
        "rate limit", "rate_limit", "too many requests", "throttled", "requests per minute",
        "tokens per minute", "requests per day", "try again in", "please retry after",
        "resource_exhausted", "rate increased too quickly", "throttlingexception",
        "too many concurrent requests", "servicequotaexceededexception",
        # additions: Gemini and Ollama wording
        "resource has been exhausted", "rate limited", "ratelimit",
    ),
    rate_limit_codes=("resource_exhausted", "throttled", "rate_limit_exceeded", "rate_limited",
                      "too_many_requests"),
    # additions: a quota on a day or longer, as Gemini's QuotaFailure ids and OpenAI's
    # "requests per day" name it, is exhausted until its reset, never a short cool-down
    genuine_limit=("perday", "per day", "requests per day", "daily limit", "daily quota",
                   "monthly", "per month"),
    # additions: OpenRouter relays its upstream's limit; another key of ours changes nothing
    upstream_limit=("rate limited upstream", "temporarily rate limited upstream"),
    overloaded=("overloaded", "at capacity", "over capacity",
                # additions: Anthropic, Gemini, DeepSeek and OpenRouter wording
                "overloaded_error", "model is overloaded", "server is busy",
                "capacity exceeded", "no capacity", "temporarily unavailable",
                "service unavailable", "high demand"),
    request_validation=("unknown parameter", "unsupported parameter",
                        "unrecognized request argument", "unrecognized request arguments",
                        "extra inputs are not permitted", "unsupported value",
                        "no user query found in messages"),
    request_validation_codes=("unknown_parameter", "unsupported_parameter", "unsupported_value"),
    context_overflow=(
        "context length", "context size", "maximum context", "token limit", "too many tokens",
        "reduce the length", "exceeds the limit", "context window", "prompt is too long",
        "max_tokens", "max_model_len", "prompt length", "input is too long", "slot context",
        "n_ctx_slot", "超过最大长度", "上下文长度", "input token",
        # additions: vLLM, llama.cpp and Gemini wording
        "exceed_context_size_error", "exceeds the available context size",
        "exceed context window", "exceeds the maximum number of tokens",
        "context_length_exceeded",
    ),
    context_codes=("context_length_exceeded", "max_tokens_exceeded",
                   "exceed_context_size_error", "string_above_max_length"),
    payload_too_large=("payload too large", "request entity too large", "request_too_large",
                       "request too large", "exceeds the maximum allowed number of bytes"),
    model_not_found=("is not a valid model", "invalid model", "model not found",
                     "does not exist", "no such model", "unknown model", "unsupported model",
                     # additions: Gemini, Ollama and OpenRouter wording
                     "is not found for api version", "not found, try pulling it first",
                     "no endpoints found for", "deploymentnotfound"),
    model_not_found_codes=("model_not_found", "model_not_available", "invalid_model",
                           "not_found_error", "deploymentnotfound"),
    provider_policy=("no endpoints found matching your data policy",
                     "matching your data policy"),
    invalid_key=("invalid api key", "incorrect api key", "api key not valid", "api_key_invalid",
                 "invalid x api key", "invalid_api_key", "no auth credentials found",
                 "invalid authentication", "authentication fails", "user not found",
                 "api key expired", "invalid token"),
    revoked_key=("token_invalidated", "token_revoked", "token revoked", "invalid_grant",
                 "unauthorized_client", "refresh_token_reused", "has been revoked",
                 "reported as leaked", "has been disabled", "key is disabled",
                 "api key disabled", "key has been deleted", "account is deactivated",
                 "organization has been disabled"),
    auth=("invalid api key", "authentication", "unauthorized", "forbidden", "invalid token",
          "token expired", "token revoked", "access denied", "permission_error",
          "permission denied", "does not have permission"),
    timeout=("timed out", "timeout", "deadline exceeded", "deadline expired"),
    disconnect=("server disconnected", "peer closed connection", "connection reset by peer",
                "unexpected eof", "incomplete chunked read", "connection aborted",
                "bad record mac", "ssl alert", "tls alert", "[ssl:", "connection refused"),
)

#: Every provider uses :data:`DEFAULT_PATTERNS` until the configuration extends it.
DEFAULT_BOOK = PatternBook(default=DEFAULT_PATTERNS)
