"""Sessions' parents as the spend caps follow them: the bound, cycles, and refusing both.

Issue 21 §4. A session named with ``X-Session-Parent`` draws from its parent's cap and
each ancestor's (``domain.cost.caps``), so a recursive subagent loop stays under the cap
of the session that started it. The walk up a lineage is bounded by
:data:`MAX_ANCESTRY` (a call walks it to reserve). A parent past the bound used to be
ignored: the session became a root, free of every cap above it, so a loop 65 deep or
more escaped the root's cap (depth 64-1,000 answered 200 with the root cap used up).

The decision: such a call is **refused** (400 ``session_parent_too_deep``, naming the
bound and the chain), and so is a parent that would make a cycle (400
``session_parent_cycle``): the caps above cannot hold the session's calls, and a
recursive loop is exactly what a cap is for. Counting a too-deep session against its
top ancestors instead would hold the root's cap but not the caps of the sessions in
between, which the control API may set on any of them. Refused, the link is *cut*
(:class:`Cut`): the session keeps no parent the ledger walks, its first call's
SessionStarted still records the parent it named (what the client said, so a restart
cuts it again, :func:`cut_links`), and every later call of it, or of any session below
it, is refused the same way (:func:`inherited_refusal`) — a retry without the header,
or a child of it, would otherwise be a new root again.

The UsageLedgerActor applies this while a cap applies (it is not on a call's path
otherwise, and nothing can escape a cap that does not exist). A chain recorded while no
cap applied is cut at the same link when the first cap folds the log; the money its
sessions spent is still counted in every ancestor (``domain.cost.caps.rebuild`` sums
subtrees over every recorded link but a cycle's).

Pure: sessions are their ids, parents a mapping of each session to its first-named one.
"""

from collections.abc import Mapping

import msgspec

__all__ = [
    "CODE_PARENT_CYCLE",
    "CODE_PARENT_TOO_DEEP",
    "MAX_ANCESTRY",
    "Cut",
    "ParentRefusal",
    "chain",
    "cut_links",
    "inherited_refusal",
    "parent_refusal",
]

#: The longest chain of sessions, a session and its ancestors (no real agent nests this
#: deep; it bounds the walk a call makes up its lineage to reserve).
MAX_ANCESTRY = 64
CODE_PARENT_TOO_DEEP = "session_parent_too_deep"
CODE_PARENT_CYCLE = "session_parent_cycle"
#: How many sessions of a chain a message shows (first and last ones; the rest elided).
_SHOWN = 6


class Cut(msgspec.Struct, frozen=True):
    """A session's parent link the caps cannot follow: the ``parent`` it named, and why."""

    parent: str
    code: str


class ParentRefusal(msgspec.Struct, frozen=True, kw_only=True):
    """The call must not be sent: its session's lineage is cut (HTTP 400).

    Shaped as ``domain.cost.caps.Refusal`` is where the ``budgets`` stage reads it.
    """

    status: int = 400
    kind: str = "invalid_request_error"
    code: str
    message: str
    retry_after_s: int | None = None


def chain(parents: Mapping[str, str], session_id: str) -> list[str]:
    """``session_id``, then each ancestor, nearest first.

    ``parents`` is acyclic and each chain at most :data:`MAX_ANCESTRY` long when built by
    these rules; the walk still stops at a repeated session, so a map built otherwise
    cannot make it loop.
    """
    walked = [session_id]
    seen = {session_id}
    current = parents.get(session_id, "")
    while current and current not in seen:
        walked.append(current)
        seen.add(current)
        current = parents.get(current, "")
    return walked


def _show(sessions: list[str]) -> str:
    if len(sessions) > _SHOWN:
        sessions = [*sessions[:_SHOWN - 2], "...", *sessions[-1:]]
    return " -> ".join(sessions)


def _fault(parents: Mapping[str, str], session_id: str, parent_id: str
           ) -> tuple[str, list[str]] | None:
    """Why ``parent_id`` cannot be ``session_id``'s parent (code, the parent's chain)."""
    above = chain(parents, parent_id)
    if session_id in above:
        return CODE_PARENT_CYCLE, above
    if len(above) >= MAX_ANCESTRY:
        return CODE_PARENT_TOO_DEEP, above
    return None


def parent_refusal(parents: Mapping[str, str], session_id: str,
                   parent_id: str) -> ParentRefusal | None:
    """The refusal of ``session_id`` naming ``parent_id``, or None when the link holds.

    Refused: a parent that descends from the session (a cycle), or one whose chain is
    :data:`MAX_ANCESTRY` sessions long already (the session would be one more). An empty
    parent, or the session itself, is no link at all, as without the header.
    """
    if not parent_id or parent_id == session_id:
        return None
    fault = _fault(parents, session_id, parent_id)
    if fault is None:
        return None
    code, above = fault
    if code == CODE_PARENT_CYCLE:
        loop = above[:above.index(session_id) + 1]
        message = (f"X-Session-Parent {parent_id} refused: session {parent_id} descends "
                   f"from session {session_id} ({_show(loop)}), so it cannot be its parent "
                   "too (a cycle, which no cap could follow); not sent")
    else:
        message = (f"X-Session-Parent {parent_id} refused: session {session_id} would make "
                   f"a chain of {len(above) + 1} sessions ({_show([session_id, *above])}), "
                   f"and a chain of parents may be at most {MAX_ANCESTRY} long: the caps "
                   "of the sessions above could not hold its calls (a recursive subagent "
                   "loop is what a cap is for); not sent")
    return ParentRefusal(code=code, message=message)


def inherited_refusal(parents: Mapping[str, str], cuts: Mapping[str, Cut],
                      session_id: str) -> ParentRefusal | None:
    """The refusal of a call whose session, or an ancestor, has its parent link cut.

    A cut session has no parent in ``parents``, so it is the top of its chain: one
    look-up after the walk.
    """
    above = chain(parents, session_id)
    cut = cuts.get(above[-1])
    if cut is None:
        return None
    top = above[-1]
    why = ("it would make a cycle" if cut.code == CODE_PARENT_CYCLE else
           f"its chain of parents would be longer than {MAX_ANCESTRY} sessions")
    if top == session_id:
        message = (f"session {session_id}'s X-Session-Parent {cut.parent} was refused: "
                   f"{why}; the caps above cannot hold its calls, so none is sent")
    else:
        message = (f"session {session_id} descends from session {top} ({_show(above)}), "
                   f"whose X-Session-Parent {cut.parent} was refused: {why}; the caps "
                   "above cannot hold its calls, so none is sent")
    return ParentRefusal(code=cut.code, message=message)


def cut_links(parents: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Cut]]:
    """The links the caps follow, and those cut, from each session's first-named parent.

    ``parents`` in the order the sessions started: the order the ledger saw them live,
    so a link is cut here exactly when it was refused then. An empty parent or the
    session itself is no link at all (as without the header).
    """
    kept: dict[str, str] = {}
    cuts: dict[str, Cut] = {}
    for child, parent in parents.items():
        if not parent or parent == child:
            continue
        fault = _fault(kept, child, parent)
        if fault is None:
            kept[child] = parent
        else:
            cuts[child] = Cut(parent, fault[0])
    return kept, cuts
