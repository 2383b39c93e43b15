"""Spend caps reserved before sending: each scope's spent and reserved money, and the rules.

Issue 12, "Spend caps". The UsageLedgerActor owns one :class:`Spend` and asks
:func:`reserve` before a call is admitted; a call whose worst-case cost does not fit
every cap it draws from is refused *without being sent* (a :class:`Refusal`, HTTP 402).
After the response :func:`settle` turns the reservation into the real cost; a call that
failed or was cancelled before costing anything is freed by :func:`release`.

Rules:

The overview: docs/architecture/costs-and-caps.md, 'Spend caps'.

Everything here is pure: the time is an argument, the state is a frozen value and every function
returns a new one. The actor serialises the calls, so reservation is atomic: 20
concurrent calls against a cap that fits 5 get 5 reservations and 15 refusals
(peers.md, pain point 11: budgets overshot under concurrency). The rules:

- **Worst case**: the caller computes it with ``sessionwarden.domain.cost.worst_case`` (the
  estimated input and the output bound at their prices, exact Decimal) and passes it in
  :class:`BudgetCall`; None means the model has no price.
- **Scopes** (:class:`Scope`): a call draws from its session, from each ancestor session
  (a child named by ``X-Session-Parent`` draws from its parent's cap, recursively, so
  an agent's subagents cannot escape it: DESIGN.md §4; :func:`adopt` records a parent
  and moves the child's subtree money into the new ancestors), from its provider's daily cap
  and from the daily cap, the day being the UTC day of ``now``. A session's tally is its
  subtree's spend. Every scope must fit ``spent + reserved + worst case <= cap``.
- **Refusal codes**: ``request_exceeds_cap`` when the worst case alone is above a cap
  (retrying cannot help), else ``cap_exhausted``; ``retry_after_s`` (seconds to the next
  UTC midnight) only when the daily caps are the only ones in the way; an unpriced model
  under any cap is refused with ``unpriced_model`` unless ``Caps.allow_unpriced`` (then
  it reserves $0 and its settled cost, or ``unknown``, is counted afterwards).
  Messages name the cap and the amounts, rounded for display (``~$0.0046``,
  ``~$<0.0001``, as hermes-behaviour.md §3.3's label; #79220: sub-cent costs shown as
  $0.00) and say so; the cap itself is shown exactly.

Decisions where the issue is silent:

- An unknown actual cost (``settle(..., None)``) keeps the reserved worst case as spent:
  the cap must hold and nothing proves the call cost less; the tally counts it in
  ``unknown`` so views can say the figure is an upper bound. The ledger still records the
  call's cost as ``unknown``: only the budget is conservative.
- A reservation settles into the day scopes it was reserved in (a call reserved at 23:59
  UTC and answered at 00:01 is spent on the day it was sent) and into its session's
  ancestors as known when it settles (an adoption in between moved it there).
- The per-provider cap is per UTC day (an all-time cap over the log would block a
  provider for ever once reached); a provider's prepaid balance is the credits tracker's.
- A session's parent is the first one named for it and never changes; a parent that would
  make a cycle, or a chain above :data:`MAX_ANCESTRY` sessions, is not adopted, and the
  ledger refuses the session's calls (``domain.cost.lineage``, issue 21 §4: ignored, it made
  the session a root free of the caps above). A parent may become known after its
  child spent (a subagent's subagent calls before its parent did): :func:`adopt` then
  adds the subtree's spent and reserved money to every new ancestor, even past its cap
  (the money is gone); the ancestor's cap then refuses the next call anywhere in its
  subtree.
- Reserving a call id that already holds a reservation returns that reservation
  unchanged (a retried admission must not reserve twice); settling or releasing one that
  holds none raises :class:`~sessionwarden.domain.errors.UnknownCall`.
- A stream cancelled after the provider started billing is settled with its partial
  cost (or None), not released: :func:`release` is for calls that cost nothing.
- A call sent to its model's fallback route is a new call to the caps (issue 21 §5):
  :func:`move` replaces its reservation with the route's worst case in the route's
  scopes, or refuses it and leaves the first one held. A reservation carries the output
  bound its amount holds, which the proxy reads a stream no further than.
- A past day's tallies are dropped at the first reservation of a new day once nothing is
  reserved in them (the ledger, not this state, answers questions about past days).
"""

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

