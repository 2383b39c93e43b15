"""UsageLedgerActor: holds every call's worst case against the spend caps before it is sent.

Caps span sessions (a parent's cap holds its subagents, a daily cap every call), so no
session's actor can decide them: one actor owns the daemon's :class:`Spend` and
serialises every reservation, which is what makes them atomic — 20 concurrent calls
against a cap that fits 5 get 5 reservations (peers.md, pain point 11).

Rules:

Admission passes through here first (as completions pass through the rate guard): the
ledger adopts the session's parent (``X-Session-Parent``), prices the call's worst case
(``domain.cost.worst_case``: the estimated input and the output bound, at the price book's
rates), reserves it or decides the refusal (``domain.cost.caps.reserve``), and hands the
request on to the session's actor with its answer in ``CallRequest.budget``; the
``budgets`` stage there records a refusal as CallRefused, so a refused call is in the
log like any other. Nothing is appended here per call: the spend is the ledger's
(CallCompleted carries each cost) and is folded back from ``view_ledger`` at start.

While no cap applies (none in the configuration, none set through the control API),
calls do not pass through here at all — admission goes straight to the session's actor
and nothing is settled: nothing needs holding, and this actor's hops were the one cost
a call would pay for it. The first cap set through the control API then folds the
ledger afresh (:meth:`UsageLedgerActor.load`: every cost and every session's parent are
in the log), so it holds what every session already spent.

The proxy tells :class:`Settle` once the completion is durable (the reservation becomes
the real cost, at most the reservation for a stream cut at its output bound; a side
call is charged against what the summariser reserved for it with :class:`ReserveRoute`
before sending, or charged as it is when no cap applied then) and
:class:`ReleaseReservation` when a reserved call is not sent after all. A call going to its
model's fallback route asks :class:`ReserveRoute` first: the route's worst case
replaces its reservation, or the route is refused. A lost message leaves money reserved
until the next start (conservative: a cap never overshoots because a message went
missing).

Stream ``budgets``: SessionCapSet, a session's cap set through the control API.
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec
import pykka
from loguru import logger
from sessionwarden.actors.bridge import PENDING, Call, GovernedActor, Reply, tell
from sessionwarden.actors.errors import ActorCrash
from sessionwarden.actors.messages import (
    Admit,
    BudgetOf,
    HasCaps,
    ReleaseReservation,
    ReserveRoute,
    SetSessionCap,
    Settle,
    new_event,
)
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.config import Config
from sessionwarden.domain.admission.caps_stage import session_budget
from sessionwarden.domain.calls import UNHELD_PURPOSES, CallRequest
from sessionwarden.domain.cost.caps import (
    BudgetCall,
    Caps,
    Refusal,
    Reservation,
    Reserved,
    Scope,
    Spend,
    adopt,
    charge,
    move,
    rebuild,
    release,
    reserve,
    settle,
)
from sessionwarden.domain.cost.lineage import Cut, cut_links, inherited_refusal, parent_refusal
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.worst_case import (
    call_worst_case,
    media_tokens,
    output_bound,
    prompt_tokens,
    requested_choices,
    requested_max_tokens,
)
from sessionwarden.domain.session import session_stream
from sessionwarden.events import BUDGETS_STREAM, CODEC, SessionCapSet
from sessionwarden.store import ANY, EventLog, StreamAppend
from sessionwarden.store.errors import StoreError
from sessionwarden.store.writer import AppendRequest
from sessionwarden.views.budgets import BUDGET_COST

__all__ = ["UsageLedgerActor", "caps_of"]



def caps_of(config: Config, overrides: dict[str, Decimal | None]) -> Caps:
    """The caps ``config`` sets, with the sessions' caps set through the control API."""
    return Caps(session_usd=config.budgets.session_usd, session_overrides=overrides,
                daily_usd=config.budgets.daily_usd,
                provider_daily_usd={p.name: p.daily_usd for p in config.providers
                                    if p.daily_usd is not None},
                allow_unpriced=config.budgets.allow_unpriced)


