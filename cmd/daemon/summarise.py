"""The model summariser's performer: a side call to an upstream model, metered like any call.

When the compression stage wants a model to write a summary it asks for a
:class:`~sessionwarden.domain.context.summariser.SummaryWork`; the proxy finds this module's
:func:`summarise` among the runtime's performers (:func:`summary_performers`), awaits it
on the event loop, and resumes the admission with its
:class:`~sessionwarden.domain.context.summariser.SummaryResult`.

Rules:

The summary is asked for exactly as a client's call is forwarded, so it is governed by
the same ledger: a :class:`~sessionwarden.domain.calls.CallRequest` with ``purpose
"summary"`` and ``parent_call`` (the waiting call) is admitted in the session — its
CallAdmitted is durable before anything is sent (side calls skip the admission stages)
— a pooled key is leased, the prompt is sent through the daemon's upstream client, and
the call is completed with its status and usage, whatever happens, so its tokens are
metered and its key's outcome counts. What is sent is redacted first (the prompt quotes
tool output, which may hold a key); so is the answer.

While a spend cap may apply (``Runtime.caps_active``) the side call costs money like
any other, so before it is admitted its worst case — the prompt's estimate and its
output bound at the summary model's price — is held against the session's scopes
(its session and ancestors, its provider's day, the day) through the ledger's
``ReserveRoute`` (the request at that provider and model), and that bound is sent as
``max_tokens`` so the upstream cannot bill past it. The completion settles the actual
cost into the same reservation (``cmd/calls.complete``). When it does not fit — or the
ledger cannot hold it — nothing is admitted or sent, and the result says ``over_cap``
with the ledger's reason: the stage uses the builtin summary and SummariserFailed says so
(issue 21, item 6).

The answer is read in chunks up to ``domain.context.summariser.answer_max_bytes`` (a few hundred
KiB): a longer one (declared, or sent) is abandoned there, recorded as answered with an
estimate of what was read, and is a failure (issue 21, item 12: a 256 MiB answer held
in memory and decoded on the event loop stalled ``/healthz`` for seconds). Decoding the
answer and redacting the prompt and the answer run in a worker thread, off the loop.

Failures never raise (only cancellation does): they come back as a result with
``failure`` set, for the stage to apply ``on_summary_failure``. A summary model that is
missing upstream (404, ``model_not_found``, "does not exist", "no available channel") or
whose provider has no usable key is a configuration problem the session's own model does
not share: the session's model is asked once instead (hermes-behaviour.md §2.6). Other
failures (5xx, timeout, unreachable, malformed or empty answer) are not retried on
another model: the client's call is waiting, and the builtin summary is the fallback.

The side call runs in a context of its own, so the access line of the client's request
keeps naming the client's call, not the summary's.
"""

import asyncio
import contextvars
from datetime import datetime
from functools import partial
from typing import NamedTuple

import aiohttp
import msgspec
from loguru import logger
from sessionwarden.actors.bridge import ask, tell
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import AdmissionRefused, ReleaseReservation, ReserveRoute
from sessionwarden.actors.shells import SummariserCooling
from sessionwarden.cmd.daemon.proxy.calls import (
    ProxiedCall,
    admit,
    complete,
    request_lease,
    return_lease,
    take_lease,
)
from sessionwarden.cmd.daemon.runtime import Performer, Runtime
from sessionwarden.config import ProviderConfig
from sessionwarden.domain.calls import CallRequest, RequestShape
from sessionwarden.domain.context.summariser import (
    SummaryResult,
    SummaryWork,
    accept_summary,
    answer_max_bytes,
)
from sessionwarden.domain.cost.caps import Refusal, Reservation
from sessionwarden.domain.cost.worst_case import output_bound
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.keys.ratelimits import rate_limit_headers
from sessionwarden.errors import Unavailable
from sessionwarden.events.times import format_time
from sessionwarden.redact import default_redactor
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.client import UpstreamResponse, forwarded_headers
from sessionwarden.upstream.errors import MalformedResponse
from sessionwarden.upstream.prompt import PATH, prompt_body, read_answer, supports

