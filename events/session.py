"""Events of the session context: a governed agent session and the calls made in it.

Stream ``session-<id>``: the session's id is the stream's, so no event here repeats it.
A plain call leaves two events: :class:`CallAdmitted` (the admission pipeline let it
through, durable before anything is sent upstream) and :class:`CallCompleted` (its
outcome, canonical usage and the key that served it, in one atomic append). A call the
pipeline refuses leaves one, :class:`CallRefused`.
"""

from typing import Any, ClassVar

import msgspec
from sessionwarden.events.base import Event
from sessionwarden.events.codec import Upcaster
from sessionwarden.events.context import ContextLimits, RequestRecord

__all__ = [
    "OUTCOMES",
    "SESSION_UPCASTERS",
    "CallAdmitted",
    "CallAttempt",
    "CallCompleted",
    "CallRefused",
    "CallResent",
    "SessionStarted",
]


class SessionStarted(Event, frozen=True):
    """A session was seen for the first time (appended with ``NO_STREAM``: once only).

    ``model`` is the first call's ``provider/model``; ``client`` the caller's software
    (its User-Agent); ``parent_session_id`` names the parent of a sub-agent's session.
    Version 3 dropped ``session_id`` (the stream names it) and the in-payload tag.
    """

    TAG: ClassVar[str] = "session.started.v3"

    model: str
    client: str = ""
    parent_session_id: str | None = None


def _started_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "client": "", "parent_session_id": None}


def _drop_session_id(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k != "session_id"}


SESSION_UPCASTERS = (
    Upcaster("session.started.v1", "session.started.v2", _started_v1_to_v2),
    Upcaster("session.started.v2", "session.started.v3", _drop_session_id),
    Upcaster("session.call_admitted.v1", "session.call_admitted.v2", _drop_session_id),
    Upcaster("session.call_admitted.v2", "session.call_admitted.v3", dict),
    Upcaster("session.call_admitted.v3", "session.call_admitted.v4", dict),
    Upcaster("session.call_admitted.v4", "session.call_admitted.v5", dict),
    Upcaster("session.call_resent.v1", "session.call_resent.v2", dict),
    Upcaster("session.call_completed.v1", "session.call_completed.v2", dict),
    Upcaster("session.call_completed.v2", "session.call_completed.v3", dict),
    Upcaster("session.call_completed.v3", "session.call_completed.v4", dict),
)


class CallAdmitted(Event, frozen=True):
    """A call passed the admission pipeline; it is recorded before it is sent upstream.

    ``estimated_tokens`` is our estimate of the prompt, used when the provider reports no
    usage. ``purpose`` is ``""`` for a client's call and ``"summary"`` for a side call the
    daemon made itself (the model summariser) for the call ``parent_call``: metered in the
    ledger like any call, but not governed. Version 2 dropped ``session_id`` (the stream
    names it) and the in-payload tag; version 3 added ``purpose``, ``parent_call`` and
    ``request``: what was sent upstream, by content keys (``events.context``); version 4
    added ``limits``: the threshold and window the call was governed under, when they
    changed (``events.context.ContextLimits``); version 5 records, in ``request``, what a
    restart needs to rebuild the governed history (each item's estimate and source, the
    client items covered).
    """

    TAG: ClassVar[str] = "session.call_admitted.v5"

    call_id: str
    provider: str
    model: str
    message_count: int = 0
    estimated_tokens: int = 0
    stream: bool = False
    purpose: str = ""
    parent_call: str = ""
    request: RequestRecord | None = None
    limits: ContextLimits | None = None


class CallRefused(Event, frozen=True):
    """The admission pipeline refused a call: nothing was sent upstream.

    ``stage`` names the stage that refused; ``status``, ``code`` and ``reason`` are what
    the client was told (an OpenAI-shaped error).
    """

    TAG: ClassVar[str] = "session.call_refused.v1"

    call_id: str
    stage: str
    status: int
    reason: str
    code: str = ""