class UsageLedgerActor(GovernedActor):
    """Reserves, settles and releases calls' money against the caps; owns session caps."""

    def __init__(
        self,
        log: EventLog,
        config: Config,
        session_ref: Callable[[str], "pykka.ActorRef[Any]"],
        *,
        prices: PriceBook | None = None,
        clock: Clock | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Serve from ``log``; ``session_ref`` finds the actor owning a session.

        ``prices`` prices the worst cases (without it every model is unpriced: under a
        cap, refused unless ``allow_unpriced``).
        """
        super().__init__(on_failure)
        self._log = log
        self._config = config
        self._session_ref = session_ref
        self._prices = prices
        self._clock = clock or SystemClock()
        self._spend = Spend()
        #: Every session that ever asked for admission (its first call fixed its parent,
        #: in SessionStarted): a later call's X-Session-Parent must not give it another.
        self._started: set[str] = set()
        #: Sessions whose parent link the caps cannot follow (a cycle, too deep): their
        #: calls and their descendants' are refused (``domain.cost.lineage``).
        self._cuts: dict[str, Cut] = {}
        self._overrides: dict[str, Decimal | None] = {}
        self._caps = caps_of(config, {})
        #: Whether calls pass through here, reserved and settled, since this process
        #: started: then the spend is live (reservations in flight included) and must
        #: never be folded from the log again, even after every cap was lifted.
        self._live = False
        #: The last ``view_ledger`` row the spend was folded from: a call recorded up to
        #: it is counted already, whatever Settle still comes for it.
        self._folded_seq = 0

    def on_start(self) -> None:
        """Recover the spend and the sessions' caps from the log."""
        self._spend, self._overrides = self.load()
        self._caps = caps_of(self._config, self._overrides)
        self._live = self._active()

    def load(self) -> tuple[Spend, dict[str, Decimal | None]]:
        """The one loader: every completed call's cost, the lineage, the sessions' caps.

        It also learns every session the log has started (their parents are fixed).
        """
        conn = self._log.read_connection()
        with conn:  # one read transaction: the ledger and the parents agree
            # In the order the sessions started, the order adopt() saw them live: the
            # chain's depth bound cuts the same link (by id, it cut another, or none).
            # The order of their first events, not their times: sessions started within
            # one clock tick (or on a fake clock) would be taken by id.
            parents = {str(s): str(p) for s, p in conn.execute(
                "SELECT p.session_id, p.parent FROM view_session_parents p"
                " LEFT JOIN view_streams v ON v.stream = ? || p.session_id"
                " ORDER BY v.first_seq, p.session_id", (session_stream(""),))}
            self._started.update(str(s) for (s,) in conn.execute(
                "SELECT session_id FROM view_sessions"))
            last = conn.execute("SELECT MAX(seq) FROM view_ledger").fetchone()
            self._folded_seq = int(last[0]) if last and last[0] is not None else 0
            spend = rebuild(
                ((s, p, d, None if c is None else Decimal(c)) for s, p, d, c in conn.execute(
                    f"SELECT session_id, provider, day, {BUDGET_COST} FROM view_ledger")),
                parents, self._clock.now())
            self._cuts = cut_links(parents)[1]
        overrides: dict[str, Decimal | None] = {}
        for record in self._log.read_stream(BUDGETS_STREAM):
            event = CODEC.decode(record.type, record.data)
            if isinstance(event, SessionCapSet):
                overrides[event.session_id] = None if event.usd is None else Decimal(event.usd)
        return spend, overrides

    def handle(self, message: object, reply: Reply) -> object:
        """Admit (reserve, then on to the session), Settle, ReleaseReservation, caps and figures."""
        if isinstance(message, Admit):
            request = self._judge(message.request)
            tell(self._session_ref(request.session_id), Call(Admit(request), reply))
            return PENDING
        if isinstance(message, Settle):
            self._settle(message)
            return None
        if isinstance(message, ReserveRoute):
            return self._reserve_route(message)
        if isinstance(message, ReleaseReservation):
            held = self._spend.open.get(message.call_id)
            if held is not None:
                self._spend = release(self._spend, held)
            return None
        if isinstance(message, HasCaps):
            return self._caps_set()
        if isinstance(message, BudgetOf):
            return session_budget(self._spend, self._caps, message.session_id)
        if isinstance(message, SetSessionCap):
            return self._set_cap(message, reply)
        if isinstance(message, _CapDurable):
            return self._cap_durable(message)
        raise TypeError(f"UsageLedgerActor cannot handle {type(message).__name__}")

    def _caps_set(self) -> bool:
        """Whether a session's cap was set through the control API (and not lifted)."""
        return any(cap is not None for cap in self._overrides.values())

    def _active(self) -> bool:
        """Whether calls pass through here: a cap is configured or was set for a session."""
        return self._config.has_caps or self._caps_set()

    def _judge(self, request: CallRequest) -> CallRequest:
        """``request`` with its parent as the ledger knows it and its reservation or refusal."""
        spend = self._spend
        session = request.session_id
        # A parent counts only on a session's first call (SessionStarted records the
        # parent this returns, and a restart folds that back): a lineage must not change
        # under money the session spent. A session that never called may hold its
        # descendants' money (a subagent's subagent called first): adopt() moves that
        # up to its new ancestors. Ignoring its parent instead made it a root free of
        # the caps above, or let a cycle's second link pass silently (issue 21 §4).
        first = session not in self._started
        self._started.add(session)
        if first and request.parent_session and session not in spend.parents:
            refused = parent_refusal(spend.parents, session, request.parent_session)
            if refused is not None:
                # Cut for good (issue 21 §4). The parent named stays in the request, so
                # SessionStarted records it and a restart cuts the same link again.
                self._cuts[session] = Cut(request.parent_session, refused.code)
                return msgspec.structs.replace(request, budget=refused)
            spend = adopt(spend, session, request.parent_session)
        parent = spend.parents.get(session, "")
        # Some side calls are not judged at admission (UNHELD_PURPOSES: the summariser
        # reserved its worst case before admitting it, a token count is free), so here
        # they are only placed in their session's tree.
        if request.purpose in UNHELD_PURPOSES:
            self._spend = spend
            return msgspec.structs.replace(request, parent_session=parent)
        if self._cuts:  # none in a log without a refused parent: no walk then
            refused = inherited_refusal(spend.parents, self._cuts, session)
            if refused is not None:
                self._spend = spend
                return msgspec.structs.replace(request, parent_session=parent,
                                               budget=refused)
        now = self._clock.now()
        decided = reserve(spend, self._caps, self._budget_call(request, now), now)
        if isinstance(decided, Reserved):
            self._spend = decided.spend
            return msgspec.structs.replace(request, parent_session=parent,
                                           budget=decided.reservation)
        self._spend = spend
        return msgspec.structs.replace(request, parent_session=parent, budget=decided)

    def _budget_call(self, request: CallRequest, now: datetime) -> BudgetCall:
        """What ``request`` asks to reserve: its worst case and output bound, priced now."""
        worst: Decimal | None = None
        entry = self._config.model_for(request.provider, request.model)
        fields = getattr(request.body, "fields", None)
        bound = output_bound(requested_max_tokens(fields),
                             entry.max_output_tokens if entry is not None else None,
                             requested_choices(fields))
        if self._prices is not None:
            try:
                lookup = self._prices.lookup(request.provider, request.model, at=now)
            except Exception as exc:  # the price data's own failure: no price, said so
                logger.warning("call {}: no price for {}/{} ({}: {})", request.call_id,
                               request.provider, request.model, type(exc).__name__, exc)
            else:
                worst = call_worst_case(lookup, _input_estimate(request), bound)
        return BudgetCall(call_id=request.call_id, session_id=request.session_id,
                          provider=request.provider, worst_case=worst, output_bound=bound)

    def _reserve_route(self, message: ReserveRoute) -> Reservation | Refusal:
        """Hold the call's fallback route instead of its first reservation, or refuse it.

        Priced as at admission, with the route's model (its price, its output limit)
        and provider (its daily cap), before anything is sent there.
        """
        request = msgspec.structs.replace(message.request, provider=message.provider,
                                          model=message.model)
        now = self._clock.now()
        decided = move(self._spend, self._caps, self._budget_call(request, now), now)
        if isinstance(decided, Refusal):
            return decided  # nothing changed: the call keeps what it holds
        self._spend = decided.spend
        return decided.reservation

    def _settle(self, message: Settle) -> None:
        cost = None if message.cost is None else Decimal(message.cost)
        held = self._spend.open.get(message.call_id)
        if held is not None:
            if message.bounded:  # read no further than its reservation holds
                cost = held.amount if cost is None else min(cost, held.amount)
            self._spend = settle(self._spend, held, cost)
        else:  # a side call, a call admitted while no cap applied, or before a restart
            if self._folded(message.call_id):
                return  # its cost came with the log (a cap was first set as it ended)
            session = message.session_id
            if (message.parent and session not in self._started
                    and session not in self._spend.parents
                    and not self._spend.knows(Scope("session", session))):
                refused = parent_refusal(self._spend.parents, session, message.parent)
                if refused is not None:  # cut as at admission: a restart cuts it too
                    self._cuts[session] = Cut(message.parent, refused.code)
                else:
                    self._spend = adopt(self._spend, session, message.parent)
            self._spend = charge(self._spend, message.session_id, message.provider, cost,
                                 self._clock.now())

    def _folded(self, call_id: str) -> bool:
        """Whether ``call_id``'s cost was in the log when the spend was folded from it."""
        if not self._folded_seq:
            return False
        row = self._log.read_connection().execute(
            "SELECT seq FROM view_ledger WHERE call_id = ?", (call_id,)).fetchone()
        return row is not None and int(row[0]) <= self._folded_seq

    def _set_cap(self, message: SetSessionCap, reply: Reply) -> object:
        if not self._live:
            # Calls were neither reserved nor settled here: the log knows what they cost.
            # (Once they were, the spend holds reservations the log cannot have, and a
            # settlement on its way would be counted twice.) The proxy sends every call
            # here from this cap on, even once it is lifted (``Runtime.caps_set``).
            self._spend, self._overrides = self.load()
            self._live = True
        usd = message.usd
        event = SessionCapSet(session_id=message.session_id,
                              usd=None if usd is None else str(usd))
        part = StreamAppend(BUDGETS_STREAM, (new_event(event),), ANY)
        session_id = message.session_id

        def committed(request: AppendRequest) -> None:
            # The writer's thread: the cap takes effect in the actor's own thread, so no
            # reservation ever sees it half-applied; the reply follows from there.
            try:
                self.actor_ref.tell(Call(_CapDurable(session_id, usd, request.error), reply))
            except Exception:
                reply(None, request.error or ActorCrash("the ledger stopped"))

        try:
            self._log.submit([part], callback=committed)
        except StoreError as exc:
            raise ActorCrash(f"cannot append: {exc}") from exc
        return PENDING

    def _cap_durable(self, done: "_CapDurable") -> object:
        """A cap's event is durable (or failed): apply it and answer."""
        if done.error is not None:
            logger.error("session {}: cap not recorded: {}", done.session_id, done.error)
            raise done.error
        self._overrides = {**self._overrides, done.session_id: done.usd}
        self._caps = caps_of(self._config, self._overrides)
        return session_budget(self._spend, self._caps, done.session_id)


class _CapDurable(msgspec.Struct, frozen=True):
    session_id: str
    usd: Decimal | None
    error: Any = None


def _input_estimate(request: CallRequest) -> int:
    """The tokens a call's prompt may bill, before governance has counted its history.

    Counted here, where only a capped call's reservation needs it, not on the proxy's
    request path: the client's items as sent (and the tool schemas, billed as input),
    each image, audio or file part at ``domain.cost.worst_case.MEDIA_PART_TOKENS``.
    """
    body = request.body
    items = getattr(body, "items", None)
    if request.estimated_tokens:  # governance's, of the text: its media parts added
        return request.estimated_tokens + (media_tokens(items) if items else 0)
    if items is None:
        return 0
    return prompt_tokens(items, getattr(body, "fields", {}) or {})
