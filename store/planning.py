"""Planning an append: find every conflict and compute every row before writing anything.

The writer plans each request of a group against the log and against the requests
accepted before it in the same group (:class:`GroupState`): expected versions, explicit
versions, idempotency keys (a retry returns the original positions), tracking positions.
A request that passes gets a :class:`Plan` with its rows, hash chain included; one that
does not raises a :class:`~sessionwarden.store.errors.ConflictError` and is left out.

The planner caches stream heads and stream numbers, and numbers new streams; the writer tells
it to :meth:`Planner.forget` them whenever another process may have appended and after
any rollback.
"""

import itertools
from collections.abc import Sequence

import apsw
from sessionwarden.store.contents import ContentRow
from sessionwarden.store.errors import IdempotencyConflict, TrackingConflict, WrongExpectedVersion
from sessionwarden.store.hashing import event_hash
from sessionwarden.store.records import ANY, AppendResult, StreamAppend, StreamState, Tracking
from sessionwarden.store.schema import query_int

__all__ = ["GroupState", "KeyedRow", "Plan", "Planner", "Row", "check_expected", "check_versions"]

#: Stream heads kept at most; past this the writer starts the cache over between groups
#: (a cheap bound on memory).
MAX_CACHED_HEADS = 100_000

KeyedRow = tuple[int, str, int, str, bytes]  # seq, stream, version, type, data
# An ``events`` row: seq, stream, version, type, schema_version, recorded_at,
# idempotency_key, data, prev_hash, hash, stream_no.
Row = tuple[int, str, int, str, int, str, str | None, bytes, bytes, bytes, int]


class Planner:
    """Plans requests on the writer's connection, with a cache of stream heads."""

    def __init__(self, conn: apsw.Connection) -> None:
        """Plan against ``conn`` (inside the writer's open transaction)."""
        self._conn = conn
        self.heads: dict[str, int] = {}  # head version; -1: the stream has no events
        self.numbers: dict[str, int] = {}  # stream_no of every stream in ``heads`` that has one

    def oversized(self) -> bool:
        """Whether the cache outgrew :data:`MAX_CACHED_HEADS` (checked between groups)."""
        return len(self.heads) > MAX_CACHED_HEADS

    def forget(self) -> None:
        """Drop cached heads and numbers (another writer may have moved them)."""
        self.heads.clear()
        self.numbers.clear()

    def plan(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None,
        seq: int,
        prev: bytes,
        now: str,
        group: "GroupState",
    ) -> "Plan":
        """Check a request against the log and the group so far; compute its rows."""
        if tracking is None and len(appends) == 1:
            fast = self._plan_one(appends[0], seq, prev, now)
            if fast is not None:
                return fast
        plan = Plan(seq, prev)
        for part in appends:
            duplicate = self._find_retry(part, group.keys)
            if duplicate is not None:
                plan.results.append(duplicate)
                continue
            last = plan.heads.get(part.stream)
            if last is None:
                last = self._head(part.stream)  # -1: the stream has no events
            head = max(last, 0)
            check_expected(part, head)
            if part.versions is not None:
                check_versions(part, last)
                versions: Sequence[int] = part.versions
            else:
                versions = range(head + 1, head + 1 + len(part.events))
            if not part.events:
                plan.results.append(AppendResult(part.stream, 0, 0, head))
                continue
            number = plan.numbers.get(part.stream) or self.numbers.get(part.stream)
            if number is None:
                number = self._number(part.stream, plan, group)
            first = plan.seq + 1
            for event, version in zip(part.events, versions, strict=True):
                key = event.idempotency_key
                if key is not None:
                    if key in plan.keys or key in group.keys:
                        raise IdempotencyConflict(key, "is used twice in one append")
                    plan.keys[key] = (plan.seq + 1, part.stream, version, event.type, event.data)
                plan.seq += 1
                digest = event_hash(
                    plan.prev, plan.seq, part.stream, version, event.type, event.schema_version,
                    now, key, event.data,
                )
                plan.rows.append(
                    (plan.seq, part.stream, version, event.type, event.schema_version, now,
                     key, event.data, plan.prev, digest, number)
                )
                plan.prev = digest
            plan.heads[part.stream] = versions[-1]
            plan.results.append(AppendResult(part.stream, first, plan.seq, versions[-1]))
        if tracking is not None:
            name, position = tracking.name, tracking.position
            current = group.tracking.get(name)
            if current is None:
                current = query_int(
                    self._conn, "SELECT position FROM tracking WHERE name = ?", (name,), -1
                )
            if position <= current:
                raise TrackingConflict(name, position, current)
            plan.tracking = tracking
        return plan

    def _plan_one(self, part: StreamAppend, seq: int, prev: bytes, now: str) -> "Plan | None":
        """The common request, one keyless event to a known stream at ``ANY``; else None.

        The general path below gives the same plan; this one skips its bookkeeping,
        which costs more than the hash on the writer's critical path.
        """
        events = part.events
        if len(events) != 1 or part.versions is not None or part.expected_version is not ANY:
            return None
        event = events[0]
        stream = part.stream
        head = self.heads.get(stream)
        number = self.numbers.get(stream)
        if event.idempotency_key is not None or head is None or number is None:
            return None
        version = max(head, 0) + 1
        seq += 1
        digest = event_hash(
            prev, seq, stream, version, event.type, event.schema_version, now, None, event.data
        )
        plan = Plan(seq, digest)
        plan.rows.append(
            (seq, stream, version, event.type, event.schema_version, now, None, event.data,
             prev, digest, number)
        )
        plan.heads[stream] = version
        plan.results.append(AppendResult(stream, seq, seq, version))
        return plan

    def _head(self, stream: str) -> int:
        head = self.heads.get(stream)
        if head is None:
            row = self._conn.execute(
                "SELECT s.no, (SELECT max(e.version) FROM events AS e WHERE e.stream_no = s.no)"
                " FROM streams AS s WHERE s.name = ?",
                (stream,),
            ).fetchone()
            if row is None:
                head = -1
            else:
                self.numbers[stream] = row[0]
                head = -1 if row[1] is None else row[1]
            self.heads[stream] = head
        return head

    def _number(self, stream: str, plan: "Plan", group: "GroupState") -> int:
        """Number a stream that has none yet: the next free number, in order of appearance."""
        if plan.next_no is None:
            if group.next_no is None:
                group.next_no = query_int(
                    self._conn, "SELECT coalesce(max(no), 0) + 1 FROM streams"
                )
            plan.next_no = group.next_no
        number = plan.next_no
        plan.next_no += 1
        plan.numbers[stream] = number
        plan.streams.append((number, stream))
        return number

    def _find_retry(
        self, part: StreamAppend, pending: dict[str, KeyedRow]
    ) -> AppendResult | None:
        """The original result if ``part`` is a retry of a stored (or pending) append."""
        keys = [e.idempotency_key for e in part.events if e.idempotency_key is not None]
        if not keys:
            return None
        stored: list[tuple[str, KeyedRow]] = []
        for key in keys:
            found = pending.get(key)
            if found is None:
                row = self._conn.execute(
                    "SELECT seq, stream, version, type, data FROM events "
                    "WHERE idempotency_key = ?",
                    (key,),
                ).fetchone()
                found = None if row is None else (row[0], row[1], row[2], row[3], row[4])
            if found is not None:
                stored.append((key, found))
        if not stored:
            return None
        if len(stored) != len(part.events):
            raise IdempotencyConflict(stored[0][0], "was stored by an append of other events")
        first_seq = stored[0][1][0]
        if [row[0] for _, row in stored] != list(range(first_seq, first_seq + len(stored))):
            raise IdempotencyConflict(stored[0][0], "was stored by an append of other events")
        for event, (key, (_, stream, _, type_tag, data)) in zip(part.events, stored, strict=True):
            if stream != part.stream or type_tag != event.type or data != event.data:
                raise IdempotencyConflict(key, "was stored with different content")
        first, last = stored[0][1], stored[-1][1]
        return AppendResult(part.stream, first[0], last[0], last[2], duplicate=True)


