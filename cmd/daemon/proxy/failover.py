"""Failing over and retrying inside a call, before anything reached the client.

Policy is the domain's; this module only carries it out: another key, a compressed
history, a retry or the fallback route, as the classified failure asks.

The proxy (``cmd/daemon/proxy/relay.py``) reads an error answer whole before relaying anything, and
asks here what to do with it: :func:`fail_over` classifies it (``domain.classify.classifier``,
with the key's last recorded buckets for a 429), tells the pool the key's failure (the
key and the breaker change before the reply), and for a failure of that key
takes the next usable key (each key at most once per call: a rotation is not a retry);
for a request the upstream finds too long it has the session's actor compress the
history further and sends that, once; :func:`reroute` sends a call its provider cannot
take (every key benched, the breaker open) to its model's fallback route, at its
start or once its last key failed;
for an overload, a 5xx or a timeout it waits and sends again with the same key, at
most :data:`~sessionwarden.domain.classify.classifier.MAX_RETRIES` times, jittered.
:func:`retry_transport` does the same when no answer came at all, and once those
retries are spent on an unreachable provider, :func:`route_around` moves the call to
its model's fallback route as a benched provider's would be. Each failed attempt
is noted on the call (``CallAttempt``) and lands in its one CallCompleted. A route is a
call of its own to the spend caps: its worst case, at the route's price, is reserved
against the route's scopes before anything goes there, and a route that does not fit
raises :class:`RouteRefused` (the proxy answers the admission's 402).
"""

import asyncio
import random
from datetime import datetime

import msgspec
from loguru import logger
from sessionwarden.actors.bridge import ask, tell
from sessionwarden.actors.credentials import RequestFault
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import (
    KeyFailed,
    Lease,
    Release,
    Reroute,
    Resend,
    ReserveRoute,
)
from sessionwarden.cmd.daemon.proxy.calls import Next, ProxiedCall, release_key
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.config import ProviderConfig, UnknownModel
from sessionwarden.domain.calls import CallAttempt, CallRequest
from sessionwarden.domain.classify.classification import Classification, Transport
from sessionwarden.domain.classify.classifier import classify, retry_delay
from sessionwarden.domain.classify.failover import fails_over, key_failure, request_fault
from sessionwarden.domain.cost.caps import Refusal, Reservation
from sessionwarden.domain.errors import KeysBenched, NoCredential
from sessionwarden.domain.keys.key_states import KeyFailure
from sessionwarden.domain.keys.ratelimits import RateLimitSnapshot
from sessionwarden.errors import Unavailable
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.adapter import Adapter
from sessionwarden.upstream.client import UpstreamResponse
from sessionwarden.views.projections import read_buckets

__all__ = ["RouteRefused", "fail_over", "reroute", "retry_transport", "route_around"]

#: The retries' jitter (not a secret: only spreads the retries of many calls apart).
_RNG = random.Random()


class RouteRefused(Exception):
    """The call's fallback route does not fit a spend cap: refused, nothing sent there.

    ``refusal`` is the ledger's (the admission's 402, its code and ``Retry-After``);
    ``message`` says it with why the call needed its route. The call is to be recorded
    as its own provider's failure was (``outcome``, ``status``: what the client would
    have had without a route), the route's refusal in its error.
    """

    def __init__(self, refusal: Refusal, message: str, outcome: str = "no_credential",
                 status: int = 0) -> None:
        super().__init__(message)
        self.refusal, self.message = refusal, message
        self.outcome, self.status = outcome, status