import msgspec
from sessionwarden.domain.cost.lineage import CODE_PARENT_TOO_DEEP, MAX_ANCESTRY, cut_links
from sessionwarden.domain.errors import UnknownCall

__all__ = [
    "CODE_CAP_EXHAUSTED",
    "CODE_REQUEST_EXCEEDS_CAP",
    "CODE_UNPRICED_MODEL",
    "MAX_ANCESTRY",
    "BudgetCall",
    "Caps",
    "Refusal",
    "Reservation",
    "Reserved",
    "Scope",
    "Spend",
    "Tally",
    "adopt",
    "charge",
    "display_usd",
    "move",
    "rebuild",
    "release",
    "reserve",
    "settle",
]


CODE_REQUEST_EXCEEDS_CAP = "request_exceeds_cap"
CODE_CAP_EXHAUSTED = "cap_exhausted"
CODE_UNPRICED_MODEL = "unpriced_model"
_ZERO = Decimal(0)


class Scope(msgspec.Struct, frozen=True):
    """What a cap applies to.

    ``kind`` is ``"session"`` (``name`` its id; the session's whole subtree),
    ``"provider"`` (``name`` the provider, on UTC ``day``) or ``"day"`` (``name`` the UTC
    day, ``YYYY-MM-DD``).
    """

    kind: Literal["session", "provider", "day"]
    name: str
    day: str = ""

    def describe(self) -> str:
        """The cap's name in a message: ``session cap of session abc``."""
        if self.kind == "session":
            return f"session cap of session {self.name}"
        if self.kind == "provider":
            return f"daily cap of provider {self.name} for {self.day} (UTC)"
        return f"daily cap for {self.name} (UTC)"


class Tally(msgspec.Struct, frozen=True):
    """A scope's money: ``spent`` (settled), ``reserved`` (in flight), ``unknown``.

    ``unknown`` counts the calls settled with an unknown cost: ``spent`` holds each at its
    reservation, the worst case (an upper bound), or $0 for an unpriced model allowed to
    run (then ``spent`` is a lower bound: views must say so).
    """

    spent: Decimal = _ZERO
    reserved: Decimal = _ZERO
    unknown: int = 0


class Caps(msgspec.Struct, frozen=True, kw_only=True):
    """The caps in USD; None is no cap.

    ``session_usd`` applies to every session (and its subtree) unless
    ``session_overrides`` names the session (set through the control API; an override of
    None lifts the cap for that session). ``provider_daily_usd`` maps a provider's name to
    its daily cap. ``allow_unpriced`` lets a model with no price run under a cap.
    """

    session_usd: Decimal | None = None
    session_overrides: dict[str, Decimal | None] = msgspec.field(default_factory=dict)
    daily_usd: Decimal | None = None
    provider_daily_usd: dict[str, Decimal] = msgspec.field(default_factory=dict)
    allow_unpriced: bool = False

    def cap(self, scope: Scope) -> Decimal | None:
        """The cap of ``scope``, None if it has none."""
        if scope.kind == "session":
            if scope.name in self.session_overrides:
                return self.session_overrides[scope.name]
            return self.session_usd
        if scope.kind == "provider":
            return self.provider_daily_usd.get(scope.name)
        return self.daily_usd


class BudgetCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call asking to reserve: ``worst_case`` None means its model has no price.

    Its session's parent is not here: :func:`adopt` records it, before the reservation.
    """

    call_id: str
    session_id: str
    provider: str
    worst_case: Decimal | None
    #: The output tokens the worst case counts (``domain.cost.worst_case.output_bound``): the
    #: proxy reads a stream no further (0: no bound known).
    output_bound: int = 0


class Reservation(msgspec.Struct, frozen=True):
    """Money held for one call in every scope it draws from, until settled or released.

    ``scopes`` are those it was reserved in (session, ancestors, provider's day, day);
    it settles in its session's lineage as known then, and the same two day scopes.
    ``output_bound`` is the output the amount holds (:attr:`BudgetCall.output_bound`).
    """

    call_id: str
    session_id: str
    amount: Decimal
    scopes: tuple[Scope, ...]
    unpriced: bool = False
    output_bound: int = 0


class Spend(msgspec.Struct, frozen=True):
    """Every scope's tally, the open reservations, the sessions' parents, the current day.

    Treat it as immutable (its dicts are never changed in place: every function returns
    a new :class:`Spend`). The tallies are spread over :data:`_BUCKETS` dicts by the
    scope's hash so that a new state copies only the few buckets a call touches: one dict
    of every session ever seen, copied whole, made a reservation and its settlement take
    200 us at 10,000 sessions (the issue allows 50 us for pricing and reservation);
    spread, a reservation takes about 12 us there and 100 us at 100,000 sessions.
    """

    buckets: dict[int, dict[Scope, Tally]] = msgspec.field(default_factory=dict)
    open: dict[str, Reservation] = msgspec.field(default_factory=dict)
    parents: dict[str, str] = msgspec.field(default_factory=dict)
    today: str = ""

    def tally(self, scope: Scope) -> Tally:
        """The tally of ``scope`` (zero if it never spent)."""
        return _get(self.buckets, scope)

    def knows(self, scope: Scope) -> bool:
        """Whether ``scope`` ever reserved or spent here (a released $0 counts)."""
        return scope in self.buckets.get(hash(scope) & _MASK, _NO_TALLIES)

    def tallies(self) -> dict[Scope, Tally]:
        """Every scope's tally, in one new dict (for views and tests: it reads them all)."""
        return {scope: tally for bucket in self.buckets.values()
                for scope, tally in bucket.items()}


_EMPTY = Tally()
_NO_TALLIES: dict[Scope, Tally] = {}
#: How many dicts the tallies are spread over (a power of two: a hash is masked).
_BUCKETS = 256
_MASK = _BUCKETS - 1


def _get(buckets: dict[int, dict[Scope, Tally]], scope: Scope) -> Tally:
    return buckets.get(hash(scope) & _MASK, _NO_TALLIES).get(scope, _EMPTY)


def _with_tallies(buckets: dict[int, dict[Scope, Tally]],
                  changes: dict[Scope, Tally]) -> dict[int, dict[Scope, Tally]]:
    """New buckets with ``changes`` applied; only the buckets they touch are copied."""
    new = dict(buckets)
    copied: set[int] = set()
    for scope, tally in changes.items():
        key = hash(scope) & _MASK
        if key not in copied:
            new[key] = dict(buckets.get(key, _NO_TALLIES))
            copied.add(key)
        new[key][scope] = tally
    return new


class Reserved(msgspec.Struct, frozen=True):
    """The call may be sent: ``spend`` holds ``reservation``."""

    spend: Spend
    reservation: Reservation


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """The call must not be sent: HTTP ``status`` with an OpenAI-shaped error.

    ``kind`` is the error's ``type`` and ``code`` its code; ``retry_after_s`` is set for a
    daily cap only (the ``Retry-After`` header). ``scope``, ``cap``, ``spent``,
    ``reserved`` and ``needed`` are the exact figures (``needed`` None: unpriced).
    """

    status: int = 402
    kind: str = "insufficient_quota"
    code: str
    message: str
    scope: Scope
    cap: Decimal
    spent: Decimal
    reserved: Decimal
    needed: Decimal | None
    retry_after_s: int | None = None


def display_usd(amount: Decimal) -> str:
    """An amount rounded for display: ``~$1.23``, ``~$0.0046``, ``~$<0.0001``, ``$0.00``."""
    if amount == 0:
        return "$0.00"
    if abs(amount) >= Decimal("0.01"):
        return f"~${amount:.2f}"
    shown = f"{amount:.4f}"
    return f"~${shown}" if Decimal(shown) != 0 else "~$<0.0001"


def _day(now: datetime) -> str:
    return now.astimezone(UTC).date().isoformat()


def _seconds_to_midnight(now: datetime) -> int:
    utc = now.astimezone(UTC)
    midnight = datetime.combine(utc.date() + timedelta(days=1), datetime.min.time(), UTC)
    return max(1, math.ceil((midnight - utc).total_seconds()))


def _lineage(parents: Mapping[str, str], session_id: str) -> list[Scope]:
    """The session's scope, then each ancestor's (:func:`adopt` keeps the map acyclic)."""
    chain = [Scope("session", session_id)]
    current = parents.get(session_id, "")
    while current:
        chain.append(Scope("session", current))
        current = parents.get(current, "")
    return chain


def adopt(spend: Spend, session_id: str, parent_id: str) -> Spend:
    """Record that ``session_id`` is a child of ``parent_id`` (``X-Session-Parent``).

    The first parent named for a session is kept; an empty one, a cycle, or a parent
    whose own chain is :data:`MAX_ANCESTRY` long changes nothing (the caller refuses the
    last two first: ``domain.cost.lineage.parent_refusal``). The child's subtree
    money (spent, reserved, unknown) joins the parent and each of its ancestors, so a
    parent learned late still counts what its new descendants already spent.
    """
    if not parent_id or parent_id == session_id or session_id in spend.parents:
        return spend
    above = _lineage(spend.parents, parent_id)
    if Scope("session", session_id) in above or len(above) >= MAX_ANCESTRY:
        return spend
    parents = {**spend.parents, session_id: parent_id}
    moved = _get(spend.buckets, Scope("session", session_id))
    if moved == _EMPTY:
        return Spend(spend.buckets, spend.open, parents, spend.today)
    changes = {}
    for scope in above:
        old = _get(spend.buckets, scope)
        changes[scope] = Tally(old.spent + moved.spent, old.reserved + moved.reserved,
                               old.unknown + moved.unknown)
    return Spend(_with_tallies(spend.buckets, changes), spend.open, parents, spend.today)


def _rolled_over(spend: Spend, today: str) -> dict[int, dict[Scope, Tally]]:
    """The buckets without past days' scopes that hold no reservation (once a day)."""
    if spend.today == today:
        return spend.buckets
    return {key: {scope: tally for scope, tally in bucket.items()
                  if scope.kind == "session" or (scope.day or scope.name) >= today
                  or tally.reserved != 0}
            for key, bucket in spend.buckets.items()}


def _refusal(code: str, scope: Scope, cap: Decimal, tally: Tally, needed: Decimal | None,
             now: datetime) -> Refusal:
    held = (f"spent {display_usd(tally.spent)}, reserved {display_usd(tally.reserved)} "
            "for calls in flight")
    if code == CODE_UNPRICED_MODEL:
        message = (f"the model has no price, so its cost cannot be held against the "
                   f"{scope.describe()} (${cap}); refused without being sent "
                   "(set [budgets] allow_unpriced = true to allow it)")
    elif code == CODE_REQUEST_EXCEEDS_CAP:
        message = (f"this request alone may cost up to {display_usd(needed or _ZERO)}, above "
                   f"the {scope.describe()} (${cap}); retrying cannot help: lower max_tokens "
                   "or the input (amounts rounded for display)")
    else:
        left = cap - tally.spent - tally.reserved
        worst = display_usd(needed or _ZERO)
        if left > 0:
            # Not "used up": status shows money left, which this call's worst case exceeds.
            message = (f"this request may cost up to {worst}, more than is left of the "
                       f"{scope.describe()}: {display_usd(left)} of ${cap} ({held}); lower "
                       "max_tokens or the input, or wait for calls in flight to settle "
                       "(amounts rounded for display)")
        else:
            message = (f"the {scope.describe()} (${cap}) is used up: {held}; this request "
                       f"may cost up to {worst} (amounts rounded for display)")
    retry = (_seconds_to_midnight(now) if code == CODE_CAP_EXHAUSTED
             and scope.kind != "session" else None)
    return Refusal(code=code, message=message, scope=scope, cap=cap, spent=tally.spent,
                   reserved=tally.reserved, needed=needed, retry_after_s=retry)


def reserve(spend: Spend, caps: Caps, call: BudgetCall, now: datetime) -> Reserved | Refusal:
    """Hold ``call``'s worst case in every scope it draws from, or refuse it.

    The scopes are its session, each ancestor, its provider's day and the day of ``now``
    (UTC). A refusal names the cap: a cap the request alone exceeds first (retrying
    cannot help), then a used-up session cap, then a used-up daily one (with
    ``retry_after_s``), so a ``Retry-After`` is given only when waiting can help.
    """
    if call.call_id in spend.open:
        return Reserved(spend, spend.open[call.call_id])
    today = _day(now)
    buckets = _rolled_over(spend, today)
    scopes = (*_lineage(spend.parents, call.session_id),
              Scope("provider", call.provider, today), Scope("day", today))
    needed = call.worst_case
    exhausted: list[tuple[Scope, Decimal, Tally]] = []
    for scope in scopes:
        cap = caps.cap(scope)
        if cap is None:
            continue
        tally = _get(buckets, scope)
        if needed is None:
            if not caps.allow_unpriced:
                return _refusal(CODE_UNPRICED_MODEL, scope, cap, tally, None, now)
        elif needed > cap:
            return _refusal(CODE_REQUEST_EXCEEDS_CAP, scope, cap, tally, needed, now)
        elif tally.spent + tally.reserved + needed > cap:
            exhausted.append((scope, cap, tally))
    if exhausted:
        # Sessions come first in ``scopes``; a daily cap is named only when alone in the
        # way, so its Retry-After never promises what a session cap would still refuse.
        scope, cap, tally = exhausted[0]
        return _refusal(CODE_CAP_EXHAUSTED, scope, cap, tally, needed, now)
    amount = _ZERO if needed is None else needed
    reservation = Reservation(call.call_id, call.session_id, amount, scopes,
                              unpriced=needed is None, output_bound=call.output_bound)
    changes = {}
    for scope in scopes:
        old = _get(buckets, scope)
        changes[scope] = Tally(old.spent, old.reserved + amount, old.unknown)
    return Reserved(Spend(_with_tallies(buckets, changes),
                          {**spend.open, call.call_id: reservation}, spend.parents,
                          today), reservation)


def _close(spend: Spend, reservation: Reservation, cost: Decimal, unknown: int) -> Spend:
    held = spend.open.get(reservation.call_id)
    if held is None or held != reservation:
        raise UnknownCall(reservation.call_id, "holds no reservation")
    changes = {}
    for scope in (*_lineage(spend.parents, reservation.session_id), *reservation.scopes[-2:]):
        old = spend.tally(scope)
        changes[scope] = Tally(old.spent + cost, old.reserved - reservation.amount,
                               old.unknown + unknown)
    still_open = {k: v for k, v in spend.open.items() if k != reservation.call_id}
    return Spend(_with_tallies(spend.buckets, changes), still_open, spend.parents, spend.today)


def settle(spend: Spend, reservation: Reservation, actual_cost: Decimal | None) -> Spend:
    """The call ended with a response: its reservation becomes ``actual_cost``.

    None (the cost is unknown: no price, or usage missing and not estimable) keeps the
    reserved worst case as spent and counts the call in the tallies' ``unknown``.
    Raises :class:`~sessionwarden.domain.errors.UnknownCall` if the call holds no
    reservation (settled or released already).
    """
    if actual_cost is None:
        return _close(spend, reservation, reservation.amount, 1)
    return _close(spend, reservation, actual_cost, 0)


def release(spend: Spend, reservation: Reservation) -> Spend:
    """The call failed before costing anything, or was cancelled: free its reservation.

    Raises :class:`~sessionwarden.domain.errors.UnknownCall` if it holds none.
    """
    return _close(spend, reservation, _ZERO, 0)


def move(spend: Spend, caps: Caps, call: BudgetCall, now: datetime) -> Reserved | Refusal:
    """A reserved call goes elsewhere (its model's fallback route): hold ``call`` instead.

    The route's worst case replaces the reservation the call holds (if any), in the
    route's scopes (its provider's day): released first, so the call never counts twice
    against a scope both share, then reserved as :func:`reserve` does. A refusal leaves
    ``spend`` as it was — the call keeps its first reservation until it ends, as a call
    not sent anywhere else (its error answer then releases it).
    """
    held = spend.open.get(call.call_id)
    return reserve(spend if held is None else release(spend, held), caps, call, now)


def charge(spend: Spend, session_id: str, provider: str, cost: Decimal | None,
           now: datetime) -> Spend:
    """Count the cost of a call that held no reservation: a side call of the daemon's own.

    The model summariser's calls are never refused by a cap (the client call that needed
    the summary already passed it), but their cost is the session's: it joins the
    session's lineage, the provider's day and the day of ``now``, so the *next* call is
    refused once they used the cap up. An unknown cost is counted in ``unknown`` only.
    """
    today = _day(now)
    buckets = _rolled_over(spend, today)
    amount = _ZERO if cost is None else cost
    unknown = 1 if cost is None else 0
    changes = {}
    for scope in (*_lineage(spend.parents, session_id), Scope("provider", provider, today),
                  Scope("day", today)):
        old = _get(buckets, scope)
        changes[scope] = Tally(old.spent + amount, old.reserved, old.unknown + unknown)
    return Spend(_with_tallies(buckets, changes), spend.open, spend.parents, today)


def rebuild(rows: Iterable[tuple[str, str, str, Decimal | None]],
            parents: Mapping[str, str], now: datetime) -> Spend:
    """The spend a ledger of completed calls implies: the state a restarted actor starts from.

    ``rows`` are ``(session_id, provider, day, cost)`` (``day`` the UTC day, cost None when
    unknown); ``parents`` each session's first-named parent, in the order the sessions
    started (``domain.cost.lineage.cut_links`` applies :func:`adopt`'s rules in it: the links
    kept are the lineage calls walk). Sessions sum their subtree over every recorded link
    but one closing a cycle: a chain deeper than :data:`MAX_ANCESTRY`, recorded while no
    cap applied, is cut for the walk (its sessions' calls are refused), yet what its
    sessions spent counts in every ancestor (issue 21 §4). Only today's (UTC, of ``now``)
    day scopes are kept. A call of unknown cost counts $0 and one ``unknown`` (its
    reservation was memory only: the views say the figure is a lower bound). Nothing is
    reserved: calls in flight died with the previous process.
    """
    today = _day(now)
    kept, cuts = cut_links(parents)
    own: dict[str, Tally] = {}
    tallies: dict[Scope, Tally] = {}

    def add(table: dict[Any, Tally], key: object, amount: Decimal, unknown: int) -> None:
        old = table.get(key, _EMPTY)
        table[key] = Tally(old.spent + amount, _ZERO, old.unknown + unknown)

    for session_id, provider, day, cost in rows:
        amount, unknown = (_ZERO, 1) if cost is None else (cost, 0)
        add(own, session_id, amount, unknown)
        if day == today:
            add(tallies, Scope("provider", provider, today), amount, unknown)
            add(tallies, Scope("day", today), amount, unknown)
    counted = {child: parent for child, parent in parents.items()
               if child in kept or (child in cuts and cuts[child].code == CODE_PARENT_TOO_DEEP)}
    for session_id, tally in _subtrees(own, _acyclic(counted)).items():
        tallies[Scope("session", session_id)] = tally
    buckets: dict[int, dict[Scope, Tally]] = {}
    for scope, tally in tallies.items():
        buckets.setdefault(hash(scope) & _MASK, {})[scope] = tally
    return Spend(buckets, {}, kept, today)


def _acyclic(links: Mapping[str, str]) -> dict[str, str]:
    """``links`` (child to parent, in order) without those that would close a cycle.

    Each child has one parent, so the links make trees; a link closes a cycle when the
    child is the root of its parent's tree. The roots are tracked with path compression,
    so the whole is near linear however deep the chains (no bounded walk here: these
    links may be deeper than :data:`MAX_ANCESTRY`).
    """
    root: dict[str, str] = {}

    def find(session: str) -> str:
        path = []
        while session in root:
            path.append(session)
            session = root[session]
        for step in path:
            root[step] = session
        return session

    kept: dict[str, str] = {}
    for child, parent in links.items():
        top = find(parent)
        if top == child:
            continue
        root[child] = top
        kept[child] = parent
    return kept


def _subtrees(own: Mapping[str, Tally], links: Mapping[str, str]) -> dict[str, Tally]:
    """Each session's subtree money over the acyclic ``links``: sessions that hold some.

    A session with no money in its subtree gets no tally (``Spend.knows`` stays false
    for it, as before it spent). Children are summed before their parents in one pass.
    """
    children: dict[str, list[str]] = {}
    for child, parent in links.items():
        children.setdefault(parent, []).append(child)
    nodes = set(own) | set(links) | set(children)
    order: list[str] = []
    stack = [session for session in nodes if session not in links]
    while stack:
        session = stack.pop()
        order.append(session)
        stack.extend(children.get(session, ()))
    totals: dict[str, Tally] = {}
    for session in reversed(order):
        total = own.get(session)
        for child in children.get(session, ()):
            below = totals.get(child)
            if below is not None:
                total = below if total is None else Tally(
                    total.spent + below.spent, _ZERO, total.unknown + below.unknown)
        if total is not None:
            totals[session] = total
    return totals
