"""The control API, for agents that integrate explicitly: a session's status, and compact now.

The routes read the log (in a worker thread) or ask the running actors, and answer JSON;
each route, its body and its answers are below.

Rules:

- ``GET /v1/sessions/{id}``: the session's status, the JSON of
  ``sessionwarden status --session ID --json`` (``views/session_status.py``), its budget
  the UsageLedgerActor's live figures; 404 for a session the log does not have. The
  stream is read in a worker thread: the event loop
  never waits on SQLite.
- ``POST /v1/sessions/{id}/compact``, with an optional JSON body ``{"focus": "..."}``
  (a topic the summary should keep: at most 500 printable characters, and no API key
  or token: a focus the redactor would change is refused with 400, as ``keys`` refuses
  a key where a name belongs, since a focus is stored in the log, echoed back and sent
  to the summariser): asks the
  session's actor to compress the session's history, and answers 202 once the request is
  durable (a ``CompactionRequested`` event). The compression happens at the session's
  next call: the daemon keeps hashes of a stateless client's history, not the history,
  so the next request is what brings the messages to compress. 404 for an unknown session,
  503 when its actor or the log cannot take the request.
- ``GET /v1/sessions/{id}/budget``: the session's cap and its subtree's money as the
  UsageLedgerActor holds them now (reservations of calls in flight included; the log's
  figures while no cap applies, since calls then do not pass the ledger):
  ``{"session_id", "cap", "spent", "reserved", "left", "unknown_calls", "parent"}``,
  amounts exact decimal strings, ``cap``/``left`` null without a cap.
- ``PUT /v1/sessions/{id}/budget`` with ``{"session_usd": "2.50"}`` sets that session's
  cap (it holds the session and every child naming it in ``X-Session-Parent``), and
  ``{"session_usd": null}`` lifts it for that session; the amount is a decimal *string*
  (a JSON number is inexact), above 0, at most :data:`MAX_SESSION_USD`, in steps of
  :data:`CAP_STEP_USD` at the finest. Answers the budget as GET does, once the
  SessionCapSet event is durable; the next call is judged by it.

- ``POST /v1/sessions/{id}/iterations`` with ``{"consume": n}`` and/or ``{"refund": n}``
  (whole numbers, 0 to :data:`MAX_ITERATIONS_STEP`): counts iterations of the session's
  current turn that the daemon cannot see (an agent's own tool runs), or gives some back
  (never below zero); answers ``{"session_id", "used", "budget", "remaining"}`` once the
  IterationsAdjusted event is durable (``budget``/``remaining`` null when unlimited); 404
  for a session with no counted call yet.

- ``GET /v1/keys``: the leases in flight of every key, as the running pool holds them
  (the log records calls, not leases): ``{"keys": [{"provider", "fingerprint",
  "in_flight"}]}``. ``sessionwarden keys list`` asks it when a daemon runs beside it.

Auth is the daemon's: like every path but ``/healthz``, these need ``Authorization:
Bearer <token>`` (checked in ``cmd/daemon/server.py`` before routing, with the Host check), and
the daemon listens on loopback unless started with ``--allow-remote``. Session ids follow
the proxy's ``X-Session-Id`` rule. Errors are OpenAI-shaped JSON, as everywhere else.
"""

import asyncio
import re
from decimal import Decimal, InvalidOperation

import msgspec
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.messages import (
    AdjustIterations,
    BudgetOf,
    LeasesInFlight,
    RequestCompaction,
    SetSessionCap,
)
from sessionwarden.cmd.daemon.http import ASGIReceive, ASGISend, read_body, send_error, send_json
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.cmd.errors import BodyTooLarge
from sessionwarden.errors import Unavailable
from sessionwarden.redact import default_redactor
from sessionwarden.store.errors import StoreError
from sessionwarden.views.budget_status import read_budget
from sessionwarden.views.session_status import read_status, status_json

__all__ = ["CONTROL_PREFIX", "KEYS_PATH", "MAX_FOCUS_CHARS", "MAX_ITERATIONS_STEP", "SESSION_ID",
           "control", "keys"]

#: The keys' leases in flight.
KEYS_PATH = "/v1/keys"
#: Every other control path starts so; the session id follows.
CONTROL_PREFIX = "/v1/sessions/"
#: The longest ``focus`` accepted, in characters.
MAX_FOCUS_CHARS = 500
#: A session id: the proxy's rule for ``X-Session-Id``.
SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
#: A compact request's body is a short JSON object; anything larger is refused (413).
_MAX_BODY = 16 * 1024


class _CompactBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    focus: str = ""


_decode_compact = msgspec.json.Decoder(_CompactBody).decode


class _BudgetBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    session_usd: str | None


