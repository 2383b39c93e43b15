"""The proxy: one call through a door (chat completions, Messages, Responses), plain and streaming.

The HTTP layer orchestrates; it parses no wire format itself (the adapters of
``sessionwarden.upstream`` do) and decides no policy (the domain does, inside the actors).
The overview: docs/architecture/request-flow.md; the doors: ``proxy/doors.py``.

Rules:

One call, in order:

1. the door's adapter reads the body into a payload and its wire-neutral shape; the
   session is the one named (``X-Session-Id``), else the one the client names in its own
   way (the adapter's ``session_hint``), else the conversation's; the model names a
   provider (404 if none, 501 for a wire format the proxy cannot speak, 400 for a
   provider of another format than the door's, both named);
2. admission (``cmd/daemon/proxy/calls.py``) and a key lease are asked for at once;
   admission runs the pipeline and replies once CallAdmitted (or CallRefused) is
   durable, so nothing is sent upstream that is not recorded;
3. the provider's adapter builds the upstream body (usage always requested on streams),
   and the upstream client sends it with the leased key; an error answer is read before
   anything is relayed, so a key's failure goes to the next key and an overload is
   retried (``cmd/daemon/proxy/failover.py``), and with every key benched the call is
   refused at once (429 with ``Retry-After``; 503 while its breaker is open on an overload),
   unsent; a provider that cannot be reached at all is named, with the cause (a
   refused connection, a DNS failure, a timeout), in a 502 or 504;
4. the response is relayed (a stream chunk for chunk, minus the usage chunk the client did
   not ask for), holding back its last bytes (the whole body, or a stream's ``[DONE]``);
5. the completion is recorded — one atomic append — and only then are the last bytes
   sent: every call that returned to a client is in the ledger, even if the daemon dies
   the next instant. A record that cannot be written turns into a 503 (a stream ends
   with an error event instead of ``[DONE]``).

Every answer once the call has its id — an error too: refused at admission, every key
benched, unreachable, not recorded — carries ``x-sessionwarden-call-id`` and the session
header, so ``sessionwarden replay`` finds the call the client saw fail.

When the client disconnects mid-stream, the upstream is drained (up to
``[daemon] drain_timeout_s``) for its usage and the call is recorded all the same. A
stream whose call holds a spend-cap reservation is read no further than the output bound
reserved for it, drained or relayed: an upstream that writes past it is cut there, and
the call is charged what its reservation holds at most (``_relay_stream``).
"""

import asyncio
import re
import time
from collections.abc import AsyncIterator

import aiohttp
import msgspec
from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.credentials import NextReturn
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import AdmissionRefused, Leased, RecordRefusal
from sessionwarden.cmd.daemon.access import note_call
from sessionwarden.cmd.daemon.http import ASGIReceive, ASGISend, send_error, sse_error
from sessionwarden.cmd.daemon.proxy.calls import (
    Next,
    ProxiedCall,
    admit,
    complete,
    new_call_id,
    request_lease,
    return_lease,
    take_lease,
)
from sessionwarden.cmd.daemon.proxy.doors import COUNT_TOKENS, Door
from sessionwarden.cmd.daemon.proxy.failover import (
    RouteRefused,
    fail_over,
    reroute,
    retry_transport,
    route_around,
)
from sessionwarden.cmd.daemon.proxy.local import (
    answer_locally,
    count_in_parent,
    known_parent,
    parent_turn,
)
from sessionwarden.cmd.daemon.proxy.watch import ClientGone, ClientWatch
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.config import UnknownModel
from sessionwarden.domain.calls import CallRequest, RequestShape
from sessionwarden.domain.classify.failover import client_retry_after
from sessionwarden.domain.context.conversation import Conversation, derived_session_id
from sessionwarden.domain.cost.caps import Reservation
from sessionwarden.domain.cost.stream_bound import past_bound
from sessionwarden.domain.errors import KeysBenched, NoCredential
from sessionwarden.domain.keys.ratelimits import parse_rate_limits, rate_limit_headers
from sessionwarden.errors import Unavailable
from sessionwarden.redact import default_redactor
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.adapter import Adapter, StreamReader
from sessionwarden.upstream.chat_completions import ResponseFacts
from sessionwarden.upstream.client import (
    UpstreamResponse,
    forwarded_headers,
    read_at_most,
    read_first_event,
    relayed_headers,
    transport_failure,
)
from sessionwarden.upstream.errors import EventTooLarge, MalformedRequest
from sessionwarden.views.responses import chain_of

__all__ = ["ERROR_BODY_TIMEOUT_S", "MAX_ANSWER_BYTES", "MAX_ERROR_BODY_BYTES",
           "SESSION_HEADER", "client_name", "serve_door"]