__all__ = ["CLIENT", "SUMMARY_TIMEOUT_S", "summarise", "summary_performers"]

#: How long a summary may take, from sending to the answer's last byte. The client's call
#: waits meanwhile; past it, the builtin summary (or no compression) is the answer.
SUMMARY_TIMEOUT_S = 60.0

#: The ``client`` recorded for a side call (on a session's SessionStarted, if it is first).
CLIENT = "sessionwarden/summariser"

#: Phrases of an error body saying the model does not exist (lowercase).
_MISSING = ("model_not_found", "model not found", "does not exist", "no available channel",
            "unknown model", "no such model")
_ERROR_CHARS = 300


class _Attempt(NamedTuple):
    """One model asked: its answer's text, or why not.

    ``unusable`` says what the failure rules out, so what the fallback may try:
    ``"model"`` (missing upstream: another model may do), ``"provider"`` (no key, or a
    wire format we cannot send prompts in: only another provider may do), or ``""``.
    """

    text: str = ""
    failure: str = ""
    unusable: str = ""
    #: Not sent: its worst case does not fit a spend cap (``failure`` says which).
    over_cap: bool = False


class _Limits(NamedTuple):
    """What the ledger prices a side call's output bound from: a body's ``fields``."""

    fields: dict[str, int]


def summary_performers(rt: Runtime) -> dict[type, Performer]:
    """The performers this module adds to ``rt.performers``."""
    return {SummaryWork: partial(summarise, rt)}


async def summarise(rt: Runtime, work: SummaryWork, *,
                    timeout_s: float = SUMMARY_TIMEOUT_S) -> SummaryResult:
    """Ask the summary model (or, if it is missing, the session's) for ``work``'s summary.

    Every call sent is recorded in the session's ledger, completed whatever happens.
    ``failure`` in the result says why there is no summary (module doc).

    Raises:
        asyncio.CancelledError: only that (the calls sent are completed first).
    """
    # An empty context: the side call must not note itself in the client's access line.
    task = asyncio.get_running_loop().create_task(
        _summarise(rt, work, timeout_s), context=contextvars.Context())
    return await task


async def _summarise(rt: Runtime, work: SummaryWork, timeout_s: float) -> SummaryResult:
    provider, model = work.provider, work.model
    until = await _cooling(rt, f"{provider}/{model}")
    if until is not None:
        # Another session's failures (or a restart's log) say the model is cooling: it is
        # not asked, and the builtin summary stands in.
        return SummaryResult("", f"{provider}/{model}",
                             f"cooling down until {format_time(until)} after failures",
                             cooling=True)
    attempt = await _attempt(rt, work, provider, model, timeout_s)
    used_fallback = False
    fallback = (work.fallback_provider, work.fallback_model)
    if fallback[1] and ((attempt.unusable == "model" and fallback != (provider, model))
                        or (attempt.unusable == "provider" and fallback[0] != provider)):
        logger.warning("summary model {}/{} unusable ({}); asking the session's model {}/{}",
                       provider, model, attempt.failure, *fallback)
        provider, model = fallback
        attempt = await _attempt(rt, work, provider, model, timeout_s)
        used_fallback = True
    name = f"{provider}/{model}"
    if not attempt.failure:
        # Redacting up to a few hundred KiB of text: off the loop, as the decoding was.
        accepted = await asyncio.to_thread(_accept, attempt.text, work.max_chars)
        if accepted is not None:
            return SummaryResult(accepted, name, "", used_fallback)
        attempt = _Attempt(failure="empty summary")
    if attempt.over_cap:
        logger.info("summary for call {} by {} not asked for: {}; the builtin summary "
                    "stands in", work.call_id, name, attempt.failure)
    else:
        logger.warning("summary for call {} by {} failed: {}", work.call_id, name,
                       attempt.failure)
    return SummaryResult("", name, attempt.failure, used_fallback, over_cap=attempt.over_cap)


