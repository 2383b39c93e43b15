"""Classifies a failed upstream call into one error class and the recovery it needs (pure).

Input: the HTTP status (0 when there was none), the response headers, the body (bytes,
text or decoded JSON: untrusted, possibly huge, HTML or truncated), an optional
:data:`Transport` failure, the provider and its api_mode, and what is known of the key's
rate-limit buckets. Output: one frozen :class:`Classification`. The steps are in
:mod:`sessionwarden.domain.classify.rules` and :mod:`sessionwarden.domain.classify.limits`.

Rules:

The overview: docs/architecture/keys-and-failover.md, 'The pool and the classifier'.

No I/O, no clock: ``now`` is an argument. It never raises, and it examines a bounded part
of the body (:mod:`sessionwarden.domain.classify.error_body`) with substring search only
(:mod:`sessionwarden.domain.classify.patterns`), so it is linear-time on hostile input.

**The pipeline** (hermes-behaviour.md §7; the first rule that matches wins):

0. a transport failure without an error status → retry (§7 steps 10-12), as what it is:
   a timeout → ``timeout``; no connection made (refused, DNS, TLS) → ``unreachable``;
   a connection that dropped or an unreadable answer → ``server_error`` (Hermes calls
   them all timeouts; a user told "timeout" for a refused connection looks in the wrong
   place);
0b. a model-not-found code (OpenAI's ``model_not_found``, Anthropic's ``not_found_error``)
   with a 400, 403, 404 or 422, or without a status → ``model_not_found``
   (``classifier_rules.model_code``: the request's fault, relayed, never a key's
   failure), before any phrase is matched (issue 21 §1: OpenAI's 404 and 403 quote the
   model, whose name the client chose);
1. content-policy phrases → ``content_policy``; 2. a rejected thinking signature and
   5. a local grammar failure → ``format_error``; 3. a 429 asking for the paid
   long-context tier → ``context_overflow`` (§7 steps 1-5);
7. by status (:func:`_by_status`): 401, 403, 402, 404, 408, 413, 429, 400/422, 500/502,
   503/529, 504/524, other 4xx, other 5xx; in a 400 **request validation is checked before
   context overflow**, because ``max_tokens`` is also a context phrase (OpenAI's
   "Unsupported parameter: 'max_tokens' …" is a format error, not an overflow);
8. by error code, then 9. by message phrases, when there is no error status (a streamed
   error event), in §7's order: payload, usage limit (skipped when an explicit rate-limit
   phrase is there, §7 drift), overload, billing, rate limit, request validation, context,
   auth, provider policy, model; then timeout and disconnect phrases; else ``unknown``.

**Rate limits: transient or genuine** (hermes-behaviour.md §5). A 429 is *genuine* only if
a bucket has ``remaining ≤ 0`` and a reset ≥ :data:`GENUINE_MIN_RESET` s, read from the
429's own headers or from the last known state of the key (its age subtracted), or if the
body names a daily or monthly quota. Anything else — a bare 429, a short reset — is
*transient*: the key cools until its reset, it is not benched for long. The reset follows
§5's priority: the exhausted bucket's own reset, else the hourly request bucket, the
request bucket, ``Retry-After``, the body's reset; when none is known ``reset_seconds`` is
None and the pool's TTLs apply (§4.3).

**Fixes of user-reported misclassifications** (hermes-behaviour.md §12 and §7 drift):
capacity 429s (overload wording, OpenRouter's "rate-limited upstream") no longer bench
anything (PR #15898: one DeepSeek capacity 429 blocked every model for 45 min); a
usage-limit 429 without a reset signal is billing and rotates at once, with one it is a
rate limit, while an explicit "Rate limit exceeded" stays a rate limit (PR #34580);
OpenAI's ``insufficient_quota`` 429 is billing, not a rate limit to retry; every 429
rotates on the first occurrence instead of retrying the same key (PR #41836); a 403 is
key-specific and rotates (PR #8289); rotations are not retries (``recovery`` keeps them
apart, #16830); and an unrecognised error is relayed, not retried (Hermes retried every
``unknown``, e.g. a 404 from a wrong base URL: retry amplification, PR #10568).

**Text that quotes the request is no evidence against a key** (issue 21 §1). An error
may quote what the client chose — the model's name above all ("The model `X` does not
exist", "Rate limit reached for X"): ``quoted`` names those strings and the body is read
without them (:func:`~sessionwarden.domain.classify.error_body.read_error_body`), so a model named
``gpt-insufficient_quota`` or ``… regain access on 2027-06-01`` is no billing phrase and
no reset. A status's or a code's own meaning comes before any phrase: a 404 is never
billing or auth (Hermes read a billing phrase in a 404 as billing: a client could exhaust
every key by naming a model). What quoting the prompt could still do, the failover's
repeat rule undoes (:func:`sessionwarden.domain.classify.failover.request_fault`).

Decisions where the sources are silent: a 401 (or a bad key in a 400) rests the key
(``exhausted``, the pool's 300 s auth TTL) unless the body says the key is revoked,
disabled, deleted or leaked (``revoked_key``: a code or the words, the request's quotes
cut) — only then is it ``dead`` until ``keys reset`` (issue 21 §2: a flapping 401 must
not kill every key for good, and the documents always said so); a 400 saying the API
key is not valid (Gemini) is auth, not a format error; Hermes's guesses from session
size (a bare 400 on a large session read as an overflow) are left out, since the
classifier does not see the session; an unknown 404 is relayed; 504/524 are timeouts.
"""

