"""The model summariser's performer: a side call to an upstream model, metered like any call.

When the compression stage wants a model to write a summary it asks for a
:class:`~sessionwarden.domain.summariser.SummaryWork`; the proxy finds this module's
:func:`summarise` among the runtime's performers (:func:`summary_performers`), awaits it
on the event loop, and resumes the admission with its
:class:`~sessionwarden.domain.summariser.SummaryResult`.

The summary is asked for exactly as a client's call is forwarded, so it is governed by
the same ledger: a :class:`~sessionwarden.domain.calls.CallRequest` with ``purpose
"summary"`` and ``parent_call`` (the waiting call) is admitted in the session — its
CallAdmitted is durable before anything is sent (side calls skip the admission stages)
— a pooled key is leased, the prompt is sent through the daemon's upstream client, and
the call is completed with its status and usage, whatever happens, so its tokens are
metered and its key's outcome counts. What is sent is redacted first (the prompt quotes
tool output, which may hold a key); so is the answer.

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
from functools import partial
from typing import NamedTuple

import aiohttp
from loguru import logger
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import AdmissionRefused
from sessionwarden.cmd.calls import (
    ProxiedCall,
    admit,
    complete,
    request_lease,
    return_lease,
    take_lease,
)
from sessionwarden.cmd.runtime import Performer, Runtime
from sessionwarden.config import ProviderConfig
from sessionwarden.domain.calls import CallRequest, RequestShape
from sessionwarden.domain.errors import NoCredential
from sessionwarden.domain.ratelimits import rate_limit_headers
from sessionwarden.domain.summariser import SummaryResult, SummaryWork, accept_summary
from sessionwarden.redact import default_redactor
from sessionwarden.store.errors import StoreError
from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.client import forwarded_headers
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
        accepted = accept_summary(default_redactor.redact(attempt.text), work.max_chars)
        if accepted is not None:
            return SummaryResult(accepted, name, "", used_fallback)
        attempt = _Attempt(failure="empty summary")
    logger.warning("summary for call {} by {} failed: {}", work.call_id, name, attempt.failure)
    return SummaryResult("", name, attempt.failure, used_fallback)


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
    system = default_redactor.redact(work.system)
    prompt = default_redactor.redact(work.prompt)
    body = prompt_body(model, system, prompt, work.max_output_tokens)
    call = ProxiedCall(work.session_id, provider, model, stream=False)
    side = CallRequest(
        call_id=call.call_id, session_id=work.session_id, provider=provider.name,
        model=model, api_mode=provider.api_mode,
        shape=RequestShape(model=model, message_count=2,
                           prompt_chars=len(system) + len(prompt)),
        body=None, client=CLIENT, purpose="summary", parent_call=work.call_id,
    )
    leasing = request_lease(rt, call)
    try:
        verdict = await admit(rt, side)
    except (ActorUnavailable, StoreError) as exc:
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
        return await _send(rt, call, provider, body, headers, timeout_s)
    except asyncio.CancelledError:
        await asyncio.shield(complete(rt, call, call.outcome(
            "cancelled", error="cancelled before the summary came")))
        raise


async def _send(rt: Runtime, call: ProxiedCall, provider: ProviderConfig, body: bytes,
                headers: dict[str, str], timeout_s: float) -> _Attempt:
    """Send the prompt, read the whole answer, record the call's completion."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await rt.upstream.post(provider, PATH, body, headers)
            try:
                data = await response.read()
            except BaseException:
                response.close()  # unread: the connection cannot go back to the pool
                raise
            response.release()
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
    try:
        text, usage = read_answer(data)
    except MalformedResponse as exc:
        # It answered, so it may have billed: recorded with an estimate of its tokens.
        await complete(rt, call, call.outcome(
            "ok", status=status, has_output=True, rate_limit_headers=limits, error=str(exc)))
        return _Attempt(failure="malformed answer")
    await complete(rt, call, call.outcome(
        "ok", status=status, usage_block=usage, has_output=True, output_chars=len(text),
        rate_limit_headers=limits))
    return _Attempt(text=text)