#: The response header that names the call's session (given, or derived).
SESSION_HEADER = b"x-sessionwarden-session-id"
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
#: What a free side call (a token count) is recorded with: it used no tokens.
_FREE = ResponseFacts({"input_tokens": 0, "output_tokens": 0}, True, 0)
#: An error answer is read whole before anything is relayed, but never more than this:
#: error bodies are small, and a huge one would be held in memory.
MAX_ERROR_BODY_BYTES = 1 << 20
#: …and never waited for longer than this: it comes at once, and an upstream that
#: sends a 429's headers and then holds its body must not hold the call for the whole
#: read timeout (minutes, for slow models) before it can fail over.
ERROR_BODY_TIMEOUT_S = 10.0
#: A whole answer is read before it is relayed (its usage is recorded first): no real
#: completion comes near this, and an endless one must not take the daemon's memory.
MAX_ANSWER_BYTES = 64 << 20
_NOT_RECORDED = ("sessionwarden could not record this call (its event log or actors are "
                 "unavailable); the upstream may have processed it")


def client_name(headers: dict[str, str]) -> str:
    """The caller's software as its User-Agent names it, bounded, a pasted key scrubbed.

    It is recorded (SessionStarted) and shown (``status``, the live page): a header is
    whatever the client put there.
    """
    return default_redactor.redact(headers.get("user-agent", "")[:200])


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _record_unrouted(rt: Runtime, door: Door, session_id: str, shape: RequestShape,
                           payload: Conversation, headers: dict[str, str], why: str) -> str:
    """Record a call refused for want of a route (a ``CallRefused``); its id, "" if not.

    Nothing was sent, but the refusal belongs in the log like any other: a user looking
    for the call finds it, with the reason, instead of a line on the daemon's stderr.
    """
    # What a client named may be anything, a pasted key included: never stored as is.
    named, why = default_redactor.redact(shape.model), default_redactor.redact(why)
    provider, _, model = named.partition("/")  # as find_model splits it
    if not model:
        provider, model = "", named
    call_id = new_call_id()
    note_call(call_id, session_id, provider, model)
    request = CallRequest(call_id=call_id, session_id=session_id, provider=provider[:100],
                          model=model[:200], api_mode=door.adapter.api_mode, shape=shape,
                          body=payload, client=client_name(headers))
    try:
        await ask(rt.session_ref(session_id), RecordRefusal(request, "routing", 404, why,
                                                              "model_not_found"))
    except Unavailable as exc:
        logger.warning("call {}: refusal not recorded: {}", call_id, exc)
        return ""
    return call_id


async def serve_door(
    rt: Runtime, door: Door, headers: dict[str, str], body: bytes, query: str,
    receive: ASGIReceive, send: ASGISend,
) -> None:
    """Serve one request at ``door`` (the body has been read and size-checked).

    In four steps, each of which may answer the client itself and end the call: read and
    route the request (:func:`_arrive`), admit it (:func:`_admit`), hold a key or the
    model's fallback route (:func:`_hold_key`), then send and relay (:func:`_forward`).
    The caller has set the door's error shape (``http.door_errors``).
    """
    arrived = await _arrive(rt, door, headers, body, query, send)
    if arrived is None:
        return
    call, adapter, injected = arrived
    # The key is asked for while admission runs: neither waits for the other.
    leasing = request_lease(rt, call)
    admitted = await _admit(rt, call, leasing, send)
    if admitted is None:
        return
    count_in_parent(rt, call, admitted)
    if admitted.reply is not None:  # a runaway turn: answered here, never sent
        try:
            await answer_locally(rt, call, admitted, admitted.reply, _ids(call), send)
        finally:
            # Given back once recorded: the completion names no key, since none served it.
            return_lease(rt, call, leasing)
        return
    held = await _hold_key(rt, call, leasing, admitted, adapter, injected, send)
    if held is None:
        return
    adapter, injected = held
    assert call.lease is not None
    upstream_body = adapter.upstream_body(admitted.body.fields_bytes, admitted.body.items)
    try:
        await _forward(rt, call, adapter, upstream_body, headers, injected, receive, send)
    except asyncio.CancelledError:
        # Cancelled before the relay could record (shutdown past its grace period).
        await asyncio.shield(complete(rt, call, call.outcome(
            "cancelled", error="cancelled at shutdown")))
        raise