import random
from collections.abc import Mapping
from datetime import datetime

from sessionwarden.config import ApiMode
from sessionwarden.domain.classify.classification import (
    ERROR_CLASSES,
    GENUINE_MIN_RESET,
    RECOVERIES,
    TRANSPORT_FAILURES,
    AuthKind,
    BenchState,
    Classification,
    ErrorClass,
    LimitKind,
    Recovery,
    Transport,
)
from sessionwarden.domain.classify.error_body import read_error_body
from sessionwarden.domain.classify.limits import Facts
from sessionwarden.domain.classify.patterns import DEFAULT_BOOK, PatternBook
from sessionwarden.domain.classify.rules import (
    by_code,
    by_message,
    by_status,
    early,
    model_code,
)
from sessionwarden.domain.keys.ratelimits import RateLimitSnapshot, parse_rate_limits

__all__ = [
    "ERROR_CLASSES",
    "GENUINE_MIN_RESET",
    "MAX_RETRIES",
    "MAX_RETRY_WAIT",
    "RECOVERIES",
    "TRANSPORT_FAILURES",
    "AuthKind",
    "BenchState",
    "Classification",
    "ErrorClass",
    "LimitKind",
    "Recovery",
    "Transport",
    "classify",
    "retry_delay",
]

#: The bounded retry of overloaded/5xx/timeouts: at most this many retries per call…
MAX_RETRIES = 2
#: …and never a wait longer than this (a longer Retry-After means: relay instead).
MAX_RETRY_WAIT = 5.0
_RETRY_BASE = 1.0
#: The class of a failure below HTTP, by its kind (step 0).
_TRANSPORT_CLASS: dict[str, ErrorClass] = {
    "timeout": "timeout", "connect": "unreachable", "tls": "unreachable",
    "reset": "server_error", "protocol": "server_error",
}


def _status(status: object) -> int:
    """An error status (400-599) or 0: anything else means "no error status"."""
    if isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599:
        return status
    return 0


def classify(
    status: int,
    headers: Mapping[str, str],
    body: object,
    *,
    now: datetime,
    transport: Transport | None = None,
    provider: str = "",
    api_mode: ApiMode = "chat_completions",
    last_known: RateLimitSnapshot | None = None,
    last_known_age: float = 0.0,
    shared_limits: bool = False,
    book: PatternBook = DEFAULT_BOOK,
    quoted: tuple[str, ...] = (),
) -> Classification:
    """Classify one failed upstream call.

    Args:
        status: the HTTP status; 0 (or any non-error status) when there was none.
        headers: the response headers, names lowercase.
        body: the response body: bytes, text, or already decoded JSON.
        now: when the response arrived (resets are counted from it).
        transport: the transport failure, if the call failed below HTTP.
        provider: the provider's name; selects its patterns in ``book``.
        api_mode: the provider's wire (every wire's error shape is read either way).
        last_known: the key's last recorded rate-limit buckets, if any…
        last_known_age: …and how many seconds ago they were observed.
        shared_limits: the provider's keys draw on one account (benches the whole pool).
        book: the phrase lists, per provider.
        quoted: what the request supplied that the body may quote (the model's names):
            never read as the body's words.

    Returns:
        The classification. Never raises.
    """
    del api_mode  # every wire's shape is read; kept for provider-specific rules to come
    code = _status(status)
    if transport is not None and code == 0:
        return Classification(error_class=_TRANSPORT_CLASS.get(transport, "timeout"),
                              recovery="retry", reason=f"transport failure: {transport}")
    safe_headers = headers if type(headers) is dict or isinstance(headers, Mapping) else {}
    facts = Facts(
        status=code,
        patterns=book.for_provider(provider),
        body=read_error_body(body, now, quoted),
        snapshot=parse_rate_limits(safe_headers, now),
        last_known=last_known,
        last_known_age=max(0.0, last_known_age),
        shared_limits=shared_limits,
    )
    found = model_code(facts) or early(facts) or (
        by_status(facts) if code else by_code(facts) or by_message(facts))
    if found is not None:
        return found
    if transport is not None:
        return Classification(error_class=_TRANSPORT_CLASS.get(transport, "timeout"),
                              recovery="retry", reason=f"{code}: transport failure: {transport}")
    return Classification(error_class="unknown", recovery="relay",
                          reason=f"{code or 'no status'}: no rule matched")


def retry_delay(
    attempt: int, rng: random.Random, retry_after: float | None = None,
    base: float = _RETRY_BASE,
) -> float | None:
    """Seconds to wait before retry number ``attempt`` (1-based), or None: do not retry.

    Equal jitter around an exponential base (``base``, twice it: 1 s and 2 s by default):
    ``[0.5, 1]`` s before the first retry, ``[1, 2]`` s before the second; never more than
    :data:`MAX_RETRIES` retries. A
    known ``retry_after`` is honoured when it is at most :data:`MAX_RETRY_WAIT` seconds;
    a longer one means the call is better relayed (or routed elsewhere) than held.
    """
    if attempt < 1 or attempt > MAX_RETRIES:
        return None
    ceiling = base * float(1 << (attempt - 1))
    delay = ceiling / 2 + rng.random() * ceiling / 2
    if retry_after is not None:
        if not retry_after <= MAX_RETRY_WAIT:  # also refuses NaN
            return None
        delay = max(delay, retry_after)
    return delay