async def fail_over(rt: Runtime, call: ProxiedCall, response: UpstreamResponse,
                    body: bytes, adapter: Adapter, *, streamed: bool = False) -> Next:
    """Judge an error answer; on a key's own failure, take the next key (True).

    The key is benched first (the pool replies once that is durable), so the next lease
    avoids it; each key is tried at most once per call, and a rotation is not a retry.
    A billing or auth failure the previous key had just so (same status and class) is
    the request's fault (:func:`_repeated`): that key's bench is lifted, this one is not
    benched, and the answer is relayed. ``streamed``: ``body`` is the error event a 200
    stream began with (judged by its code and words, as an answer without an error
    status).
    """
    assert call.lease is not None
    now = rt.clock.now()
    status = 0 if streamed else response.status
    last_known, age = None, 0.0
    if status == 429 and call.lease.fingerprint:  # a limit it hit may make this genuine
        last_known, age = await asyncio.to_thread(
            _last_known, rt, call.provider.name, call.lease.fingerprint, now)
    found = classify(status, {k.lower(): v for k, v in response.headers.items()},
                     body, now=now, last_known=last_known, last_known_age=age,
                     provider=call.provider.name, api_mode=call.provider.api_mode,
                     shared_limits=call.provider.shared_limits, book=rt.patterns,
                     quoted=_quoted(call))
    call.error_class = found.error_class
    lease = call.lease
    if not lease.fingerprint:
        # A keyless provider (the built-in sim, a local server) has no key to bench and
        # none to fail over to: only the call's own recovery applies.
        if found.recovery == "compress_and_retry":
            return await _resend(rt, call, found, response.status, adapter)
        return await _retry(rt, call, found, response.status)
    failure = key_failure(found, status, now, call.provider.shared_limits)
    if await _repeated(rt, call, response.status, status, found, failure):
        return Next.ANSWER  # the request's fault: the client gets this answer, no key benched
    try:
        await ask(rt.credentials, KeyFailed(lease.provider, lease.fingerprint, failure))
    except Unavailable as exc:
        logger.warning("call {}: key failure not recorded: {}", call.call_id, exc)
        return Next.ANSWER
    if found.recovery == "compress_and_retry":
        return await _resend(rt, call, found, response.status, adapter)
    if not fails_over(found):
        return await _retry(rt, call, found, response.status)
    call.tried.append(lease.fingerprint)
    try:
        following = await ask(rt.credentials,
                              Lease(lease.provider, call.call_id, tuple(call.tried)))
    except KeysBenched as exc:  # no other key: the fallback route, or this answer
        return await _fall_back(rt, call, found.error_class, response.status, adapter,
                                exc.reason)
    except (NoCredential, ActorUnavailable):
        return Next.ANSWER  # no other key: the client gets this answer
    release_key(rt, call)
    call.attempts.append(CallAttempt(credential=lease.fingerprint, status=response.status,
                                     error_class=found.error_class))
    call.lease, call.released = following, False
    logger.info("call {}: {} from key {}: failing over to key {}", call.call_id,
                response.status, lease.fingerprint, following.fingerprint)
    return Next.SEND_AGAIN


def _quoted(call: ProxiedCall) -> tuple[str, ...]:
    """What the upstream's error may quote of the request: the model's names.

    The client chose them, so they are never read as the answer's words (issue 21 §1):
    the name sent upstream, the client's own, and each one's last path segment.
    """
    names = [call.model]
    if call.client_request is not None:
        names.append(call.client_request.shape.model)
    names += [name.rpartition("/")[2] for name in names]
    return tuple(dict.fromkeys(name for name in names if name))


async def _repeated(rt: Runtime, call: ProxiedCall, answered: int, status: int,
                    found: Classification, failure: KeyFailure) -> bool:
    """The call's previous key failed just so: the request's fault, not the keys' (True).

    Same status and class as the attempt it failed over from (``domain.classify.failover.
    request_fault`` says which verdicts count); the pool then lifts that key's bench of
    the same kind and records nothing against this one. ``answered`` is the answer's
    HTTP status (what attempts record), ``status`` the classified one.
    """
    assert call.lease is not None
    if not call.attempts or not request_fault(found, status):
        return False
    last = call.attempts[-1]
    if last.credential == call.lease.fingerprint or last.credential not in call.tried \
            or (last.status, last.error_class) != (answered, found.error_class):
        return False
    try:
        same = await ask(rt.credentials, RequestFault(
            call.lease.provider, last.credential, failure, call.sent_at or rt.clock.now()))
    except Unavailable as exc:
        logger.warning("call {}: a repeated failure not judged: {}", call.call_id, exc)
        return False
    if same:
        logger.info("call {}: {} ({}) from key {} as from key {}: the request's fault, "
                    "no key benched", call.call_id, answered, found.error_class,
                    call.lease.fingerprint, last.credential)
    return bool(same)


