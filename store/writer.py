"""The group-commit writer: one thread, one write connection, many appenders.

Appenders put requests in the writer's :class:`~sessionwarden.store.inbox.Inbox` and wait
for their acknowledgement. The writer takes a group (as many requests as there were
concurrent appenders last time, or what came within a short window), commits it in one
``BEGIN IMMEDIATE`` transaction with ``synchronous=FULL`` and only then acknowledges each
request: one fsync is shared by the whole group, which is where the throughput over
one-transaction-per-event comes from.

Every request of a group is first *planned* against the log and the requests before it
(``sessionwarden.store.planning``): conflicts are found there, before anything is
written, so a conflicting request fails alone and the rest of the group still commits,
and a request spanning several streams is all or nothing. The accepted rows are then
written with a few multi-row INSERTs and the projections applied once, in the same
transaction, so views never run ahead of the log. If that write fails anyway (a
projection raised), the group is redone request by request, each in its own SAVEPOINT,
so only the guilty request fails.

Other processes may append to the same file between our transactions. The head sequence
and hash are therefore read at the start of every transaction, and the cache of stream
heads is trusted only while the head is still the one this writer committed last.
"""

import functools
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import apsw
from loguru import logger
from sessionwarden.clock import SystemClock
from sessionwarden.store.bulk import insert_rows
from sessionwarden.store.contents import ContentRow, encode_contents
from sessionwarden.store.errors import (
    ConflictError,
    StoreClosed,
    StoreError,
    StoreProgrammingError,
)
from sessionwarden.store.hashing import GENESIS
from sessionwarden.store.inbox import Inbox
from sessionwarden.store.planning import GroupState, Plan, Planner
from sessionwarden.store.projections import (
    Projection,
    catch_up,
    record_positions,
    tracking_name,
)
from sessionwarden.store.records import (
    AppendResult,
    RecordedEvent,
    StreamAppend,
    Tracking,
)
from sessionwarden.store.request import AppendRequest, Relay
from sessionwarden.store.retry import retry_busy
from sessionwarden.store.schema import translate

__all__ = ["RELAY_MIN", "AppendRequest", "GroupCommitWriter", "utc_now"]

# How long the writer waits for the rest of a group: 50 us per expected appender (about
# what one needs to wake, take the GIL and resubmit), within these bounds. The wait
# normally ends early, at the put that completes the group; the bound only matters when
# concurrency drops, and then costs one late group before ``expected`` adapts.
_WINDOW_PER_S = 0.00005
_WINDOW_MIN_S = 0.0003
_WINDOW_MAX_S = 0.004


def utc_now() -> datetime:
    """The current time in UTC (the default clock: the system's, with its offset)."""
    return _system_clock().now()


@functools.cache
def _system_clock() -> SystemClock:
    # Made once: the offset is a process's setting, and an append must not parse it.
    return SystemClock()


#: Blocking waiters in a group from which the writer wakes only the first and lets each
#: wake the next (``sessionwarden.store.request.Relay``). Below it, waking each directly
#: is faster: 8 threads measured 0.95x relayed, 64 threads 1.2-1.3x.
RELAY_MIN = 16

_STOP = object()