_decode_budget = msgspec.json.Decoder(_BudgetBody).decode
#: The largest session cap accepted, in USD (a typo's extra zeros are refused).
MAX_SESSION_USD = Decimal(1_000_000)
#: The finest step a session cap may have, in USD: a cap of ``1e-1000000`` would be
#: written out as a megabyte of zeros by every view of it, and no price is that fine.
CAP_STEP_USD = Decimal("1e-10")
#: Each action after the session id, and the methods it answers.
_ROUTES = {"": ("GET",), "compact": ("POST",), "budget": ("GET", "PUT"),
           "iterations": ("POST",)}
#: The most iterations one request may consume or refund.
MAX_ITERATIONS_STEP = 10_000


async def control(rt: Runtime, method: str, path: str, receive: ASGIReceive,
                  send: ASGISend) -> None:
    """Serve a request whose ``path`` starts with :data:`CONTROL_PREFIX` (already authorised)."""
    session_id, slash, action = path[len(CONTROL_PREFIX):].partition("/")
    methods = _ROUTES.get(action) if slash or not action else None
    if methods is None or (slash and not action):
        await send_error(send, 404, f"no route for {method} {path}", code="not_found")
        return
    if not SESSION_ID.fullmatch(session_id):
        await send_error(send, 400, "a session id is 1-128 characters of A-Z a-z 0-9 . _ : @ -",
                         code="invalid_session_id")
        return
    if method not in methods:
        allowed = ", ".join(methods)
        await send_error(send, 405, f"use {allowed}", headers=[(b"allow", allowed.encode())])
        return
    if action == "compact":
        await _compact(rt, session_id, receive, send)
    elif action == "budget":
        await _budget(rt, session_id, method, receive, send)
    elif action == "iterations":
        await _iterations(rt, session_id, receive, send)
    else:
        await _status(rt, session_id, send)


async def keys(rt: Runtime, method: str, send: ASGISend) -> None:
    """Serve ``GET /v1/keys`` (already authorised): each key's leases in flight."""
    if method != "GET":
        await send_error(send, 405, "use GET", headers=[(b"allow", b"GET")])
        return
    try:
        pools: dict[str, dict[str, int]] = await ask(rt.credentials, LeasesInFlight())
    except ActorUnavailable as exc:
        await _unavailable(send, "read its key pool", exc)
        return
    await send_json(send, 200, {"keys": [
        {"provider": provider, "fingerprint": fp, "in_flight": n}
        for provider, leases in pools.items() for fp, n in leases.items() if fp]})


async def _unavailable(send: ASGISend, what: str, exc: Exception) -> None:
    await send_error(send, 503, f"sessionwarden cannot {what} right now ({exc})",
                     kind="server_error", code="unavailable", headers=[(b"retry-after", b"1")])


async def _status(rt: Runtime, session_id: str, send: ASGISend) -> None:
    try:
        status = await asyncio.to_thread(read_status, rt.log, rt.config, session_id,
                                         rt.clock.now())
    except StoreError as exc:
        await _unavailable(send, "read its event log", exc)
        return
    if status is None:
        await send_error(send, 404, f"no session {session_id!r}", code="session_not_found")
        return
    if rt.caps_active:  # the ledger's live figures count calls in flight too
        try:
            live = await ask(rt.ledger, BudgetOf(session_id))
            status = msgspec.structs.replace(status, budget=live)
        except Unavailable:
            pass  # the log's figures stand
    await send_json(send, 200, status_json(status))


class _IterationsBody(msgspec.Struct, forbid_unknown_fields=True):
    consume: int = 0
    refund: int = 0


_decode_iterations = msgspec.json.Decoder(_IterationsBody).decode


async def _iterations(rt: Runtime, session_id: str, receive: ASGIReceive,
                      send: ASGISend) -> None:
    body = await _small_body(receive, send)
    if body is None:
        return
    try:
        asked = _decode_iterations(body or b"{}")
    except msgspec.DecodeError as exc:
        await send_error(send, 400, f"expected {{\"consume\": n}} or {{\"refund\": n}}: {exc}",
                         code="invalid_iterations")
        return
    if not (0 <= asked.consume <= MAX_ITERATIONS_STEP and 0 <= asked.refund
            <= MAX_ITERATIONS_STEP) or not (asked.consume or asked.refund):
        await send_error(send, 400, "consume and refund are whole numbers from 0 to "
                         f"{MAX_ITERATIONS_STEP:,}, at least one above 0",
                         code="invalid_iterations")
        return
    try:
        turn = await ask(rt.session_ref(session_id), AdjustIterations(
            session_id, asked.consume, asked.refund))
    except Unavailable as exc:
        await _unavailable(send, "record the iterations", exc)
        return
    if turn is None:
        await send_error(send, 404, f"session {session_id!r} has no turn yet (no call "
                         "counted)", code="no_turn")
        return
    remaining = max(0, turn.limit - turn.used) if turn.limit > 0 else None
    await send_json(send, 200, {"session_id": session_id, "used": turn.used,
                                "budget": turn.limit or None, "remaining": remaining})