async def _resend(rt: Runtime, call: ProxiedCall, found: Classification, status: int,
                  adapter: Adapter) -> Next:
    """Too long for the upstream: once per call, govern it again, more compressed, resend.

    The session's actor compresses the history to a lower target and records what goes
    upstream now (CallResent, its contents in the same append) before replying, so
    nothing is sent that the log does not hold. False: nothing more to compress.
    """
    if call.resent or call.client_request is None or call.lease is None:
        return Next.ANSWER
    call.resent = True
    try:
        granted = await ask(rt.session_ref(call.session_id),
                            Resend(call.client_request, found.error_class))
    except Unavailable as exc:
        logger.warning("call {}: not governed again: {}", call.call_id, exc)
        return Next.ANSWER
    if granted is None:
        return Next.ANSWER
    call.decided += granted.decided  # its span shows this compression too
    sent = granted.request.body
    call.body = adapter.upstream_body(sent.fields_bytes, sent.items)
    call.attempts.append(CallAttempt(credential=call.lease.fingerprint, status=status,
                                     error_class=found.error_class))
    logger.info("call {}: {} ({}); compressed further and sent again", call.call_id,
                status, found.error_class)
    return Next.SEND_AGAIN


async def route_around(rt: Runtime, call: ProxiedCall, adapter: Adapter) -> Next:
    """The provider stayed unreachable through the call's retries: its fallback route (True).

    A dead host can take no call, as a provider whose keys are all benched cannot; its
    breaker stays closed (``domain.keys.breaker``), so the next call tries it first again.
    """
    return await _fall_back(rt, call, call.error_class or "unreachable", 0, adapter,
                            "unreachable")


async def _fall_back(rt: Runtime, call: ProxiedCall, error_class: str, status: int,
                     adapter: Adapter, reason: str) -> Next:
    """The last key failed too: send the call to its model's fallback route (True).

    As a call that finds every key benched at its start would be; the failed attempts
    stay on the call. Not for a request governed again mid-call (what the route records
    is the request as admitted), nor for a route of another wire format. ``reason`` is
    why the provider can take none (``no_usable_key``, ``overload``, ``unreachable``).
    """
    admitted, failed = call.admitted, call.lease
    if admitted is None or failed is None or call.resent:
        return Next.ANSWER
    release_key(rt, call)  # the route's key replaces it
    try:
        routed = await reroute(rt, call, admitted, reason, wire=adapter)
    except RouteRefused as refused:
        # Recorded as the provider's own failure (the answer it gave, or none), which
        # releases the first reservation; the client gets the route's 402.
        refused.outcome, refused.status = ("upstream_error", status) if status else (
            "unreachable", 0)
        raise
    if routed is None:
        return Next.ANSWER
    _, fields, _ = routed
    call.attempts.append(CallAttempt(credential=failed.fingerprint, status=status,
                                     error_class=error_class))
    call.tried = []
    call.body = adapter.upstream_body(fields, admitted.body.items)
    return Next.SEND_AGAIN


async def reroute(rt: Runtime, call: ProxiedCall, admitted: CallRequest,
                  reason: str, wire: Adapter | None = None,
                  ) -> tuple[Adapter, bytes, bool] | None:
    """Send the call to its model's fallback route while its provider can take none.

    ``reason`` says why it can take none (``no_usable_key``, ``overload``,
    ``unreachable``); it is recorded with the route. The fields are encoded for the
    fallback's model and recorded (``session.call_resent`` with the route) before
    anything is sent; the call then belongs to that provider
    (its key, its price, its ledger row). Returns the route's adapter, the fields and
    whether usage was injected, or None: no fallback, or it cannot take the call either
    (or, given ``wire``, the route speaks another wire format).

    While a cap may apply, the route's worst case is reserved first, in place of the
    call's reservation (``ReserveRoute``); a ledger that is down sends nothing there (a
    cap is never passed by because its keeper is down).

    Raises:
        RouteRefused: the route's worst case does not fit a cap (its key is given back).
    """
    entry = rt.config.model_for(call.provider.name, call.model)
    if entry is None or not entry.fallback or admitted.record is None:
        return None
    try:
        provider, model = rt.route(entry.fallback)
    except UnknownModel:
        return None
    adapter = adapter_for(provider.api_mode)
    if adapter is None or (wire is not None and adapter is not wire):
        return None
    fields, injected = adapter.upstream_fields(admitted.body.fields, model, call.stream)
    try:
        lease = await ask(rt.credentials, Lease(provider.name, call.call_id))
    except (NoCredential, ActorUnavailable) as exc:
        logger.info("call {}: fallback {} cannot take it either: {}", call.call_id,
                    entry.fallback, exc)
        return None
    def give_back() -> None:
        try:
            tell(rt.credentials, Release(lease.provider, lease.fingerprint,
                                                call_id=call.call_id))
        except ActorUnavailable:
            pass  # a pool that is down holds no lease: a restarted one starts with none

    held: Reservation | None = None
    if rt.caps_active:
        try:
            held = await _reserve_route(rt, call, admitted, provider, model, reason)
        except RouteRefused:
            give_back()
            raise
        except ActorUnavailable as exc:
            logger.warning("call {}: the fallback route's cost cannot be held: {}",
                           call.call_id, exc)
            give_back()
            return None
    try:
        await ask(rt.session_ref(call.session_id), Reroute(
            call.session_id, call.call_id, admitted.record, provider.name, model, fields,
            reason))
    except Unavailable as exc:
        logger.warning("call {}: the fallback route was not recorded: {}", call.call_id, exc)
        give_back()  # the route's reservation is released when the call is recorded
        return None
    logger.info("call {}: provider {} cannot take it ({}); sent to its fallback {}",
                call.call_id, call.provider.name, reason, entry.fallback)
    call.provider, call.model, call.lease, call.released = provider, model, lease, False
    if held is not None:  # the stream relay reads no further than its output bound
        call.admitted = msgspec.structs.replace(admitted, budget=held)
    return adapter, fields, injected