class GroupCommitWriter:
    """Owns the single write connection of a process and commits appends in groups."""

    def __init__(
        self,
        conn: apsw.Connection,
        path: Path,
        projections: Sequence[Projection],
        *,
        clock: Callable[[], datetime] = utc_now,
        max_group: int = 1024,
        busy_budget_s: float = 30.0,
    ) -> None:
        """Take ownership of ``conn`` (already opened with the log's pragmas)."""
        self._conn = conn
        self._path = path
        self._projections = tuple(projections)
        self._clock = clock
        self._max_group = max_group
        self._busy_budget_s = busy_budget_s
        self._inbox: Inbox[object] = Inbox()
        self._planner = Planner(conn)
        self._last_seq = -1  # unknown until our first commit
        self._last_written = 0
        self._waiting = 0
        self._closed = False
        self._listeners: list[Callable[[int], None]] = []
        self._group_hooks: list[Callable[[], None]] = []
        self._relay = Relay()
        #: Groups whose waiters were woken by relay (diagnostics and tests).
        self.relayed_groups = 0
        #: Commits that wrote, and the seconds they took (metrics: the commit latency).
        self.commits = 0
        self.commit_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="sw-store-writer", daemon=True)
        self._thread.start()

    def submit(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None = None,
        callback: Callable[[AppendRequest], None] | None = None,
        *,
        will_wait: bool = False,
        contents: Sequence[ContentRow] | None = None,
    ) -> AppendRequest:
        """Queue an atomic append; returns at once with the pending request.

        ``will_wait`` promises that the caller will :meth:`~AppendRequest.wait` for it,
        which lets the writer leave its wake-up to the waiter before it (see
        ``sessionwarden.store.request``). ``contents`` are the rows of the appends'
        contents (``sessionwarden.store.contents.encode_contents``, which runs here
        when they are not given), written in the same transaction as the events, and
        only if they are.
        """
        relay = self._relay if will_wait and callback is None else None
        failure: StoreError | None = None
        if contents is None:
            try:
                contents = encode_contents(appends)
            except StoreError as exc:
                contents, failure = (), exc
            except Exception as exc:  # a malformed request fails alone, never the writer
                contents, failure = (), _bug(exc)
        request = AppendRequest(appends, tracking, callback, relay, contents)
        if failure is not None:
            request.finish(None, failure)
        elif self._closed or not self._inbox.put(request):
            request.finish(None, StoreClosed("the event log is closed"))
        return request

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(events)`` in the writer thread after each commit that wrote."""
        self._listeners.append(listener)

    def add_group_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` in the writer thread once all requests of a group are finished.

        This is how callbacks that only queue their results (see
        ``sessionwarden.store.aio``) hand a whole group over with one wake-up.
        """
        self._group_hooks.append(hook)

    def close(self, timeout: float = 30.0) -> None:
        """Commit what is queued, stop the thread and close the connection."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_STOP, urgent=True)
        self._thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        inbox = self._inbox
        expected = 1
        while True:
            group = inbox.take(1, self._max_group)
            # Group-commit window: when the last commit showed k concurrent appenders, wait
            # for the k that are about to resubmit instead of paying a whole fsync for the
            # first one alone; the put that completes the group wakes us early. A lone
            # appender (k = 1) never waits.
            short = False
            if len(group) < expected:
                window = min(max(expected * _WINDOW_PER_S, _WINDOW_MIN_S), _WINDOW_MAX_S)
                group += inbox.take(
                    expected - len(group), self._max_group - len(group), window
                )
                short = len(group) < expected
            stopping = _STOP in group
            requests = [item for item in group if isinstance(item, AppendRequest)]
            if requests:
                self._commit(requests)
            # Concurrency is the group just committed plus the requests that arrived while
            # it was being written, counted before the acknowledgements went out. Counting
            # only the group let a group split once by a late appender stay split (k/2 +
            # k/2, one more fsync per round); counting after the acks would also count
            # appenders of this group that had already resubmitted.
            # A wait that ran out means the estimate was wrong (concurrency fell, or the
            # appenders come in uneven bursts, like the daemon's two or three actors per
            # call): the next group does not wait at all, so a lone request never pays
            # the window twice in a row.
            expected = 1 if short else max(len(requests) + self._waiting, 1)
            # Drop the group before sleeping: its requests hold their callers' callbacks
            # (and, from asyncio, futures and so whole event loops).
            group, requests = [], []
            if stopping:
                break
        # Appends that raced with close() are refused, never dropped silently.
        for item in inbox.close():
            if isinstance(item, AppendRequest):
                item.finish(None, StoreClosed("the event log is closed"))
        self._run_group_hooks()
        self._conn.close()

    def _run_group_hooks(self) -> None:
        for hook in self._group_hooks:
            try:
                hook()
            except Exception as exc:  # a hook's failure must never stop the writer
                logger.warning("group hook failed: {}: {}", type(exc).__name__, exc)

    def _commit(self, group: list[AppendRequest]) -> None:
        outcomes: list[_Outcome]
        self._last_written = 0
        began = time.perf_counter()
        try:
            try:
                outcomes = retry_busy(
                    lambda: self._transaction(group, careful=False), budget_s=self._busy_budget_s
                )
            except _WriteFailed:
                # Something failed while writing the whole group at once (a projection
                # raised, a constraint we did not foresee): redo it request by request so
                # only the guilty request fails.
                outcomes = retry_busy(
                    lambda: self._transaction(group, careful=True), budget_s=self._busy_budget_s
                )
        except StoreError as exc:
            outcomes = [(None, exc)] * len(group)
        except apsw.Error as exc:
            outcomes = [(None, translate(exc, self._path))] * len(group)
        except Exception as exc:  # a bug must fail the appends, never kill the writer
            outcomes = [(None, _bug(exc))] * len(group)
        if self._last_written:
            self.commits += 1
            self.commit_seconds += time.perf_counter() - began
        self._waiting = len(self._inbox)  # see _run: how many arrived during the write
        relayed = [r for r in group if r.relay is not None]
        relay = len(relayed) >= RELAY_MIN
        for request, (results, error) in zip(group, outcomes, strict=True):
            request.finish(results, error, wake=not (relay and request.relay is not None))
        if relay:
            self.relayed_groups += 1
            self._relay.start(relayed)
        if self._group_hooks:
            self._run_group_hooks()
        written = self._last_written
        if written and self._listeners:
            for listener in self._listeners:
                try:
                    listener(written)
                except Exception as exc:
                    logger.warning("commit listener failed: {}: {}", type(exc).__name__, exc)

    def _transaction(self, group: list[AppendRequest], careful: bool) -> list["_Outcome"]:
        """Plan every request against the current head, write, commit.

        Conflicts are all detected while planning, before anything is written, so the
        fast path writes the whole group with one ``executemany`` and applies projections
        once: every apsw call releases and re-takes the GIL, and with many appender
        threads waiting, the number of calls per group is what bounds throughput.
        """
        conn = self._conn
        try:
            # One call for both: each apsw call is a GIL release an appender may take.
            row = conn.execute(
                "BEGIN IMMEDIATE; SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            seq, prev = (row[0], row[1]) if row else (0, GENESIS)
            start = seq
            if seq != self._last_seq or self._planner.oversized():
                # Another process appended (or the cache outgrew its bound): forget
                # cached heads here, between groups, never in the middle of planning one,
                # where a forgotten stream created earlier in the group would look new.
                self._planner.forget()
            if seq != self._last_seq:
                catch_up(conn, self._projections, seq)
            now = self._clock().astimezone(UTC).isoformat(timespec="microseconds")
            group_state = GroupState()
            outcomes: list[_Outcome] = []
            plans: list[Plan] = []
            for request in group:
                try:
                    plan = self._planner.plan(
                        request.appends, request.tracking, seq, prev, now, group_state
                    )
                except (ConflictError, StoreProgrammingError) as exc:
                    outcomes.append((None, exc))
                    continue
                except apsw.Error:
                    raise  # busy, I/O: the whole transaction is retried or fails
                except Exception as exc:
                    # A request the caller's checks let through (``submit`` used directly)
                    # fails alone: planning wrote nothing, and the planner keeps only facts
                    # read from the log.
                    outcomes.append((None, _bug(exc)))
                    continue
                plan.contents = request.contents
                if careful:
                    conn.execute("SAVEPOINT request")
                    try:
                        self._write([plan])
                    except Exception as exc:
                        conn.execute("ROLLBACK TO request")
                        conn.execute("RELEASE request")
                        failure = translate(exc, self._path) if isinstance(
                            exc, apsw.Error) else _bug(exc)
                        outcomes.append((None, failure))
                        continue
                    conn.execute("RELEASE request")
                else:
                    plans.append(plan)
                group_state.accept(plan, self._planner)
                seq, prev = plan.seq, plan.prev
                outcomes.append((plan.results, None))
            if plans:
                try:
                    self._write(plans)
                except apsw.BusyError:
                    raise
                except Exception as exc:
                    raise _WriteFailed from exc
            if seq != start:
                record_positions(conn, [(tracking_name(p), seq) for p in self._projections])
            conn.execute("COMMIT")
        except BaseException:
            if not conn.getautocommit():
                conn.execute("ROLLBACK")
            self._planner.forget()
            self._last_seq = -1
            raise
        self._last_written = seq - start
        self._last_seq = seq
        return outcomes

    def _write(self, plans: list[Plan]) -> None:
        conn = self._conn
        streams = [row for plan in plans for row in plan.streams]
        if streams:
            insert_rows(conn, "INSERT INTO streams", streams)
        rows = [row for plan in plans for row in plan.rows]
        if rows:
            insert_rows(conn, "INSERT INTO events", rows)
        contents = [row for plan in plans for row in plan.contents]
        if contents:
            # OR IGNORE: a content another call stored already is the same bytes (the
            # key is their hash), so the first row stands.
            insert_rows(conn, "INSERT OR IGNORE INTO contents (key, data, zlib)", contents)
        tracking = [(p.tracking.name, p.tracking.position) for p in plans if p.tracking]
        if tracking:
            record_positions(conn, tracking)
        if rows and self._projections:
            recorded = [RecordedEvent(*row[:10]) for row in rows]
            for projection in self._projections:
                projection.apply(conn, recorded)


_Outcome = tuple[list[AppendResult] | None, StoreError | None]


class _WriteFailed(Exception):
    """The one-shot write of a whole group failed; redo it request by request."""


def _bug(exc: BaseException) -> StoreProgrammingError:
    return StoreProgrammingError(f"append failed: {type(exc).__name__}: {exc}")