async def _arrive(rt: Runtime, door: Door, headers: dict[str, str], body: bytes, query: str,
                  send: ASGISend) -> tuple[ProxiedCall, Adapter, bool] | None:
    """Read the request, name its session and route it (None: the client is answered).

    Returns the call, its adapter, and whether the usage chunk was asked for on the
    client's behalf.
    """
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        await send_error(send, 415, f"Content-Encoding {_short(encoding, 40)!r} is not "
                         "supported: send the body uncompressed", code="unsupported_encoding")
        return None
    try:
        payload, shape = door.adapter.read_request(body)
    except MalformedRequest as exc:
        await send_error(send, 400, str(exc), code=exc.code or None)
        return None
    given = headers.get("x-session-id")  # an empty one is refused below, not derived
    continues = door.adapter.continues(payload.fields) or ""
    # A request continuing a stored response sends its new items only: the log knows
    # the chain's session and size (unknown for a response another route made).
    chain = chain_of(rt.log.read_connection(), continues) if continues else None
    if given is None and chain is not None:
        session_id = chain.session_id
    elif given is None:
        # The client's own name for its session (Claude Code's, Codex's), when it is one
        # we can store; else the conversation's own (domain.context.conversation).
        hint = door.adapter.session_hint(payload.fields, headers)
        ok = hint is not None and _SESSION_ID.fullmatch(hint) is not None
        session_id = hint if ok and hint is not None else derived_session_id(payload)
    else:
        session_id = given
    if not _SESSION_ID.fullmatch(session_id):
        await send_error(
            send, 400, "X-Session-Id must be 1-128 characters of A-Z a-z 0-9 . _ : @ -"
        )
        return None
    parent = headers.get("x-session-parent", "")
    if parent and not _SESSION_ID.fullmatch(parent):
        await send_error(
            send, 400, "X-Session-Parent must be 1-128 characters of A-Z a-z 0-9 . _ : @ -"
        )
        return None
    # Named on a subagent's first call, remembered for the others (its runaway guards).
    parent = parent or known_parent(rt, session_id)
    try:
        provider, upstream_model = rt.route(shape.model, door.adapter.api_mode)
    except UnknownModel as exc:
        call_id = await _record_unrouted(rt, door, session_id, shape, payload, headers,
                                         str(exc))
        await send_error(send, 404, str(exc), code="model_not_found",
                         headers=[(b"x-sessionwarden-call-id", call_id.encode()),
                                  (SESSION_HEADER, session_id.encode())] if call_id else ())
        return None
    adapter = adapter_for(provider.api_mode)
    if adapter is None:
        await send_error(send, 501, f"provider {provider.name!r} uses api_mode "
                         f"{provider.api_mode!r}, which the proxy cannot speak yet")
        return None
    if adapter.api_mode != door.adapter.api_mode:
        # No translation between formats yet: the client must reach a provider of its own.
        await send_error(send, 400, f"model {_short(shape.model, 80)!r} is served by provider "
                         f"{provider.name!r}, which speaks {provider.api_mode}; {door.path} "
                         f"speaks {door.adapter.api_mode}: name a model of a provider with "
                         f"api_mode = \"{door.adapter.api_mode}\"", code="wire_mismatch")
        return None
    # What is recorded at admission is what is sent: the fields as upstream gets them.
    payload.fields_bytes, injected = adapter.upstream_fields(
        payload.fields, upstream_model, shape.stream)
    endpoint = door.endpoint + (f"?{query}" if query and door.forward_query else "")
    call = ProxiedCall(session_id, provider, upstream_model, shape.stream, parent, endpoint)
    call.client_request = CallRequest(  # governed again if the upstream finds it too long
        call_id=call.call_id, session_id=session_id, provider=provider.name,
        model=upstream_model, api_mode=provider.api_mode, shape=shape, body=payload,
        client=client_name(headers), parent_session=parent,
        purpose=door.purpose, continues=continues,
        carried_tokens=chain.tokens if chain is not None else 0,
        parent_turn=parent_turn(rt, parent),
    )
    return call, adapter, injected


async def _admit(rt: Runtime, call: ProxiedCall, leasing: "asyncio.Future[Leased] | None",
                 send: ASGISend) -> CallRequest | None:
    """The call's request as admitted, or None once the client has its refusal."""
    assert call.client_request is not None
    try:
        verdict = await admit(rt, call.client_request)
    except Unavailable as exc:
        return_lease(rt, call, leasing)
        # A shard restarting after a failed append says why it failed (a full disk,
        # say), which is what the client can act on; "not running" is not.
        reason = (rt.why_session_down(call.session_id) if isinstance(exc, ActorUnavailable)
                  else None) or str(exc)
        logger.warning("call {}: not admitted: {}", call.call_id, reason)
        # The call id still goes out: the daemon's log line above names it.
        await send_error(send, 503, "sessionwarden cannot record calls right now "
                         f"({_short(reason, 160)}); nothing was sent upstream",
                         kind="server_error", code="unavailable",
                         headers=[(b"retry-after", b"1"), *_ids(call)])
        return None
    if isinstance(verdict, AdmissionRefused):
        return_lease(rt, call, leasing)
        if rt.tracing is not None:
            rt.tracing.refused(call, verdict.status, verdict.code or verdict.kind,
                               verdict.message)
        wait_s = verdict.retry_after_s
        refused = _ids(call)  # recorded (CallRefused): replay finds it by this id
        if wait_s:
            refused.append((b"retry-after", str(wait_s).encode()))
        await send_error(send, verdict.status, verdict.message, kind=verdict.kind,
                         code=verdict.code or None, headers=refused)
        return None
    call.admitted, call.decided = verdict.request, verdict.decided
    return verdict.request