class Plan:
    """What one request will write: rows, contents, results, stream heads, keys, tracking."""

    __slots__ = (
        "contents", "heads", "keys", "next_no", "numbers", "prev", "results", "rows", "seq",
        "streams", "tracking",
    )

    def __init__(self, seq: int, prev: bytes) -> None:
        self.seq, self.prev = seq, prev
        self.rows: list[Row] = []
        self.contents: Sequence[ContentRow] = ()  # set by the writer once planned
        self.streams: list[tuple[int, str]] = []  # ``streams`` rows of new streams
        self.numbers: dict[str, int] = {}
        self.next_no: int | None = None
        self.results: list[AppendResult] = []
        self.heads: dict[str, int] = {}
        self.keys: dict[str, KeyedRow] = {}
        self.tracking: Tracking | None = None


class GroupState:
    """What accepted requests of the current group will have written, for later ones."""

    __slots__ = ("keys", "next_no", "tracking")

    def __init__(self) -> None:
        self.keys: dict[str, KeyedRow] = {}
        self.tracking: dict[str, int] = {}
        self.next_no: int | None = None  # the next free stream number, once looked up

    def accept(self, plan: Plan, planner: Planner) -> None:
        """Make ``plan``'s writes visible to the requests planned after it."""
        planner.heads.update(plan.heads)
        if plan.numbers:
            planner.numbers.update(plan.numbers)
            self.next_no = plan.next_no
        self.keys.update(plan.keys)
        if plan.tracking is not None:
            self.tracking[plan.tracking.name] = plan.tracking.position

def check_versions(part: StreamAppend, head: int) -> None:
    versions = part.versions or ()
    if (
        len(versions) != len(part.events)
        or any(b <= a for a, b in itertools.pairwise(versions))
        or (versions and versions[0] <= head)
    ):
        raise WrongExpectedVersion(part.stream, versions, head)


def check_expected(part: StreamAppend, head: int) -> None:
    expected = part.expected_version
    if expected is StreamState.ANY:
        return
    if expected is StreamState.NO_STREAM:
        ok = head == 0
    elif expected is StreamState.EXISTS:
        ok = head > 0
    else:
        ok = head == expected
    if not ok:
        raise WrongExpectedVersion(part.stream, expected, head)