class CallResent(Event, frozen=True):
    """An admitted call is sent again, or elsewhere: what the request holds now.

    Either the upstream said the first one was too long (``reason``: the error's class,
    ``context_overflow`` or ``payload_too_large``; the history was compressed further, a
    ContextCompressed before this event), or the provider could take no call and the
    model's fallback route serves it (``reason`` ``no_usable_key``/``overload``,
    ``provider`` and ``model`` the route now taken). ``request`` records what goes
    upstream now, by content keys, as CallAdmitted's does. A call's latest record is
    the one a later call's record builds on, and the one ``replay --call`` rebuilds.
    Version 2: ``request`` as CallAdmitted v5's.
    """

    TAG: ClassVar[str] = "session.call_resent.v2"

    call_id: str
    reason: str = ""
    request: RequestRecord | None = None
    provider: str = ""
    model: str = ""


#: How a call ended, as the proxy saw it.
#: ``ok``: the upstream answered and the client got the whole answer (any status below
#: 400); ``upstream_error``: the upstream answered with an error status, relayed;
#: ``unreachable`` / ``timeout``: no answer (the client got 502 / 504); ``truncated``: a
#: stream the upstream broke off before its end; ``client_disconnected``: the client went
#: away first; ``no_credential``: admitted, but no key could serve it (nothing sent);
#: ``cancelled``: the daemon stopped past its grace period; ``unknown``: admitted before
#: a crash and completed at the next start (it may have been sent, and billed);
#: ``answered``: the daemon answered the call itself, nothing sent (a turn past its
#: iteration budget, a guardrail stop): no tokens, cost exactly 0 (source ``not_sent``).
OUTCOMES = (
    "ok", "upstream_error", "unreachable", "timeout", "truncated", "client_disconnected",
    "no_credential", "cancelled", "unknown", "answered",
)


class CallAttempt(msgspec.Struct, frozen=True, omit_defaults=True):
    """One attempt of a call that failed over to another key (a field, not an event)."""

    credential: str
    status: int = 0
    error_class: str = ""


class CallCompleted(Event, frozen=True):
    """How an admitted call ended: one per call, appended once (idempotency key).

    Counts follow the canonical convention of ``sessionwarden.domain.usage.canonical``: the prompt
    buckets (input, cache read, cache write) are disjoint and reasoning is part of output.
    ``source`` says where the counts came from (``provider``, ``estimated`` or
    ``missing``, never a silent zero). ``raw_usage`` (redacted, bounded) is kept only when
    normalisation flagged or rejected the provider's block. ``credential`` is the
    fingerprint of the key that served the call: the key's outcome, folded by the pool.
    ``status`` is the upstream's HTTP status, 0 when there was no answer. ``cost`` is
    an exact Decimal string in USD, None when unknown (never a silent $0);
    ``cost_status`` ``actual`` / ``estimated`` / ``included`` / ``unknown``;
    ``cost_source`` where the price came from (``override``, ``genai-prices@<version>``,
    ``provider-reported``, ``included``) and ``cost_version`` its version. Version 2
    added the last two. Version 3 added ``attempts`` (each attempt that failed over to
    another key before this outcome: the key's fingerprint, the status, the error's
    class) and ``error_class`` (the class of the error relayed, if any). Version 4 added
    ``response_id``: the id of the response the upstream made, in formats whose requests
    can continue one (a Responses ``previous_response_id``); "" when none; and
    ``web_searches``: the call's server-side web searches (Anthropic
    ``server_tool_use.web_search_requests``, Responses ``web_search_call`` items), billed
    per search and included in ``cost``.
    """

    TAG: ClassVar[str] = "session.call_completed.v4"

    call_id: str
    outcome: str = "ok"
    status: int = 0
    latency_ms: float = 0.0
    credential: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    source: str = "provider"
    flags: tuple[str, ...] = ()
    raw_usage: str = ""
    retry_after_seconds: float | None = None
    error: str = ""
    cost: str | None = None
    cost_status: str = "unknown"
    cost_source: str = ""
    cost_version: str = ""
    attempts: tuple[CallAttempt, ...] = ()
    error_class: str = ""
    response_id: str = ""
    web_searches: int = 0