async def _cooling(rt: Runtime, model: str) -> datetime | None:
    """Until when ``model`` is cooling across sessions (the CompressorActor), or None."""
    try:
        until: datetime | None = await ask(rt.compressor, SummariserCooling(model))
    except Unavailable:
        return None  # nobody knows better: the session's own ladder still applies
    return until


def _accept(text: str, max_chars: int) -> str | None:
    return accept_summary(default_redactor.redact(text), max_chars)


def _redacted(work: SummaryWork) -> tuple[str, str]:
    return default_redactor.redact(work.system), default_redactor.redact(work.prompt)


async def _attempt(rt: Runtime, work: SummaryWork, provider_name: str, model: str,
                   timeout_s: float) -> _Attempt:
    """Ask one model: admitted, leased, sent and completed like a client's call."""
    provider = rt.config.provider(provider_name)
    if provider is None:
        return _Attempt(failure="unknown provider", unusable="provider")
    adapter = adapter_for(provider.api_mode)
    if adapter is None or not supports(provider.api_mode):
        return _Attempt(failure=f"api_mode {provider.api_mode} unsupported",
                        unusable="provider")
    system, prompt = await asyncio.to_thread(_redacted, work)
    capped = rt.caps_active
    entry = rt.config.model_for(provider.name, model)
    bound = output_bound(work.max_output_tokens or None,
                         entry.max_output_tokens if entry is not None else None)
    # Under a cap the bound reserved is the bound sent: the upstream bills no more.
    body = prompt_body(model, system, prompt, bound if capped else work.max_output_tokens)
    call = ProxiedCall(work.session_id, provider, model, stream=False)
    side = CallRequest(
        call_id=call.call_id, session_id=work.session_id, provider=provider.name,
        model=model, api_mode=provider.api_mode,
        shape=RequestShape(model=model, message_count=2,
                           prompt_chars=len(system) + len(prompt)),
        body=None, client=CLIENT, purpose="summary", parent_call=work.call_id,
    )
    call.side = side
    if capped:
        refused = await _reserve(rt, side, bound)
        if refused:
            return _Attempt(failure=refused, over_cap=True)
    leasing = request_lease(rt, call)
    try:
        verdict = await admit(rt, side)
    except Unavailable as exc:
        return_lease(rt, call, leasing)
        logger.warning("summary call {}: not admitted: {}", call.call_id, exc)
        return _Attempt(failure="not recorded")
    except BaseException:
        return_lease(rt, call, leasing)
        raise
    if isinstance(verdict, AdmissionRefused):  # side calls skip the stages; defensive
        return_lease(rt, call, leasing)
        return _Attempt(failure=f"refused ({verdict.status})")
    try:
        try:
            lease = await take_lease(call, leasing)
        except (NoCredential, ActorUnavailable) as exc:
            await complete(rt, call, call.outcome("no_credential", error=str(exc)))
            return _Attempt(failure="no key", unusable="provider")
        headers = forwarded_headers({}, adapter.auth_headers(lease.secret))
        return await _send(rt, call, provider, body, headers, timeout_s,
                           answer_max_bytes(work.max_chars))
    except asyncio.CancelledError:
        await asyncio.shield(complete(rt, call, call.outcome(
            "cancelled", error="cancelled before the summary came")))
        raise


