"""Real provider error bodies, each with the class and recovery the classifier must give.

Bodies are the providers' own wording (their error docs, SDK issues and the pattern lists
of hermes-behaviour.md §7); identifiers are shortened and keys masked. ``NOW`` is the
moment every case is classified at, so absolute resets in bodies are relative to it.
"""

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, NamedTuple

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def _j(value: Any) -> bytes:
    return json.dumps(value).encode()


def _openai(message: str, type_: str | None, code: str | None, param: str | None = None) -> bytes:
    return _j({"error": {"message": message, "type": type_, "param": param, "code": code}})


def _anthropic(type_: str, message: str, **extra: Any) -> bytes:
    return _j({"type": "error", "error": {"type": type_, "message": message, **extra},
               "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})


def _gemini(code: int, message: str, status: str, details: list[Any] | None = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return _j({"error": error})


def _openrouter(code: int, message: str, **metadata: Any) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if metadata:
        error["metadata"] = metadata
    return _j({"error": error, "user_id": "user_2dHFeV4"})


def _vllm(code: int, message: str, type_: str) -> bytes:
    return _j({"object": "error", "message": message, "type": type_, "param": None, "code": code})


def _rfc3339(seconds: float) -> str:
    return (NOW + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class Case(NamedTuple):
    """One row: who said it, what they said, and what it must classify as."""

    id: str
    provider: str
    status: int
    body: bytes
    error_class: str
    recovery: str
    headers: dict[str, str] = {}
    expect: dict[str, Any] = {}


_GEMINI_HELP = {"@type": "type.googleapis.com/google.rpc.Help", "links": [
    {"description": "Learn more about Gemini API quotas",
     "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}


def _gemini_quota(quota_id: str, delay: str) -> list[Any]:
    return [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
            "quotaValue": "250"}]},
        _GEMINI_HELP,
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
    ]


_GEMINI_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)

CASES: list[Case] = [
    # ------------------------------------------------------------------ OpenAI
    Case("openai-429-insufficient-quota", "openai", 429, _openai(
        "You exceeded your current quota, please check your plan and billing details. For "
        "more information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "insufficient_quota", "insufficient_quota"),
        "billing", "bench_key", expect={"key_state": "exhausted", "key_specific": True}),
    Case("openai-429-insufficient-quota-null-code", "openai", 429, _openai(
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota", None), "billing", "bench_key"),
    Case("openai-429-tpm", "openai", 429, _openai(
        "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
        "Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        "tokens", "rate_limit_exceeded"),
        "rate_limit", "bench_key",
        headers={"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
                 "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "30000",
                 "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.4s"},
        expect={"limit": "transient", "key_state": "cooling", "reset_seconds": 1.4}),
    Case("openai-429-rpm-body-only", "openai", 429, _openai(
        "Rate limit reached for gpt-4o-mini in organization org-abc on requests per min "
        "(RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
        "requests", "rate_limit_exceeded"),
        "rate_limit", "bench_key", expect={"limit": "transient", "reset_seconds": 20.0}),
    Case("openai-429-rpd", "openai", 429, _openai(
        "Rate limit reached for gpt-4o-mini in organization org-abc on requests per day "
        "(RPD): Limit 10000, Used 10000, Requested 1. Please try again in 8.64s.",
        "requests", "rate_limit_exceeded"),
        "rate_limit", "bench_key",
        expect={"limit": "genuine", "key_state": "exhausted", "reset_seconds": None}),
    Case("openai-429-hourly-bucket-exhausted", "openai", 429, _openai(
        "Rate limit reached for requests", "requests", "rate_limit_exceeded"),
        "rate_limit", "bench_key",
        headers={"x-ratelimit-remaining-requests-1h": "0", "x-ratelimit-reset-requests-1h": "3100",
                 "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "2s"},
        expect={"limit": "genuine", "reset_seconds": 3100.0}),
    Case("openai-401-invalid-key", "openai", 401, _openai(
        "Incorrect API key provided: sk-proj-****abcd. You can find your API key at "
        "https://platform.openai.com/account/api-keys.", "invalid_request_error",
        "invalid_api_key"),
        "auth", "rotate",
        expect={"auth": "invalid", "key_state": "exhausted", "key_specific": True}),
    Case("openai-400-context-length", "openai", 400, _openai(
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130412 tokens. Please reduce the length of the messages.",
        "invalid_request_error", "context_length_exceeded", "messages"),
        "context_overflow", "compress_and_retry"),
    Case("openai-400-unsupported-max-tokens", "openai", 400, _openai(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", "invalid_request_error", "unsupported_parameter",
        "max_tokens"),
        "format_error", "relay"),
    Case("openai-400-unsupported-value", "openai", 400, _openai(
        "Unsupported value: 'temperature' does not support 0.2 with this model. Only the "
        "default (1) value is supported.", "invalid_request_error", "unsupported_value",
        "temperature"),
        "format_error", "relay"),
    Case("openai-404-model", "openai", 404, _openai(
        "The model `gpt-5-turbo` does not exist or you do not have access to it.",
        "invalid_request_error", "model_not_found"),
        "model_not_found", "relay"),
    Case("openai-400-invalid-prompt", "openai", 400, _openai(
        "Invalid prompt: your prompt was flagged as potentially violating our usage policy. "
        "Please try again with a different prompt.", "invalid_request_error", "invalid_prompt"),
        "content_policy", "relay"),
    Case("openai-500", "openai", 500, _openai(
        "The server had an error while processing your request. Sorry about that!",
        "server_error", None),
        "server_error", "retry", expect={"key_specific": False}),
    Case("openai-503-engine-overloaded", "openai", 503, _openai(
        "The engine is currently overloaded, please try again later", "server_error", None),
        "overloaded", "retry"),
    Case("openai-403-region", "openai", 403, _j({"error": {
        "code": "unsupported_country_region_territory",
        "message": "Country, region, or territory not supported", "param": None,
        "type": "request_forbidden"}}),
        "auth", "rotate", expect={"auth": "forbidden", "key_state": None}),
    Case("azure-400-content-filter", "azure", 400, _j({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry.", "type": None,
        "param": "prompt", "code": "content_filter", "status": 400}}),
        "content_policy", "relay"),
    # ------------------------------------------------------------------ Anthropic
    Case("anthropic-529-overloaded", "anthropic", 529, _anthropic("overloaded_error", "Overloaded"),
         "overloaded", "retry", expect={"key_specific": False, "key_state": None}),
    Case("anthropic-429-itpm-short", "anthropic", 429, _anthropic(
        "rate_limit_error",
        "This request would exceed the rate limit for your organization (4e1c) of 50,000 "
        "input tokens per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits. You can see the response headers for "
        "current usage. Please reduce the prompt length or the maximum tokens requested, or "
        "try again later."),
        "rate_limit", "bench_key",
        headers={"retry-after": "40", "anthropic-ratelimit-input-tokens-limit": "50000",
                 "anthropic-ratelimit-input-tokens-remaining": "0",
                 "anthropic-ratelimit-input-tokens-reset": _rfc3339(40)},
        expect={"limit": "transient", "key_state": "cooling", "reset_seconds": 40.0}),
    Case("anthropic-429-tokens-long", "anthropic", 429, _anthropic(
        "rate_limit_error", "Number of request tokens has exceeded your daily rate limit"),
        "rate_limit", "bench_key",
        headers={"anthropic-ratelimit-tokens-limit": "1000000",
                 "anthropic-ratelimit-tokens-remaining": "0",
                 "anthropic-ratelimit-tokens-reset": _rfc3339(3000)},
        expect={"limit": "genuine", "key_state": "exhausted", "reset_seconds": 3000.0}),
    Case("anthropic-429-spend-limit", "anthropic", 429, _anthropic(
        "rate_limit_error", "You have reached your specified workspace API usage limits. "
        "You will regain access on 2026-02-01 at 00:00 UTC.",
        details={"error_code": "enforced_spend_limit_reached"}),
        "billing", "bench_key",
        expect={"key_state": "exhausted", "reset_seconds": (datetime(2026, 2, 1, tzinfo=UTC)
                                                            - NOW).total_seconds()}),
    Case("anthropic-400-credit-balance", "anthropic", 400, _anthropic(
        "invalid_request_error", "Your credit balance is too low to access the Anthropic "
        "API. Please go to Plans & Billing to upgrade or purchase credits."),
        "billing", "bench_key"),
    Case("anthropic-400-usage-limits", "anthropic", 400, _anthropic(
        "invalid_request_error", "You have reached your specified API usage limits. You "
        "will regain access on 2026-03-01 at 00:00 UTC."),
        "billing", "bench_key",
        expect={"reset_seconds": (datetime(2026, 3, 1, tzinfo=UTC) - NOW).total_seconds()}),
    Case("anthropic-400-prompt-too-long", "anthropic", 400, _anthropic(
        "invalid_request_error", "prompt is too long: 208732 tokens > 200000 maximum"),
        "context_overflow", "compress_and_retry"),
    Case("anthropic-401", "anthropic", 401, _anthropic("authentication_error", "invalid x-api-key"),
         "auth", "rotate", expect={"auth": "invalid", "key_state": "exhausted"}),
    Case("anthropic-403-permission", "anthropic", 403, _anthropic(
        "permission_error", "Your API key does not have permission to use the specified "
        "resource."),
        "auth", "rotate", expect={"auth": "forbidden", "key_state": None}),
    Case("anthropic-404-model", "anthropic", 404, _anthropic(
        "not_found_error", "model: claude-3-opus-latest"), "model_not_found", "relay"),
    Case("anthropic-413", "anthropic", 413, _anthropic(
        "request_too_large", "Request exceeds the maximum allowed number of bytes."),
        "payload_too_large", "compress_and_retry"),
    Case("anthropic-500", "anthropic", 500, _anthropic("api_error", "Internal server error"),
         "server_error", "retry"),
    Case("anthropic-400-thinking-signature", "anthropic", 400, _anthropic(
        "invalid_request_error", "messages.1.content.0: Invalid `signature` in `thinking` block"),
        "format_error", "relay"),
    Case("anthropic-429-long-context-tier", "anthropic", 429, _anthropic(
        "rate_limit_error", "Extra usage is required for long context requests."),
        "context_overflow", "compress_and_retry"),
    # ------------------------------------------------------------------ OpenRouter
    Case("openrouter-402-credits", "openrouter", 402, _openrouter(
        402, "Insufficient credits. Add more using https://openrouter.ai/credits"),
        "billing", "bench_key", expect={"key_state": "exhausted"}),
    Case("openrouter-429-upstream", "openrouter", 429, _openrouter(
        429, "Provider returned error", raw="google/gemini-2.0-flash-exp:free is temporarily "
        "rate-limited upstream. Please retry shortly, or add your own key to accumulate your "
        "rate limits: https://openrouter.ai/settings/integrations",
        provider_name="Google AI Studio"),
        "rate_limit", "retry", expect={"key_specific": False, "key_state": None}),
    Case("openrouter-401-no-credentials", "openrouter", 401, _openrouter(
        401, "No auth credentials found"), "auth", "rotate", expect={"key_state": "exhausted"}),
    Case("openrouter-401-user-not-found", "openrouter", 401, _openrouter(401, "User not found."),
         "auth", "rotate", expect={"auth": "invalid"}),
    Case("openrouter-403-moderation", "openrouter", 403, _openrouter(
        403, 'openai/gpt-4o requires moderation on OpenAI. Your input was flagged for '
        '"harassment". No credits were charged.', reasons=["harassment"],
        flagged_input="...", provider_name="OpenAI", model_slug="openai/gpt-4o"),
        "content_policy", "relay"),
    Case("openrouter-403-key-limit", "openrouter", 403, _openrouter(
        403, "Key limit exceeded (total limit). Manage it using "
        "https://openrouter.ai/settings/keys"),
        "billing", "bench_key"),
    Case("openrouter-404-data-policy", "openrouter", 404, _openrouter(
        404, "No endpoints found matching your data policy (Free model publication). "
        "Configure: https://openrouter.ai/settings/privacy"),
        "model_not_found", "relay"),
    Case("openrouter-400-invalid-model", "openrouter", 400, _openrouter(
        400, "openai/gpt-9 is not a valid model ID"), "model_not_found", "relay"),
    Case("openrouter-502-provider", "openrouter", 502, _openrouter(
        502, "Provider returned error",
        raw='{"error":{"message":"upstream connect error or disconnect/reset before headers"}}',
        provider_name="Together"),
        "server_error", "retry"),
    # ------------------------------------------------------------------ DeepSeek
    Case("deepseek-402-balance", "deepseek", 402, _openai(
        "Insufficient Balance", "unknown_error", "invalid_request_error"),
        "billing", "bench_key"),
    Case("deepseek-429-bare-capacity", "deepseek", 429, _openai(
        "Rate Limit Reached", "rate_limit_error", "rate_limit_reached"),
        "rate_limit", "bench_key",
        expect={"limit": "transient", "key_state": "cooling", "reset_seconds": None}),
    Case("deepseek-503-busy", "deepseek", 503, _openai(
        "Server is busy, please try again later.", "service_unavailable_error",
        "service_unavailable"), "overloaded", "retry"),
    Case("deepseek-400-context", "deepseek", 400, _openai(
        "This model's maximum context length is 65536 tokens. However, you requested 70000 "
        "tokens (62000 in the messages, 8000 in the completion). Please reduce the length of "
        "the messages or completion.", "invalid_request_error", "invalid_request_error"),
        "context_overflow", "compress_and_retry"),
    Case("deepseek-422-params", "deepseek", 422, _openai(
        "Failed to deserialize the JSON body into the target type: messages[0]: missing "
        "field `content` at line 1 column 45", "invalid_request_error",
        "invalid_request_error"),
        "format_error", "relay"),
    Case("deepseek-401", "deepseek", 401, _openai(
        "Authentication Fails, Your api key: ****abcd is invalid", "authentication_error",
        "invalid_request_error"), "auth", "rotate", expect={"key_state": "exhausted"}),
    # ------------------------------------------------------------------ Gemini
    Case("gemini-429-per-minute", "gemini", 429, _gemini(
        429, _GEMINI_QUOTA_MESSAGE, "RESOURCE_EXHAUSTED",
        _gemini_quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "22s")),
        "rate_limit", "bench_key",
        expect={"limit": "transient", "key_state": "cooling", "reset_seconds": 22.0}),
    Case("gemini-429-per-day", "gemini", 429, _gemini(
        429, _GEMINI_QUOTA_MESSAGE, "RESOURCE_EXHAUSTED",
        _gemini_quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "22s")),
        "rate_limit", "bench_key",
        expect={"limit": "genuine", "key_state": "exhausted", "reset_seconds": None}),
    Case("gemini-429-resource-exhausted", "gemini", 429, _gemini(
        429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED"),
        "rate_limit", "bench_key", expect={"limit": "transient"}),
    Case("gemini-400-api-key-invalid", "gemini", 400, _gemini(
        400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT",
        [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
          "domain": "googleapis.com",
          "metadata": {"service": "generativelanguage.googleapis.com"}}]),
        "auth", "rotate", expect={"auth": "invalid", "key_state": "exhausted"}),
    Case("gemini-403-leaked", "gemini", 403, _gemini(
        403, "Your API key was reported as leaked. Please use another API key.",
        "PERMISSION_DENIED"),
        "auth", "rotate", expect={"auth": "revoked", "key_state": "dead"}),
    Case("gemini-404-model", "gemini", 404, _gemini(
        404, "models/gemini-1.0-pro is not found for API version v1beta, or is not supported "
        "for generateContent. Call ListModels to see the list of available models and their "
        "supported methods.", "NOT_FOUND"),
        "model_not_found", "relay"),
    Case("gemini-503-overloaded", "gemini", 503, _gemini(
        503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
        "overloaded", "retry"),
    Case("gemini-500-internal", "gemini", 500, _gemini(
        500, "An internal error has occurred. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting", "INTERNAL"),
        "server_error", "retry"),
    Case("gemini-400-token-count", "gemini", 400, _gemini(
        400, "The input token count (1250000) exceeds the maximum number of tokens allowed "
        "(1048576).", "INVALID_ARGUMENT"),
        "context_overflow", "compress_and_retry"),
    Case("gemini-504-deadline", "gemini", 504, _gemini(
        504, "Deadline expired before operation could complete.", "DEADLINE_EXCEEDED"),
        "timeout", "retry"),
    Case("gemini-400-location", "gemini", 400, _gemini(
        400, "User location is not supported for the API use.", "FAILED_PRECONDITION"),
        "format_error", "relay"),
    # ------------------------------------------------------------------ local servers
    Case("vllm-400-context", "vllm", 400, _vllm(
        400, "This model's maximum context length is 16384 tokens. However, you requested "
        "122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the "
        "length of the messages or completion.", "BadRequestError"),
        "context_overflow", "compress_and_retry"),
    Case("vllm-400-negative-max-tokens", "vllm", 400, _vllm(
        400, "max_tokens must be at least 1, got -186.", "BadRequestError"),
        "context_overflow", "compress_and_retry"),
    Case("vllm-404-model", "vllm", 404, _vllm(
        404, "The model `llama-3` does not exist.", "NotFoundError"),
        "model_not_found", "relay"),
    Case("llamacpp-400-exceed-context", "llamacpp", 400, _j({"error": {
        "code": 400, "message": "the request exceeds the available context size. try "
        "increasing the context size or enable context shift",
        "type": "exceed_context_size_error", "n_prompt_tokens": 14429, "n_ctx": 8192}}),
        "context_overflow", "compress_and_retry"),
    Case("llamacpp-500-context-exceeded", "llamacpp", 500, _j({"error": {
        "code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}),
        "context_overflow", "compress_and_retry"),
    Case("llamacpp-400-grammar", "llamacpp", 400, _j({"error": {
        "code": 400, "message": "error parsing grammar: expecting name at (", "type":
        "invalid_request_error"}}),
        "format_error", "relay"),
    Case("ollama-404-pull", "ollama", 404, _openai(
        'model "llama3.3" not found, try pulling it first', "api_error", None),
        "model_not_found", "relay"),
    Case("ollama-native-404", "ollama", 404, _j({"error": "model 'mistral' not found"}),
         "model_not_found", "relay"),
    Case("ollama-500-runner", "ollama", 500, _j({
        "error": "llama runner process has terminated: signal: killed"}),
        "server_error", "retry"),
    # ------------------------------------------------------------------ proxies and HTML
    Case("nginx-413-html", "custom", 413, (
        b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
        b"<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx"
        b"</center>\r\n</body>\r\n</html>"),
        "payload_too_large", "compress_and_retry"),
    Case("cloudflare-502-html", "custom", 502, (
        b"<!DOCTYPE html><html><head><title>api.example.com | 502: Bad gateway</title></head>"
        b"<body><h1>Bad gateway</h1><p>Cloudflare Ray ID: 8a1b2c3d4e5f</p></body></html>"),
        "server_error", "retry"),
    Case("cloudflare-524-timeout", "custom", 524, b"error code: 524", "timeout", "retry"),
    Case("codex-429-usage-limit", "codex", 429, _j({"error": {
        "type": "usage_limit_reached", "message": "The usage limit has been reached",
        "plan_type": "plus", "resets_in_seconds": 7200}}),
        "rate_limit", "bench_key",
        expect={"limit": "genuine", "key_state": "exhausted", "reset_seconds": 7200.0}),
    Case("generic-429-monthly-quota", "custom", 429, _j({"error": {
        "message": "Monthly quota reached."}}),
        "billing", "bench_key"),
    Case("generic-429-retry-after-http-date", "custom", 429, b"Too Many Requests",
         "rate_limit", "bench_key",
         headers={"retry-after": format_datetime(NOW + timedelta(seconds=90), usegmt=True)},
         expect={"limit": "transient", "reset_seconds": 90.0, "reset_source": "retry-after"}),
    Case("generic-429-resets-in-words", "custom", 429, _j({"error": {
        "message": "API key usage limit exceeded. Resets in 2hr 5min."}}),
        "rate_limit", "bench_key",
        expect={"limit": "genuine", "reset_seconds": 7500.0}),
]