async def _small_body(receive: ASGIReceive, send: ASGISend) -> bytes | None:
    """The request's body, at most :data:`_MAX_BODY` bytes; None once an error was sent."""
    try:
        return await read_body(receive, _MAX_BODY)
    except BodyTooLarge:
        await send_error(send, 413, f"body exceeds {_MAX_BODY} bytes", code="body_too_large")
    except ConnectionAbortedError:
        pass  # the client is gone: nobody to answer
    return None


async def _focus(receive: ASGIReceive, send: ASGISend) -> str | None:
    """The request's focus ("" without a body), or None once an error has been sent."""
    body = await _small_body(receive, send)
    if body is None:
        return None
    if not body.strip():
        return ""
    try:
        focus = _decode_compact(body).focus
    except msgspec.DecodeError as exc:  # ValidationError included: wrong type, unknown key
        await send_error(send, 400, f'expected a JSON object {{"focus": "<topic>"}}: {exc}',
                         code="invalid_body")
        return None
    if len(focus) > MAX_FOCUS_CHARS or not focus.isprintable():
        await send_error(send, 400, f"focus must be at most {MAX_FOCUS_CHARS} printable "
                         "characters (no line breaks or control characters)",
                         code="invalid_focus")
        return None
    if default_redactor.redact(focus) != focus:
        # Refused, not redacted: a focus is the client's words, stored in the log, echoed
        # in the 202 and in the session's status, and sent to the summariser; a key there
        # is a mistake to be told about, and the error never repeats the focus.
        await send_error(send, 400, "focus looks like it holds an API key or token (a key "
                         "the daemon uses, sk-…, Bearer …, api_key=…); it would be stored "
                         "and sent on: name the topic without it", code="invalid_focus")
        return None
    return focus


async def _compact(rt: Runtime, session_id: str, receive: ASGIReceive, send: ASGISend) -> None:
    focus = await _focus(receive, send)
    if focus is None:
        return
    try:
        known = await ask(rt.session_ref(session_id), RequestCompaction(session_id, focus))
    except Unavailable as exc:
        await _unavailable(send, "record the request", exc)
        return
    if not known:
        await send_error(send, 404, f"no session {session_id!r}", code="session_not_found")
        return
    await send_json(send, 202, {"session_id": session_id, "scheduled": True, "focus": focus})


async def _cap(receive: ASGIReceive, send: ASGISend) -> tuple[Decimal | None] | None:
    """The cap a PUT asks for (in a 1-tuple: None lifts it), or None once an error was sent."""
    body = await _small_body(receive, send)
    if body is None:
        return None
    expected = 'expected a JSON object {"session_usd": "<USD as a decimal string>" or null}'
    try:
        text = _decode_budget(body).session_usd
    except msgspec.DecodeError as exc:  # ValidationError included: a number, a missing key
        await send_error(send, 400, f"{expected}: {exc}", code="invalid_body")
        return None
    if text is None:
        return (None,)
    try:
        usd = Decimal(text.strip())
    except InvalidOperation:
        usd = Decimal("NaN")
    # Bounded first, so the quantize below has the precision it needs (17 digits).
    if (not usd.is_finite() or usd <= 0 or usd > MAX_SESSION_USD
            or usd != usd.quantize(CAP_STEP_USD)):
        await send_error(send, 400, f"session_usd must be a decimal string above 0 and at most "
                         f"{MAX_SESSION_USD}, with at most 10 decimal places, such as \"2.50\" "
                         "(null lifts the cap)", code="invalid_cap")
        return None
    return (usd,)


async def _budget(rt: Runtime, session_id: str, method: str, receive: ASGIReceive,
                  send: ASGISend) -> None:
    message: BudgetOf | SetSessionCap = BudgetOf(session_id)
    if method == "GET" and not rt.caps_active:
        # No cap applies, so calls do not pass the ledger: the log has the figures.
        try:
            found = await asyncio.to_thread(read_budget, rt.log, rt.config, session_id)
        except StoreError as exc:
            await _unavailable(send, "read its event log", exc)
            return
        await send_json(send, 200, msgspec.to_builtins(found))
        return
    if method == "PUT":
        cap = await _cap(receive, send)
        if cap is None:
            return
        message = SetSessionCap(session_id, cap[0])
        # From now on every call passes the ledger, and every completion tells it: set
        # before the ledger folds the log, so a call recorded after that fold is told.
        rt.caps_set = True
    try:
        budget = await ask(rt.ledger, message)
    except Unavailable as exc:
        await _unavailable(send, "reach its spend ledger", exc)
        return
    await send_json(send, 200, msgspec.to_builtins(budget))