async def _reserve(rt: Runtime, side: CallRequest, bound: int) -> str:
    """Hold the side call's worst case against the session's caps; why not, or ``""``.

    The ledger prices ``side`` at its provider and model as it prices a client's call
    (the prompt's estimate, the output bound its body states, the model's price) and
    reserves it in the session's scopes under the side call's id, which the completion
    settles (module doc).
    """
    priced = msgspec.structs.replace(side, body=_Limits({"max_tokens": bound}))
    try:
        decided = await ask(rt.ledger, ReserveRoute(priced, side.provider, side.model))
    except ActorUnavailable as exc:
        # A cap is never passed by because its keeper is down.
        logger.warning("summary call {}: its cost cannot be held: {}", side.call_id, exc)
        return "spend cap: the ledger cannot hold the summary's cost; not sent"
    except asyncio.CancelledError:
        _release(rt, side.call_id)  # it may have been reserved before the cancellation
        raise
    if isinstance(decided, Reservation):
        return ""
    assert isinstance(decided, Refusal), decided
    return f"spend cap ({decided.code}): {decided.message}"


def _release(rt: Runtime, call_id: str) -> None:
    try:
        tell(rt.ledger, ReleaseReservation(call_id))
    except Exception:
        pass  # a restarted ledger rebuilt its spend from the log: nothing is held


async def _read_bounded(response: UpstreamResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body (more, and it is not read on), and whether whole.

    A declared length over the limit is not read at all. The bytes come in chunks, so no
    more than the limit and one chunk are ever held.
    """
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        return b"", False
    data = bytearray()
    async for chunk in response.content.iter_any():
        data += chunk
        if len(data) > limit:
            return bytes(data[:limit]), False
    return bytes(data), True


async def _send(rt: Runtime, call: ProxiedCall, provider: ProviderConfig, body: bytes,
                headers: dict[str, str], timeout_s: float, limit: int) -> _Attempt:
    """Send the prompt, read the answer (at most ``limit`` bytes), record the completion."""
    try:
        async with asyncio.timeout(timeout_s):
            call.sent_at = rt.clock.now()  # sent: it may be billed (kept under a cap)
            response = await rt.upstream.post(provider, PATH, body, headers)
            try:
                data, whole = await _read_bounded(response, limit)
            except BaseException:
                response.close()  # unread: the connection cannot go back to the pool
                raise
            if whole:
                response.release()
            else:
                response.close()  # the rest is not read: the connection is dropped
    except TimeoutError:
        await complete(rt, call, call.outcome(
            "timeout", error=f"no summary within {timeout_s:g} s"))
        return _Attempt(failure="timeout")
    except aiohttp.ClientError as exc:
        await complete(rt, call, call.outcome(
            "unreachable", error=f"the upstream provider is unreachable ({type(exc).__name__})"))
        return _Attempt(failure="unreachable")
    status = response.status
    limits = rate_limit_headers(response.headers)
    if status >= 300:
        error = default_redactor.redact(data[:4096].decode(errors="replace"))
        missing = status == 404 or any(mark in error.lower() for mark in _MISSING)
        await complete(rt, call, call.outcome(
            "upstream_error", status=status, rate_limit_headers=limits,
            error=error[:_ERROR_CHARS]))
        if missing:
            return _Attempt(failure="model not found", unusable="model")
        return _Attempt(failure=f"upstream {status}")
    if not whole:
        # It answered, so it billed: recorded with an estimate of what was read.
        await complete(rt, call, call.outcome(
            "ok", status=status, has_output=True, output_chars=len(data),
            rate_limit_headers=limits,
            error=f"the answer is larger than {limit >> 10} KiB; not read further"))
        return _Attempt(failure=f"answer over {limit >> 10} KiB")
    try:
        # Decoded off the loop: even a bounded answer is a few hundred KiB of JSON.
        text, usage = await asyncio.to_thread(read_answer, data)
    except MalformedResponse as exc:
        # It answered, so it may have billed: recorded with an estimate of its tokens.
        await complete(rt, call, call.outcome(
            "ok", status=status, has_output=True, rate_limit_headers=limits, error=str(exc)))
        return _Attempt(failure="malformed answer")
    await complete(rt, call, call.outcome(
        "ok", status=status, usage_block=usage, has_output=True, output_chars=len(text),
        rate_limit_headers=limits))
    return _Attempt(text=text)
