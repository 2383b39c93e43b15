"""A call's life in wire-neutral terms: the request asking admission, and how it ended.

The HTTP layer and the wire adapters build these plain structs; the domain judges them.
:class:`CallRequest` is what the admission pipeline sees
(``sessionwarden.domain.admission.pipeline``); :class:`CallOutcome` is what the proxy
observed when the call ended, raw, and :func:`complete_call` turns it into the call's one
:class:`~sessionwarden.events.CallCompleted` (canonical usage, estimate fallbacks, the key's
outcome) over the session's state.
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
from sessionwarden.config import ApiMode
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import Cost, PriceLookup, cost
from sessionwarden.domain.errors import UnknownCall, UsageRejected
from sessionwarden.domain.keys.ratelimits import RateLimitSnapshot, parse_rate_limits
from sessionwarden.domain.session import SessionState
from sessionwarden.domain.usage.canonical import CanonicalUsage, normalise_usage, tokens_from_chars
from sessionwarden.events import CallAttempt, CallCompleted, RequestRecord

__all__ = ["MAX_RAW_USAGE_CHARS", "SOURCE_NOT_SENT", "UNHELD_PURPOSES", "CallAttempt",
           "CallOutcome", "CallRequest", "LocalReply", "RequestShape", "complete_call"]

#: The cost source of a call the daemon answered itself: nothing was sent.
SOURCE_NOT_SENT = "not_sent"
#: A flagged or rejected usage block is kept, redacted, up to this many characters.
MAX_RAW_USAGE_CHARS = 2000

_encode = msgspec.json.Encoder().encode

#: Side calls the spend caps do not judge at admission: the model summariser's (it
#: reserved its worst case before it was admitted, and falls back to the builtin summary
#: when that is refused) and a client's token count (free). A client's compaction call
#: (``compact``) costs what any call costs and is held like one.
UNHELD_PURPOSES = frozenset({"summary", "count_tokens"})


class RequestShape(msgspec.Struct, frozen=True):
    """What a wire adapter read from a client's request body, in wire-neutral terms.

    Attributes:
        model: the model the client named (``provider/model`` or a ``[[models]]`` name).
        stream: whether the client asked for a stream.
        message_count: how many conversation items (messages) the request carries.
        prompt_chars: characters of text the model will read (for our token estimate).
        problems: wire-level faults the adapter found (short sentences); the validation
            stage refuses a request that has any.
        prompt_tokens: our estimate of the prompt in tokens, once governance computed it
            (0: estimate from ``prompt_chars``).
        native_compaction: the client asks the provider to compact this request itself
            (Anthropic ``context_management`` compaction edits, a Responses compaction
            option): the daemon does not compact it in the same call.
    """

    model: str
    stream: bool = False
    message_count: int = 0
    prompt_chars: int = 0
    problems: tuple[str, ...] = ()
    prompt_tokens: int = 0
    native_compaction: bool = False


class LocalReply(msgspec.Struct, frozen=True):
    """The daemon answers a call itself, without sending it (a runaway turn, issue 25).

    ``refused`` is what the answer's ``x-sessionwarden-refused`` header says
    (``iteration_budget``, ``guardrail``); ``text`` the answer's text, or the error's
    message; ``status`` 200 for an ordinary answer (no tool calls, an ordinary stop),
    else an error with ``code``.
    """

    refused: str
    text: str
    status: int = 200
    code: str = ""


class CallRequest(msgspec.Struct, frozen=True):
    """A call asking to enter its session: who, where to, and the request itself.

    ``body`` is the decoded wire body. It is handed over with the request: the proxy does
    not touch it until admission replies, and a stage that rewrites it returns a new
    :class:`CallRequest` with a new body, never mutating the old one.

    ``purpose`` ``"summary"`` marks a side call the daemon makes itself (the model
    summariser) for the call ``parent_call``: admitted and metered, never governed.

    Set by the context stage: ``context`` (a ``domain.context.history.ContextUpdate``) is the
    session's context state should the call be admitted; ``record`` what it sends, by
    content keys (CallAdmitted's ``request``); ``contents`` the new contents the record
    refers to, ``(key, bytes)``, stored in the same append.

    ``parent_session`` is the session named by ``X-Session-Parent`` (recorded in
    SessionStarted, the session's first call only). ``continues`` is the stored response
    the request continues (a Responses ``previous_response_id``; "" for a whole history),
    and ``carried_tokens`` what the provider holds of that chain for it, as the log knows
    (``views.responses``; 0 when unknown): counted in the estimate, never governed.
    ``budget`` is the UsageLedgerActor's answer before the pipeline runs: a
    ``domain.cost.caps.Reservation`` (held), a ``domain.cost.caps.Refusal`` (the
    ``budgets`` stage refuses it), or None (no ledger).

    Set by the runaway stage (``domain.admission.runaway_stage``): ``notices``, runtime
    notices the context stage appends to the forwarded history (a guardrail's warning,
    the grace call's request to wrap up), and ``reply``, when the daemon answers the call
    itself instead of sending it; ``guards``, the turn's guardrail state should the call
    be admitted (adopted by the session's actor, like ``context``). ``parent_turn`` is
    the parent session's turn as the log knows it, ``(used, limit)``, for a child
    session's call (``X-Session-Parent``).
    """

    call_id: str
    session_id: str
    provider: str
    model: str
    api_mode: ApiMode
    shape: RequestShape
    body: Any
    client: str = ""
    purpose: str = ""
    parent_call: str = ""
    context: Any = None
    contents: tuple[tuple[str, bytes], ...] = ()
    record: RequestRecord | None = None
    parent_session: str = ""
    budget: Any = None
    continues: str = ""
    carried_tokens: int = 0
    notices: tuple[str, ...] = ()
    reply: LocalReply | None = None
    guards: Any = None
    parent_turn: tuple[int, int] | None = None

    @property
    def estimated_tokens(self) -> int:
        """Our estimate of the prompt's tokens: the chain it continues included."""
        sent = self.shape.prompt_tokens or tokens_from_chars(self.shape.prompt_chars)
        return sent + self.carried_tokens


class CallOutcome(msgspec.Struct, frozen=True):
    """What the proxy saw of an admitted call's end: raw facts, judged by :func:`complete_call`.

    Attributes:
        outcome: one of :data:`sessionwarden.events.OUTCOMES`.
        provider: the provider the call went to.
        status: the upstream's HTTP status, 0 when there was no answer.
        latency_ms: from admission to the end of the relay.
        credential: the fingerprint of the key that served the call ("" if none).
        usage_block: the provider's decoded ``usage`` JSON, or None.
        has_output: whether the upstream produced a model answer (usage is then expected).
        output_chars: characters of generated text seen (for the estimate).
        rate_limit_headers: the response's rate-limit and credit headers, names lowercased
            (``domain/ratelimits.rate_limit_headers``).
        error: a short, redacted description of a failure.
        model: the model id sent upstream ("" when unknown): the credits tracker asks
            whether it is free.
        attempts: the attempts that failed over to another key before this outcome.
        error_class: the class of the upstream error relayed (``domain.classify.classifier``).
        response_id: the id of the response the upstream made ("" when its format names
            none a request could continue: only Responses' are kept).
    """

    call_id: str
    session_id: str
    outcome: str
    provider: str = ""
    api_mode: ApiMode = "chat_completions"
    status: int = 0
    latency_ms: float = 0.0
    credential: str = ""
    usage_block: Any = None
    has_output: bool = False
    output_chars: int = 0
    rate_limit_headers: tuple[tuple[str, str], ...] = ()
    error: str = ""
    model: str = ""
    attempts: tuple[CallAttempt, ...] = ()
    error_class: str = ""
    response_id: str = ""


def _usage(
    outcome: CallOutcome, estimated_prompt: int, redact: Callable[[str], str]
) -> tuple[CanonicalUsage, tuple[str, ...], str]:
    """Canonical usage, flags and the raw block to keep (only when something was off)."""
    if outcome.outcome == "answered":
        return CanonicalUsage(source="estimated"), (), ""  # nothing sent: no tokens
    if outcome.outcome == "unknown":
        # Admitted before a crash: it may have been sent and billed. Our estimate of the
        # prompt, flagged, is the honest figure; zero would hide a possible cost.
        return (CanonicalUsage(source="estimated", input_tokens=estimated_prompt),
                ("outcome_unknown",), "")
    if not outcome.has_output:
        return CanonicalUsage(source="missing"), (), ""
    estimate = CanonicalUsage(
        source="estimated", input_tokens=estimated_prompt,
        output_tokens=tokens_from_chars(outcome.output_chars),
    )
    raw = ""
    if outcome.usage_block is not None:
        raw = redact(_encode(outcome.usage_block).decode(errors="replace"))
        if len(raw) > MAX_RAW_USAGE_CHARS:
            raw = raw[: MAX_RAW_USAGE_CHARS - 3] + "..."
    try:
        usage = normalise_usage(outcome.api_mode, outcome.usage_block)
    except UsageRejected as exc:
        return estimate, (f"rejected:{exc.field or 'usage'}",), raw
    if usage.source == "missing":
        return estimate, ("usage_missing",), raw
    return usage, usage.flags, raw if usage.flags else ""


def complete_call(
    state: SessionState,
    outcome: CallOutcome,
    now: datetime,
    redact: Callable[[str], str],
    limits: RateLimitSnapshot | None = None,
    prices: PriceBook | None = None,
) -> CallCompleted:
    """The completion of an open call of ``state``: its one CallCompleted.

    ``limits`` is the rate guard's reading of the response's headers; without it they are
    read here (the ``Retry-After`` a 429 carries belongs to the key's outcome).
    ``redact`` scrubs secrets from a raw usage block kept for the audit. ``prices``
    prices the usage (``domain.cost.pricing``): an exact amount with its status, source and
    version; without it (or without a price) the cost is ``unknown``, never $0.

    Raises:
        UnknownCall: the call is not open in this session (already completed, or never
            admitted).
    """
    call = state.open.get(outcome.call_id)
    if call is None:
        raise UnknownCall(outcome.call_id, "not open in its session")
    usage, flags, raw = _usage(outcome, call.estimated_tokens, redact)
    if limits is None and outcome.rate_limit_headers:
        limits = parse_rate_limits(dict(outcome.rate_limit_headers), now)
    priced = _price(usage, call.provider, call.model, now, prices)
    if outcome.outcome == "answered":
        # Answered by the daemon, never sent: exactly nothing was billed.
        priced = Cost(amount=Decimal(0), status="actual", source=SOURCE_NOT_SENT,
                      version="")
    if priced is not None and priced.flags:
        flags = (*flags, *priced.flags)
    return CallCompleted(
        call_id=outcome.call_id, outcome=outcome.outcome, status=outcome.status,
        latency_ms=round(outcome.latency_ms, 3), credential=outcome.credential,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens, source=usage.source, flags=tuple(flags),
        raw_usage=raw,
        retry_after_seconds=limits.retry_after_seconds if limits is not None else None,
        error=outcome.error, attempts=outcome.attempts, error_class=outcome.error_class,
        response_id=outcome.response_id[:200], web_searches=usage.web_searches,
        cost=None if priced is None or priced.amount is None else str(priced.amount),
        cost_status=priced.status if priced is not None else "unknown",
        cost_source=priced.source if priced is not None else "",
        cost_version=priced.version if priced is not None else "",
    )


def _price(usage: CanonicalUsage, provider: str, model: str, now: datetime,
           prices: PriceBook | None) -> Cost | None:
    """The call's cost, or None when there is no price book (no pricing configured)."""
    if prices is None:
        return None
    reported = Decimal(usage.reported_cost) if usage.reported_cost is not None else None
    lookup = prices.lookup(provider, model, at=now)

    def model_price(other: str) -> PriceLookup:
        # An iteration that names its own model (advisor, fallback) is billed at that
        # model's price at the same provider; naming the call's own model changes nothing.
        return lookup if other == model else prices.lookup(provider, other, at=now)

    return cost(usage, lookup, reported=reported, models=model_price)