async def _hold_key(rt: Runtime, call: ProxiedCall, leasing: "asyncio.Future[Leased] | None",
                    admitted: CallRequest, adapter: Adapter, injected: bool,
                    send: ASGISend) -> tuple[Adapter, bool] | None:
    """Hold the call's key, or its model's fallback route when every key rests.

    Returns the adapter and usage-chunk flag to send with; None once the client has its
    answer.
    """
    try:
        await take_lease(call, leasing)
    except KeysBenched as exc:
        try:
            routed = await reroute(rt, call, admitted, exc.reason, wire=adapter)
        except RouteRefused as refused:
            await _refuse_route(rt, call, send, refused, str(exc))
            return None
        if routed is None:
            await complete(rt, call, call.outcome("no_credential", error=str(exc)))
            await _benched(send, exc, call)
            return None
        adapter, fields, injected = routed
        admitted.body.fields_bytes = fields
    except (NoCredential, ActorUnavailable) as exc:
        await complete(rt, call, call.outcome("no_credential", error=str(exc)))
        await send_error(send, 503, str(exc), kind="server_error", code="no_credential",
                         headers=_ids(call))
        return None
    return adapter, injected


def _call_header(call: ProxiedCall) -> tuple[bytes, bytes]:
    return (b"x-sessionwarden-call-id", call.call_id.encode())


def _session_header(call: ProxiedCall) -> tuple[bytes, bytes]:
    return (SESSION_HEADER, call.session_id.encode())


def _ids(call: ProxiedCall) -> list[tuple[bytes, bytes]]:
    """The call's and its session's ids: on every answer once the call has its id."""
    return [_call_header(call), _session_header(call)]


async def _benched(send: ASGISend, exc: KeysBenched, call: ProxiedCall) -> None:
    """Every key benched, or the breaker open: a truthful Retry-After, and why.

    429 ``keys_benched`` while keys rest (a rate limit, credit) or one call probes; 503
    ``provider_overloaded`` while the breaker is open on an overload — the keys are fine
    (``keys list`` says ``ok``), so a 429 naming them would send the user to the wrong
    place; 503 ``no_usable_key`` when none will return by itself. Nothing was sent
    upstream; the call is recorded (``no_credential``) like any other.
    """
    if exc.retry_after is None:
        await send_error(send, 503, str(exc), kind="server_error", code="no_usable_key",
                         headers=_ids(call))
        return
    # The header is bounded as a relayed one is (an hour at most: one rule for every
    # Retry-After the daemon sends); the message keeps the exact moment.
    header = client_retry_after(exc.retry_after, None, keyed=True)
    wait = [(b"retry-after", str(header).encode()), *_ids(call)]
    if exc.reason == "overload":
        await send_error(send, 503, str(exc), kind="server_error",
                         code="provider_overloaded", headers=wait)
        return
    await send_error(send, 429, str(exc), kind="rate_limit_error", code="keys_benched",
                     headers=wait)


async def _forward(
    rt: Runtime, call: ProxiedCall, adapter: Adapter, body: bytes,
    headers: dict[str, str], injected: bool, receive: ASGIReceive, send: ASGISend,
) -> None:
    client = ClientWatch(receive)
    call.body = body
    try:
        while True:  # the body changes only when a too-long call is governed again
            relayed = await _attempt(rt, call, adapter, call.body, headers, injected, client,
                                     send)
            if relayed is Next.DONE:
                return
    except RouteRefused as refused:  # its last key failed, and its route does not fit
        await _refuse_route(rt, call, send, refused, call.error_class)
    finally:
        client.close()


async def _refuse_route(rt: Runtime, call: ProxiedCall, send: ASGISend,
                        refused: RouteRefused, failure: str) -> None:
    """The call's fallback route does not fit a cap: the admission's 402, recorded.

    The call is recorded as its own provider's failure (``failure`` says what it was),
    the route's refusal in its error, so its first reservation is released; nothing was
    sent to the route.
    """
    error = f"{failure}; {refused.message}" if failure else refused.message
    await complete(rt, call, call.outcome(refused.outcome, status=refused.status,
                                          error=_short(error, 600)))
    headers = _ids(call)
    if call.error_class:
        headers.append((b"x-sessionwarden-error-class", call.error_class.encode()))
    if refused.refusal.retry_after_s:
        headers.append((b"retry-after", str(refused.refusal.retry_after_s).encode()))
    await send_error(send, refused.refusal.status, refused.message,
                     kind=refused.refusal.kind, code=refused.refusal.code, headers=headers)


