"""SessionActor: owns each session's stream; sessions are sharded and passivated.

Many sessions must not mean many threads, so a fixed number of shards (actors) share
them, chosen by a stable hash of the session id. A shard keeps the sessions it has seen
recently in an LRU map and passivates the least recently used once it holds too many;
a passivated session is recovered on demand from the ``view_sessions`` snapshot, which
the store keeps in step with the stream. A session with appends still in flight is never
passivated, so a recovery never reads a snapshot that is about to change.

Stream ``session-<id>``: SessionStarted (appended with ``NO_STREAM``, so a session can
never be started twice), CallAdmitted, UpstreamResponded.
"""

import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pykka
from sessionwarden.actors.bridge import PENDING, Call, GovernedActor, Reply
from sessionwarden.actors.messages import Admit, RecordUsage, Responded, new_event
from sessionwarden.events import SessionStarted
from sessionwarden.store import ANY, NO_STREAM, EventLog, NewEvent, StreamAppend
from sessionwarden.store.errors import ConflictError, StoreError
from sessionwarden.store.schema import query_int

__all__ = ["SessionActor", "session_shard", "session_stream"]


def session_stream(session_id: str) -> str:
    """The stream of a session."""
    return f"session-{session_id}"


def session_shard(session_id: str, shards: int) -> int:
    """The shard that owns ``session_id`` (stable across restarts)."""
    return zlib.crc32(session_id.encode()) % shards


class _Session:
    __slots__ = ("calls", "pending", "started")

    def __init__(self, started: bool, calls: int) -> None:
        self.started = started
        self.calls = calls
        self.pending = 0


class _Appended:
    """Told by the store's writer thread when a session append finished."""

    __slots__ = ("error", "events", "session_id")

    def __init__(
        self, session_id: str, error: BaseException | None, events: tuple[NewEvent, ...]
    ) -> None:
        self.session_id = session_id
        self.error = error
        self.events = events


class SessionActor(GovernedActor):
    """One shard of the sessions: admits calls and records upstream responses."""

    def __init__(
        self,
        log: EventLog,
        *,
        max_sessions: int = 2000,
        on_failure: Any = None,
        ledger: Callable[[], "pykka.ActorRef[Any]"] | None = None,
    ) -> None:
        """Serve sessions from ``log``, keeping at most ``max_sessions`` in memory.

        ``ledger`` finds the current UsageLedgerActor: a Responded carrying the call's
        usage is recorded here, then forwarded there, so the response event is always
        queued before the usage row and the caller waits on one reply, not two.
        """
        super().__init__(on_failure)
        self._ledger = ledger
        self._log = log
        self._max = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self.passivated = 0

    def handle(self, message: object, reply: Reply) -> object:
        """Dispatch Admit, Responded and the writer's completions."""
        if isinstance(message, Admit):
            self._admit(message)
            return None
        if isinstance(message, Responded):
            return self._responded(message, reply)
        if isinstance(message, _Appended):
            self._appended(message)
            return None
        raise TypeError(f"SessionActor cannot handle {type(message).__name__}")

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._recover(session_id)
            self._passivate(room=1)  # before inserting: never evict the session being added
            self._sessions[session_id] = session
        else:
            self._sessions.move_to_end(session_id)
        return session

    def _recover(self, session_id: str) -> _Session:
        calls = query_int(
            self._log.read_connection(),
            "SELECT calls FROM view_sessions WHERE session_id = ?", (session_id,), -1,
        )
        return _Session(started=calls >= 0, calls=max(calls, 0))

    def _passivate(self, room: int = 0) -> None:
        """Passivate idle sessions, least recently used first, leaving ``room`` free.

        Sessions with appends in flight stay (their snapshot is about to change), so the
        map may briefly hold more than ``max_sessions``; it is trimmed again as their
        appends complete.
        """
        limit = self._max - room
        if len(self._sessions) <= limit:
            return
        for session_id, session in list(self._sessions.items()):
            if len(self._sessions) <= limit:
                break
            if session.pending == 0:
                del self._sessions[session_id]
                self.passivated += 1

    def _admit(self, admit: Admit) -> None:
        call = admit.event
        session = self._get(call.session_id)
        admitted = new_event(call)
        if session.started:
            self._append(call.session_id, [admitted], session)
        else:
            started = new_event(
                SessionStarted(
                    session_id=call.session_id, model=f"{call.provider}/{call.model}",
                    client=admit.client,
                )
            )
            session.started = True
            self._append(call.session_id, [started, admitted], session, NO_STREAM)
        session.calls += 1

    def _responded(self, message: Responded, reply: Reply) -> object:
        event = message.event
        session = self._get(event.session_id)
        responded = [new_event(event)]
        if message.usage is None or self._ledger is None:
            self._append(event.session_id, responded, session)
            return None
        # The response event rides in the ledger's append: both commit together, with
        # one fsync, and the caller's single reply means both are durable.
        session.pending += 1
        part = StreamAppend(session_stream(event.session_id), tuple(responded), ANY)
        ref = self.actor_ref

        def done(result: Any, error: BaseException | None) -> None:
            ref.tell(_Appended(event.session_id, error, tuple(responded)))
            reply(result, error)

        self._ledger().tell(Call(RecordUsage(message.usage, (part,)), done))
        return PENDING

    def _append(
        self, session_id: str, events: list[NewEvent], session: _Session, expected: Any = ANY
    ) -> None:
        session.pending += 1
        ref = self.actor_ref
        self._log.submit(
            [StreamAppend(session_stream(session_id), tuple(events), expected)],
            callback=lambda request: ref.tell(
                _Appended(session_id, request.error, request.appends[0].events)
            ),
        )

    def _appended(self, done: _Appended) -> None:
        session = self._sessions.get(done.session_id)
        if session is not None:
            session.pending = max(0, session.pending - 1)
            self._passivate()
        error = done.error
        if isinstance(error, ConflictError):
            # Nothing was written. Either the session already had a stream (started by an
            # earlier instance whose append was still in flight when we recovered), or the
            # ledger refused the usage row it carried our response in. Keep this
            # session's facts: re-append them, minus a duplicate start.
            rest = [e for e in done.events if e.type != SessionStarted.type_tag()]
            if rest:
                self._append(done.session_id, rest, self._get(done.session_id))
        elif isinstance(error, StoreError):
            raise error  # a store failure: let the supervisor restart us from the log
