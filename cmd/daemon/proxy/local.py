"""Calls the daemon answers itself: a turn whose iteration budget is spent, a guardrail stop.

The runaway stage (``domain.admission.runaway_stage``) decides; the call is admitted (its
CallAdmitted recorded, so replay and ``status`` find it), never sent, and answered here in
the client's format (``upstream.answers``): an ordinary answer with an ordinary stop, so
an agent's loop ends its turn cleanly, or with ``on_exhausted = "error"`` a 429 in the
door's error shape. Either way the answer carries ``x-sessionwarden-refused`` and the
call's ledger row is recorded first (outcome ``answered``, no upstream, no cost).

It also tells a child session's parent that one of the child's calls was counted: a
fan-out of subagents counts against the parent's turn (``views/turns.py``).
"""

from loguru import logger
from sessionwarden.actors.bridge import tell
from sessionwarden.actors.messages import CountChild
from sessionwarden.cmd.daemon.http import ASGISend, send_error
from sessionwarden.cmd.daemon.proxy.calls import ProxiedCall, complete
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.domain.calls import CallRequest, LocalReply
from sessionwarden.errors import Unavailable
from sessionwarden.upstream.answers import local_answer
from sessionwarden.views.turns import turn_of

__all__ = ["REFUSED_HEADER", "answer_locally", "count_in_parent", "known_parent",
           "parent_turn"]

#: The header that says the daemon answered a call itself, and why.
REFUSED_HEADER = b"x-sessionwarden-refused"
#: Sessions whose parent (or its absence) is remembered between calls.
_PARENTS_KEPT = 4096


def known_parent(rt: Runtime, session_id: str) -> str:
    """The parent ``session_id`` started with (``X-Session-Parent`` on its first call).

    A subagent may name its parent on its first call only; the log remembers it
    (``view_session_parents``), read once per session and kept for the next calls.
    """
    cache = rt.parents
    found = cache.get(session_id)
    if found is not None:
        cache.move_to_end(session_id)
        return found
    row = rt.log.read_connection().execute(
        "SELECT p.parent FROM view_sessions s LEFT JOIN view_session_parents p"
        " ON p.session_id = s.session_id WHERE s.session_id = ?", (session_id,)).fetchone()
    if row is None:
        return ""  # not started yet: its first call names its parent, or it has none
    # A session starts once: its parent, or its having none, never changes.
    cache[session_id] = found = str(row[0] or "")
    while len(cache) > _PARENTS_KEPT:
        cache.popitem(last=False)
    return found


def parent_turn(rt: Runtime, parent: str) -> tuple[int, int] | None:
    """The parent session's turn as the log knows it, ``(used, budget)``."""
    return turn_of(rt.log.read_connection(), parent) if parent else None


def count_in_parent(rt: Runtime, call: ProxiedCall, admitted: CallRequest) -> None:
    """Count a child's counted call in its parent's turn (a resend is not counted)."""
    if not call.parent or admitted.guards is None or admitted.reply is not None:
        return
    try:
        tell(rt.session_ref(call.parent), CountChild(call.parent, call.session_id,
                                                     call.call_id))
    except Unavailable as exc:  # the child's call goes on; the parent's count is short
        logger.warning("call {}: not counted in parent session {}: {}", call.call_id,
                       call.parent, exc)


async def answer_locally(rt: Runtime, call: ProxiedCall, admitted: CallRequest,
                         reply: LocalReply, ids: list[tuple[bytes, bytes]],
                         send: ASGISend) -> None:
    """Record the call as answered by the daemon, then answer it (module doc)."""
    refused = (REFUSED_HEADER, reply.refused.encode())
    recorded = await complete(rt, call, call.outcome(
        "answered", status=reply.status, error=f"answered by sessionwarden: {reply.refused}"))
    if not recorded:
        await send_error(send, 503, "sessionwarden could not record this call; nothing was "
                         "sent upstream", kind="server_error", code="not_recorded",
                         headers=[*ids, refused])
        return
    if reply.status != 200:
        await send_error(send, reply.status, reply.text, kind="rate_limit_error",
                         code=reply.code or None, headers=[*ids, refused])
        return
    shape = admitted.shape
    answer = local_answer(admitted.api_mode, call.call_id, shape.model, reply.text,
                          created=int(rt.clock.now().timestamp()), stream=shape.stream)
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", answer.content_type),
        (b"content-length", str(len(answer.body)).encode()), *ids, refused]})
    await send({"type": "http.response.body", "body": answer.body})