async def _attempt(
    rt: Runtime, call: ProxiedCall, adapter: Adapter, body: bytes,
    headers: dict[str, str], injected: bool, client: ClientWatch, send: ASGISend,
) -> Next:
    """Send the request with the call's key and answer the client.

    DONE once the client has its answer; SEND_AGAIN when the request goes upstream again
    (another key, a retry, a fallback route, a resend).
    """
    assert call.lease is not None
    out_headers = forwarded_headers(headers, adapter.auth_headers(call.lease.secret))
    first = call.sent_at is None
    call.sent_at = rt.clock.now()
    provider = call.provider.name
    if first:
        rt.timings.sent(provider, time.perf_counter() - call.started)
    try:
        response = await client.race(
            rt.upstream.post(call.provider, adapter.path + call.endpoint, body, out_headers))
        if first:
            rt.timings.answered(provider, time.perf_counter() - call.started)
    except ClientGone:
        await complete(rt, call, call.outcome(
            "client_disconnected", error="the client left before the upstream answered"))
        return Next.DONE
    except (TimeoutError, aiohttp.ClientError) as exc:
        return await _no_answer(rt, call, adapter, send, exc)
    if response.status < 400:
        call.error_class = ""  # the attempts that failed keep theirs
    try:
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if call.stream and response.status == 200 and is_sse:
            return await _answer_stream(rt, call, adapter, response, injected, client, send)
        return await _answer_plain(rt, call, adapter, response, client, send)
    finally:
        response.release()


async def _answer_stream(rt: Runtime, call: ProxiedCall, adapter: Adapter,
                         response: UpstreamResponse, injected: bool, client: ClientWatch,
                         send: ASGISend) -> Next:
    """A streamed answer: its first event judged (with a key), then relayed."""
    chunks = aiter(response.content.iter_any())
    head = b""
    if call.lease is not None and call.lease.fingerprint:
        # Its first event is read before anything is relayed: an upstream that answers
        # 200 and then an error event has relayed nothing yet either.
        try:
            head = await client.race(read_first_event(chunks, MAX_ERROR_BODY_BYTES))
        except ClientGone:
            response.close()
            await complete(rt, call, call.outcome(
                "client_disconnected", status=200,
                error="the client left before the stream's first event"))
            return Next.DONE
        except (aiohttp.ClientError, TimeoutError) as exc:
            return await _broken_start(rt, call, send, exc)
        error = adapter.stream_error(head)
        if error is not None and await fail_over(
                rt, call, response, error, adapter, streamed=True) is Next.SEND_AGAIN:
            response.close()
            return Next.SEND_AGAIN
    await _relay_stream(rt, call, adapter.stream(injected), response, chunks, head,
                        client, send)
    return Next.DONE


async def _answer_plain(rt: Runtime, call: ProxiedCall, adapter: Adapter,
                        response: UpstreamResponse, client: ClientWatch,
                        send: ASGISend) -> Next:
    """A whole answer: an error one judged first (it may go to another key), then relayed."""
    early: bytes | None = None
    too_large = False
    if response.status >= 400:
        # An error answer is read (at most so far) before anything reaches the client,
        # so a key's failure can still go to another key (a stream's too: its status
        # comes before its first byte).
        broke: Exception | None = None
        read = b""
        try:
            async with asyncio.timeout(ERROR_BODY_TIMEOUT_S):
                read, too_large = await client.race(
                    read_at_most(response.content, MAX_ERROR_BODY_BYTES))
        except ClientGone:
            response.close()
            await complete(rt, call, call.outcome(
                "client_disconnected", status=response.status,
                error="the client left before the answer was read"))
            return Next.DONE
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Its status and headers came whole: they are judged without the body.
            broke = exc
        if too_large:
            response.close()  # the rest stays unread
        early = read
        if await fail_over(rt, call, response, read, adapter) is Next.SEND_AGAIN:
            return Next.SEND_AGAIN
        if broke is not None:
            await _fail(rt, call, send, "truncated", 502,
                        f"the upstream's {response.status} answer broke off "
                        f"({type(broke).__name__})", status=response.status)
            return Next.DONE
    await _relay_plain(rt, call, adapter, response, client, send, early, too_large)
    return Next.DONE


async def _no_answer(rt: Runtime, call: ProxiedCall, adapter: Adapter,
                     send: ASGISend, exc: Exception) -> Next:
    """No answer came: retried (bounded), then the fallback route or the reason (True).

    The reason names the provider, what happened and where, as
    :func:`~sessionwarden.upstream.client.transport_failure` tells it: a refused
    connection is ``unreachable`` (502, Retry-After 1 s), never a timeout; a timeout is
    one (504). Neither benches a key, and an unreachable provider does not open its
    breaker (``domain.keys.breaker``): the next call tries it again, so a server that is back
    serves at once. False: the call was sent again (a retry, or its fallback route).
    """
    failure = transport_failure(exc, call.provider)
    if await retry_transport(rt, call, failure.transport) is Next.SEND_AGAIN:
        return Next.SEND_AGAIN
    name, tries = call.provider.name, call.retries + 1
    cause = default_redactor.redact(failure.cause)
    times = "once" if tries == 1 else f"{tries} times"
    logger.warning("call {}: provider {}: no answer ({}): {}", call.call_id, name,
                   call.error_class, cause)
    if failure.transport == "timeout":
        await _fail(rt, call, send, "timeout", 504,
                    f"provider {name} timed out: {cause} (tried {times})",
                    error_code="provider_timeout")
        return Next.DONE
    if call.error_class == "unreachable":
        if await route_around(rt, call, adapter) is Next.SEND_AGAIN:
            return Next.SEND_AGAIN
        await _fail(rt, call, send, "unreachable", 502,
                    f"provider {name} unreachable: {cause} (tried {times}; nothing reached "
                    "it)", error_code="provider_unreachable", retry_after=1)
        return Next.DONE
    await _fail(rt, call, send, "unreachable", 502,
                f"provider {name} did not answer: {cause} (tried {times})",
                error_code="upstream_error")
    return Next.DONE