async def _reserve_route(rt: Runtime, call: ProxiedCall, admitted: CallRequest,
                         provider: ProviderConfig, model: str, reason: str) -> Reservation:
    """The route's worst case held in place of the call's reservation, or RouteRefused.

    Raises:
        RouteRefused: it does not fit a cap.
        ActorUnavailable: the ledger is not running.
    """
    decided = await ask(rt.ledger, ReserveRoute(admitted, provider.name, model))
    if isinstance(decided, Reservation):
        return decided
    assert isinstance(decided, Refusal), decided
    route = f"{provider.name}/{model}"
    logger.info("call {}: provider {} cannot take it ({}); its fallback route {} is "
                "refused: {}", call.call_id, call.provider.name, reason, route,
                decided.code)
    raise RouteRefused(decided, f"provider {call.provider.name} cannot take this call "
                       f"({reason}) and its fallback route {route} does not fit the spend "
                       f"caps: {decided.message}")


def _last_known(rt: Runtime, provider: str, credential: str,
                now: datetime) -> tuple[RateLimitSnapshot | None, float]:
    """The key's last recorded buckets (``view_ratelimits``) and their age in seconds.

    Read in a worker thread, on the failure path only: a success never pays for it.
    """
    found = read_buckets(rt.log.read_connection(), provider, credential)
    if not found:
        return None, 0.0
    newest = max(at for _, at in found)
    return (RateLimitSnapshot(buckets=tuple(b for b, _ in found)),
            max(0.0, (now - newest).total_seconds()))


async def _retry(rt: Runtime, call: ProxiedCall, found: Classification, status: int) -> Next:
    """Wait, then send again with the same key (True), if the class asks for a retry.

    Overload, 5xx and timeouts only, before anything reached the client, at most
    :data:`MAX_RETRIES` times per call, jittered (``domain.classify.classifier.retry_delay``); a
    longer ``Retry-After`` than a short wait means relay, not hold the client.
    """
    if found.recovery != "retry":
        return Next.ANSWER
    delay = retry_delay(call.retries + 1, _RNG, found.reset_seconds,
                        rt.config.daemon.retry_base_s)
    if delay is None:
        return Next.ANSWER
    call.retries += 1
    assert call.lease is not None
    call.attempts.append(CallAttempt(credential=call.lease.fingerprint, status=status,
                                     error_class=found.error_class))
    logger.info("call {}: {} ({}); retry {} in {:.2f} s", call.call_id, status or "no answer",
                found.error_class, call.retries, delay)
    await rt.clock.sleep(delay)  # the injected clock: a test's retries cost no time
    return Next.SEND_AGAIN


async def retry_transport(rt: Runtime, call: ProxiedCall, transport: Transport) -> Next:
    """No answer came: count it for the breaker and retry (bounded) when the class says so."""
    now = rt.clock.now()
    found = classify(0, {}, b"", now=now, transport=transport, provider=call.provider.name,
                     book=rt.patterns)
    call.error_class = found.error_class
    lease = call.lease
    if lease is not None and lease.fingerprint:
        try:
            await ask(rt.credentials, KeyFailed(
                lease.provider, lease.fingerprint, key_failure(found, 0, now)))
        except Unavailable as exc:
            logger.warning("call {}: failure not recorded: {}", call.call_id, exc)
    return await _retry(rt, call, found, 0)