async def _broken_start(rt: Runtime, call: ProxiedCall, send: ASGISend,
                        exc: Exception) -> Next:
    """A stream broke before its first event: nothing was relayed, so it may be retried."""
    failure = transport_failure(exc, call.provider)
    if await retry_transport(rt, call, failure.transport) is Next.SEND_AGAIN:
        return Next.SEND_AGAIN
    await _fail(rt, call, send, "truncated", 502, "the upstream stream broke off before "
                f"its first event: {default_redactor.redact(failure.cause)}", status=200)
    return Next.DONE


async def _relay_plain(
    rt: Runtime, call: ProxiedCall, adapter: Adapter, response: UpstreamResponse,
    client: ClientWatch, send: ASGISend, early: bytes | None = None,
    too_large: bool = False,
) -> None:
    """Relay a whole answer, recorded first.

    ``early``: an error body read already (its first :data:`MAX_ERROR_BODY_BYTES` only,
    when ``too_large``).
    """
    try:
        if early is not None:
            body = early
        else:
            body, over = await client.race(read_at_most(response.content, MAX_ANSWER_BYTES))
            if over:  # a hostile or broken upstream: not held in memory, not relayed
                response.close()
                await _fail(rt, call, send, "truncated", 502, "the upstream's answer exceeded "
                            f"{MAX_ANSWER_BYTES >> 20} MiB; it is not relayed",
                            status=response.status)
                return
    except ClientGone:
        response.close()  # unread: the connection cannot go back to the pool
        await complete(rt, call, call.outcome(
            "client_disconnected", status=response.status,
            rate_limit_headers=rate_limit_headers(response.headers),
            error="the client left before the answer was read"))
        return
    except (aiohttp.ClientError, TimeoutError) as exc:
        await _fail(rt, call, send, "truncated", 502,
                    f"the upstream response broke off ({type(exc).__name__})",
                    status=response.status)
        return
    status = response.status
    limits = rate_limit_headers(response.headers)
    if 300 <= status < 400:
        # Not followed, and not relayed either: a client that followed it would send its
        # request, and our token, wherever the upstream pointed.
        await _fail(rt, call, send, "upstream_error", 502, f"the upstream provider answered "
                    f"with a redirect ({status}), which sessionwarden does not follow",
                    status=status)
        return
    if status < 400:
        # A token count is free (Anthropic bills none): its answer holds no usage, which
        # would otherwise be estimated and charged.
        free = call.client_request is not None and call.client_request.purpose == COUNT_TOKENS
        facts = _FREE if free else adapter.read_response(body)
        body = default_redactor.scrub_secrets(body)  # an upstream that echoes our key
        outcome = call.outcome("ok", status=status, usage_block=facts.usage_block,
                               has_output=facts.has_output, output_chars=facts.output_chars,
                               rate_limit_headers=limits, response_id=facts.response_id)
    else:
        # Redacted whole before it is cut: a key cut in two would escape the redaction.
        body = default_redactor.redact_bytes(body)
        began = body[:1024].decode(errors="replace")
        if too_large:
            # Cut off, it would not parse: the client gets the status and a clean error.
            message = (f"the upstream answered {status} with an error body over "
                       f"{MAX_ERROR_BODY_BYTES >> 10} KiB, not relayed; it began: "
                       f"{_short(began, 200)}")
            body = msgspec.json.encode({"error": {"message": message, "type": "upstream_error",
                                                  "code": "upstream_error_too_large"}})
        outcome = call.outcome("upstream_error", status=status, rate_limit_headers=limits,
                               error=_short(began))
    if not await complete(rt, call, outcome):
        await send_error(send, 503, _NOT_RECORDED, kind="server_error", code="not_recorded",
                         headers=_ids(call))
        return
    await _start(rt, send, status, response, call, len(body), json=too_large)
    await send({"type": "http.response.body", "body": body})


async def _relay_stream(
    rt: Runtime, call: ProxiedCall, reader: StreamReader, response: UpstreamResponse,
    chunks: AsyncIterator[bytes], head: bytes, client: ClientWatch, send: ASGISend,
) -> None:
    """Relay a stream: ``head`` (its first bytes, read already), then the rest of ``chunks``.

    Under a spend cap, no further than the output bound its reservation holds
    (``domain.cost.stream_bound``): the chunk that takes the output seen past it is neither
    relayed nor followed (the upstream's connection is closed; the client, if still
    there, gets an ``output_bound_exceeded`` error event instead of ``[DONE]``), and the
    call is recorded with the output counted at the bound — its usage never came, so
    the estimate stands, flagged — and charged no more than it reserved.
    """
    relay = _StreamRelay(rt, call, reader, response, send)
    try:
        await relay.read(head, chunks, client)
    except (aiohttp.ClientError, TimeoutError, EventTooLarge) as exc:
        relay.broke = _short(str(exc) if isinstance(exc, EventTooLarge)
                             else type(exc).__name__)
        logger.warning("call {}: upstream stream ended early: {}", call.call_id, relay.broke)
    except asyncio.CancelledError:
        # The daemon is shutting down past its grace period: the call still gets its row.
        relay.disconnected.set()
        await asyncio.shield(relay.record())
        raise
    # Record before the last bytes go out: a client that saw [DONE] has its ledger row.
    recorded = await asyncio.shield(relay.record())
    if not relay.disconnected.is_set():
        await relay.finish(recorded)


class _StreamRelay:
    """One stream's relay: what was read, relayed and cut, and how the call ends."""

    def __init__(self, rt: Runtime, call: ProxiedCall, reader: StreamReader,
                 response: UpstreamResponse, send: ASGISend) -> None:
        self.rt, self.call, self.reader, self.response, self.send = (
            rt, call, reader, response, send)
        self.disconnected = asyncio.Event()
        #: Why the upstream's stream ended early ("" while it has not).
        self.broke = ""
        self.bound = _reserved_bound(call)
        #: The output went past :attr:`bound`: read no further.
        self.cut = False
        #: Chunks read in which the output grew: no more than the events that carried it.
        self.grew = 0

    async def forward(self, data: bytes) -> None:
        """Relay ``data`` unless the client is gone."""
        if self.disconnected.is_set() or not data:
            return
        try:
            await self.send({"type": "http.response.body", "more_body": True,
                             "body": default_redactor.scrub_secrets(data)})
        except Exception:  # the client went away between our check and the write
            self.disconnected.set()

    def outcome(self) -> str:
        """The call's outcome as the stream stands."""
        if self.disconnected.is_set():
            return "client_disconnected"
        ended = self.reader.done and not self.broke and not self.cut
        return "ok" if ended else "truncated"

    def fed(self, chunk: bytes) -> bytes | None:
        """Feed ``chunk``; what to relay of it, or None: it took the output past the bound."""
        before = self.reader.output_chars
        data = self.reader.feed(chunk)
        if self.bound is None:
            return data
        self.grew += self.reader.output_chars > before
        self.cut = past_bound(self.bound, self.reader.output_chars, self.grew)
        return None if self.cut else data

    async def read(self, head: bytes, chunks: AsyncIterator[bytes],
                   client: ClientWatch) -> None:
        """Relay ``head`` and the chunks; once the client is gone, drain for the usage."""
        loop = asyncio.get_running_loop()
        # Once the client is gone, the upstream is drained for its usage for a bounded
        # time; the bound must hold even when the upstream goes silent, so it is a
        # deadline on the whole read, armed by the disconnect watcher.
        async with asyncio.timeout(None) as drain:
            reading = True

            def left() -> None:
                self.disconnected.set()
                if reading:  # the deadline is only ours to move while we are inside it
                    drain.reschedule(loop.time() + self.rt.config.daemon.drain_timeout_s)

            client.on_gone(left)
            try:
                await _start(self.rt, self.send, 200, self.response, self.call, None)
                data = self.fed(head) if head else b""
                if data is not None:
                    await self.forward(data)
                    async for chunk in chunks:
                        data = self.fed(chunk)
                        if data is None:
                            break
                        await self.forward(data)
                        if self.disconnected.is_set() and self.reader.usage_block is not None:
                            break
            finally:
                reading = False
        if self.cut:
            self.response.close()  # the rest is never read: the upstream may stop writing

    async def record(self) -> bool:
        """Record the call's completion (True once durable)."""
        reader, bound = self.reader, self.bound
        usage, chars, error = reader.usage_block, reader.output_chars, self.broke
        if self.cut and bound is not None:
            self.call.bounded = True  # the ledger charges it its reservation at most
            # A usage block seen before the end is not the end's (the upstream sends
            # the final one last), and what was read past the bound was not relayed:
            # the output is counted at the bound it went past.
            usage, chars = None, bound * 4
            error = (f"the upstream wrote past the {bound} output tokens reserved for this "
                     f"call ({reader.output_chars} characters seen): read no further; "
                     "output counted at the bound, charged to the caps at its "
                     "reservation at most")
        return await complete(self.rt, self.call, self.call.outcome(
            self.outcome(), status=200, usage_block=usage, has_output=True,
            output_chars=chars, rate_limit_headers=rate_limit_headers(self.response.headers),
            error=error, response_id=reader.response_id or "",
        ))

    async def finish(self, recorded: bool) -> None:
        """The stream's last bytes to a client still there: the end, or why there is none."""
        if not recorded:
            tail = sse_error(_NOT_RECORDED, "server_error", "not_recorded")
        elif self.cut:
            tail = sse_error(f"the upstream wrote past the {self.bound} output tokens this "
                             "call reserved under its spend cap; the answer is cut there",
                             "upstream_error", "output_bound_exceeded")
        elif self.outcome() == "truncated":
            # No [DONE] came: the client must not take a cut-off answer for a whole one.
            # An unfinished event is dropped: relayed, it would only garble the error.
            tail = self.reader.held + sse_error("the upstream stream ended before its end",
                                                "upstream_error", "stream_truncated")
        else:
            tail = self.reader.rest()
        try:
            await self.send({"type": "http.response.body", "more_body": False,
                             "body": default_redactor.scrub_secrets(tail)})
        except Exception:
            pass


def _reserved_bound(call: ProxiedCall) -> int | None:
    """The output tokens the call's spend-cap reservation holds (None: it holds none)."""
    held = call.admitted.budget if call.admitted is not None else None
    if isinstance(held, Reservation) and held.output_bound > 0:
        return held.output_bound
    return None


#: The upstream's waits: never relayed as sent (issue 21 §3), see :func:`_retry_after`.
_WAITS = frozenset({b"retry-after", b"retry-after-ms"})


async def _retry_after(rt: Runtime, status: int, response: UpstreamResponse,
                       call: ProxiedCall) -> bytes | None:
    """The ``Retry-After`` of a relayed answer: when the pool takes a call again.

    Only an error answer that is a 429 or came with a wait has one; it says when the
    provider's pool has a key again (``NextReturn``), bounded and in whole seconds
    (``domain.classify.failover.client_retry_after``): never the upstream's value as sent (ten
    years, ``-5``, a date in 2015), while its keys cool for seconds. A provider without
    keys (or a pool that cannot be asked) has the upstream's value, read and bounded.
    """
    if status < 400:  # a success's headers are not searched: the hot path stays as it was
        return None
    lowered = {k.lower(): v for k, v in response.headers.items()
               if k.lower() in ("retry-after", "retry-after-ms")}
    if not (status == 429 or lowered):
        return None
    upstream = parse_rate_limits(lowered, rt.clock.now()).retry_after_seconds
    pool: int | None = None
    keyed = call.lease is not None and bool(call.lease.fingerprint)
    if keyed:
        try:
            pool = await ask(rt.credentials, NextReturn(call.provider.name))
        except ActorUnavailable:
            keyed = False  # nobody knows better than the upstream now
    wait = client_retry_after(pool, upstream, keyed)
    return None if wait is None else str(wait).encode()


async def _start(
    rt: Runtime, send: ASGISend, status: int, response: UpstreamResponse, call: ProxiedCall,
    length: int | None, json: bool = False,
) -> None:
    # Header values are scrubbed with the patterns too: no header of an answer has a
    # reason to carry anything key-shaped.
    headers = [(k, default_redactor.redact_bytes(v)) for k, v in relayed_headers(
        response.headers) if not (json and k.lower() == b"content-type")
        and k.lower() not in _WAITS]
    if (wait := await _retry_after(rt, status, response, call)) is not None:
        headers.append((b"retry-after", wait))
    if json:  # the body is ours, not the upstream's
        headers.append((b"content-type", b"application/json"))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    headers.append((b"x-sessionwarden-call-id", call.call_id.encode()))
    headers.append(_session_header(call))
    if status >= 400 and call.error_class:
        headers.append((b"x-sessionwarden-error-class", call.error_class.encode()))
    # The credit notices up for the call's key as the headers leave: a plain answer's
    # completion is recorded first, so they include what its own headers raised; a
    # stream's headers leave before its end, so they carry what earlier answers raised.
    if call.lease is not None:
        notice = rt.credit_board.header(call.provider.name, call.lease.fingerprint,
                                        rt.clock.now())
        if notice is not None:
            headers.append((b"x-sessionwarden-notice", notice))
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _fail(rt: Runtime, call: ProxiedCall, send: ASGISend, kind: str, code: int,
                message: str, status: int = 0, *, error_code: str | None = None,
                retry_after: int | None = None) -> None:
    """Record the call as ``kind`` and answer ``code`` with ``message`` and its ids."""
    await complete(rt, call, call.outcome(kind, status=status, error=message))
    headers = _ids(call)
    if call.error_class:
        headers.append((b"x-sessionwarden-error-class", call.error_class.encode()))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send_error(send, code, message, kind="upstream_error", code=error_code,
                     headers=headers)
