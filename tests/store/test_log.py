"""The guarantees of the event log, one test (or table) per promise.

See the reference brief, section (a): atomic appends, per-stream versions with
expected-version checks, idempotent retries, gap-free global positions, immutability,
documented durability, private files, clear errors for missing or foreign files, views in
the append's transaction, and the single-instance lock.
"""

import os
import shutil
import stat
import threading
import time
from pathlib import Path

import apsw
import pytest
from sessionwarden.store import (
    ANY,
    EXISTS,
    NO_STREAM,
    EventLog,
    InstanceLock,
    NewEvent,
    StreamAppend,
    StreamsView,
    Tracking,
    replay,
)
from sessionwarden.store.errors import (
    ConflictError,
    CorruptStore,
    IdempotencyConflict,
    StoreClaimed,
    StoreClosed,
    StoreProgrammingError,
    StoreUnavailable,
    TrackingConflict,
    WrongExpectedVersion,
)
from sessionwarden.store.schema import connect

from tests.store.store_support import ev, session_ev, write_lock, writer_threads


def all_seqs(log: EventLog) -> list[int]:
    return [e.seq for e in log.read_all()]


# -- 1. an append is atomic, even across streams -----------------------------------------


def test_multi_stream_batch_commits_whole(log: EventLog) -> None:
    results = log.append_batch(
        [
            StreamAppend("a", (ev("a1"), ev("a2")), NO_STREAM),
            StreamAppend("b", (ev("b1"),), NO_STREAM),
        ]
    )
    assert [(r.stream, r.first_seq, r.last_seq, r.version) for r in results] == [
        ("a", 1, 2, 2),
        ("b", 3, 3, 1),
    ]
    assert [(e.stream, e.version, e.data) for e in log.read_all()] == [
        ("a", 1, b"a1"),
        ("a", 2, b"a2"),
        ("b", 1, b"b1"),
    ]


def test_conflict_in_second_part_writes_nothing_of_first(log: EventLog) -> None:
    log.append("b", [ev("b1")])
    head = log.head()
    with pytest.raises(WrongExpectedVersion) as info:
        log.append_batch(
            [
                StreamAppend("a", (ev("a1"), ev("a2")), NO_STREAM),
                StreamAppend("b", (ev("b2"),), 5),
            ]
        )
    assert info.value.actual == 1
    assert log.head() == head
    assert log.stream_version("a") == 0
    assert list(log.read_stream("a")) == []


def test_idempotency_conflict_in_second_part_writes_nothing_of_first(log: EventLog) -> None:
    log.append("b", [ev("b1", key="k")])
    with pytest.raises(IdempotencyConflict):
        log.append_batch(
            [
                StreamAppend("a", (ev("a1"),)),
                StreamAppend("b", (ev("other", key="k"),)),
            ]
        )
    assert all_seqs(log) == [1]
    assert log.stream_version("a") == 0


def test_tracking_conflict_rolls_back_the_events(log: EventLog) -> None:
    log.append_batch([StreamAppend("a", (ev(),))], Tracking("upstream", 5))
    with pytest.raises(TrackingConflict):
        log.append_batch([StreamAppend("a", (ev(),))], Tracking("upstream", 5))
    assert all_seqs(log) == [1]
    assert log.tracking_position("upstream") == 5


def test_a_failed_request_does_not_fail_its_group(log: EventLog) -> None:
    log.append("s", [ev()])
    requests = [
        log.submit([StreamAppend(f"ok-{i}", (ev(),), NO_STREAM)]) if i != 5
        else log.submit([StreamAppend("s", (ev(),), NO_STREAM)])
        for i in range(10)
    ]
    for i, request in enumerate(requests):
        if i == 5:
            with pytest.raises(WrongExpectedVersion):
                request.wait(10)
        else:
            assert request.wait(10)[0].version == 1
    assert all_seqs(log) == list(range(1, 11))



# Requests that must be refused in the caller's thread: each names what is wrong with it.
MALFORMED = {
    "surrogate stream": ([StreamAppend("s\udc80", (ev(),))], None, "stream name"),
    "empty stream": ([StreamAppend("", (ev(),))], None, "stream name"),
    "int type": ([StreamAppend("s", (NewEvent(5, b"{}"),))], None, "event type"),  # type: ignore[arg-type]
    "surrogate type": ([StreamAppend("s", (NewEvent("t\ud800", b"{}"),))], None, "event type"),
    "str data": ([StreamAppend("s", (NewEvent("t", "{}"),))], None, "bytes data"),  # type: ignore[arg-type]
    "schema 0": ([StreamAppend("s", (NewEvent("t", b"{}", 0),))], None, "schema version"),
    "bool schema": ([StreamAppend("s", (NewEvent("t", b"{}", True),))], None, "schema version"),
    "surrogate key": (
        [StreamAppend("s", (NewEvent("t", b"{}", idempotency_key="k\udc80"),))], None,
        "idempotency key",
    ),
    "int key": (
        [StreamAppend("s", (NewEvent("t", b"{}", idempotency_key=7),))], None,  # type: ignore[arg-type]
        "idempotency key",
    ),
    "surrogate tracking": ([], Tracking("up\udc80", 1), "tracking name"),
    "float position": ([], Tracking("up", 1.5), "tracking position"),  # type: ignore[arg-type]
    "huge position": ([], Tracking("up", 2**63), "tracking position"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_requests_are_refused_before_the_writer(log: EventLog, case: str) -> None:
    appends, tracking, what = MALFORMED[case]
    with pytest.raises(StoreProgrammingError, match=what):
        log.append_batch(appends, tracking)
    with pytest.raises(StoreProgrammingError, match=what):
        log.submit(appends, tracking)
    assert log.head()[0] == 0


def test_a_request_the_writer_cannot_plan_fails_alone(log: EventLog) -> None:
    # GroupCommitWriter.submit skips EventLog's checks: whatever slips through must fail
    # only its own request, never the appends grouped with it.
    writer = log._writer
    assert writer is not None
    with write_lock(log.path):  # the writer waits: "bad" is queued with "ok-2" behind it
        requests = [
            writer.submit([StreamAppend("ok-1", (ev(),))]),
            writer.submit([StreamAppend("bad", (NewEvent(5, b"{}"),))]),  # type: ignore[arg-type]
            writer.submit([StreamAppend("ok-2", (ev(),))]),
        ]
    assert requests[0].wait(10)[0].first_seq == 1
    with pytest.raises(StoreProgrammingError, match="AttributeError"):
        requests[1].wait(10)
    assert requests[2].wait(10)[0].first_seq == 2
    assert all_seqs(log) == [1, 2]


# -- 2. per-stream versions and the expected-version check ---------------------------------

# (events already in the stream, expected version, accepted?)
EXPECTED_VERSION_TABLE = [
    (0, 0, True),
    (0, NO_STREAM, True),
    (0, ANY, True),
    (0, EXISTS, False),
    (0, 1, False),
    (2, 2, True),
    (2, ANY, True),
    (2, EXISTS, True),
    (2, NO_STREAM, False),
    (2, 0, False),
    (2, 1, False),
    (2, 3, False),
]


@pytest.mark.parametrize(("existing", "expected", "accepted"), EXPECTED_VERSION_TABLE)
def test_expected_version(log: EventLog, existing: int, expected: object, accepted: bool) -> None:
    log.append("other", [ev()])
    if existing:
        log.append("s", [ev() for _ in range(existing)])
    head = log.head()
    if accepted:
        result = log.append("s", [ev("new"), ev("new2")], expected_version=expected)  # type: ignore[arg-type]
        assert result.version == existing + 2
        assert (result.first_seq, result.last_seq) == (head[0] + 1, head[0] + 2)
        assert [e.version for e in log.read_stream("s")] == list(range(1, existing + 3))
    else:
        with pytest.raises(WrongExpectedVersion) as info:
            log.append("s", [ev("new")], expected_version=expected)  # type: ignore[arg-type]
        assert info.value.actual == existing
        assert info.value.expected == expected
        assert isinstance(info.value, ConflictError)
        assert log.head() == head
        assert log.stream_version("s") == existing


@pytest.mark.parametrize("expected", [-1, True, 1.0, "1", None, 2**63])
def test_invalid_expected_version_is_a_programming_error(log: EventLog, expected: object) -> None:
    with pytest.raises(StoreProgrammingError):
        log.append("s", [ev()], expected_version=expected)  # type: ignore[arg-type]


def test_versions_start_at_one_and_are_per_stream(log: EventLog) -> None:
    log.append("a", [ev(), ev()])
    log.append("b", [ev()])
    log.append("a", [ev()])
    assert [(e.stream, e.version) for e in log.read_all()] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("a", 3),
    ]
    assert log.stream_version("a") == 3
    assert log.stream_version("b") == 1
    assert log.stream_version("never") == 0


def test_one_group_over_known_and_new_streams_after_a_reopen(db: Path) -> None:
    # A fresh writer knows no stream: planning one group over hundreds of them, it must
    # find every head and number the log already has, and number the new ones after them.
    with EventLog(db, projections=[StreamsView()]) as log:
        for i in range(300):
            log.append(f"old-{i}", [session_ev(i)] * (1 + i % 3))
    with EventLog(db, projections=[StreamsView()]) as log:
        with write_lock(db):  # the first request waits; the rest queue up behind it
            requests = [log.submit([StreamAppend(f"old-{i}", (session_ev(i),))])
                        for i in range(300)]
            requests += [log.submit([StreamAppend(f"new-{i}", (session_ev(i),), NO_STREAM)])
                         for i in range(50)]
        results = [request.wait(10)[0] for request in requests]
        assert [r.version for r in results[:300]] == [2 + i % 3 for i in range(300)]
        assert [r.version for r in results[300:]] == [1] * 50
        numbers = dict(log.read_connection().execute("SELECT name, no FROM streams"))
        assert sorted(numbers.values()) == list(range(1, 351))
        assert [numbers[f"new-{i}"] for i in range(50)] == list(range(301, 351))
    assert replay(db, [StreamsView()], verify=True).ok


@pytest.mark.parametrize("first", [0, 1, 7])
def test_explicit_versions_accept_any_first_version(log: EventLog, first: int) -> None:
    """The eventsourcing conformance adapter starts streams at 0 and at 1."""
    versions = (first, first + 1, first + 5)
    log.append_batch([StreamAppend("s", (ev(), ev(), ev()), ANY, versions)])
    assert tuple(e.version for e in log.read_stream("s", after_version=-1)) == versions
    with pytest.raises(WrongExpectedVersion):  # a taken version conflicts
        log.append_batch([StreamAppend("s", (ev(),), ANY, (first + 5,))])
    with pytest.raises(WrongExpectedVersion):  # so does any version below the head
        log.append_batch([StreamAppend("s", (ev(),), ANY, (first + 2,))])
    log.append_batch([StreamAppend("s", (ev(),), ANY, (first + 6,))])
    assert log.stream_version("s") == first + 6


@pytest.mark.parametrize("versions", [(1, 1), (2, 1), (1,), (1, 2, 3)])
def test_explicit_versions_must_match_and_increase(
    log: EventLog, versions: tuple[int, ...]
) -> None:
    with pytest.raises(WrongExpectedVersion):
        log.append_batch([StreamAppend("s", (ev(), ev()), ANY, versions)])
    assert log.head()[0] == 0


# -- 3. idempotent retries -----------------------------------------------------------------


def test_retry_returns_original_positions_and_writes_nothing(log: EventLog) -> None:
    log.append("other", [ev()])
    events = [ev("1", key="k1"), ev("2", key="k2")]
    first = log.append("s", events, expected_version=NO_STREAM)
    assert (first.first_seq, first.last_seq, first.version, first.duplicate) == (2, 3, 2, False)
    log.append("other", [ev()])
    head = log.head()
    # A retry after success, at the same expected version, is recognised.
    again = log.append("s", events, expected_version=NO_STREAM)
    assert (again.first_seq, again.last_seq, again.version, again.duplicate) == (2, 3, 2, True)
    assert log.head() == head
    assert [e.idempotency_key for e in log.read_stream("s")] == ["k1", "k2"]


def test_retry_inside_a_batch_is_recognised_per_part(log: EventLog) -> None:
    log.append("a", [ev("a", key="ka")])
    results = log.append_batch(
        [StreamAppend("a", (ev("a", key="ka"),)), StreamAppend("b", (ev("b", key="kb"),))]
    )
    assert [(r.first_seq, r.duplicate) for r in results] == [(1, True), (2, False)]
    assert all_seqs(log) == [1, 2]


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param([ev("changed", key="k1"), ev("2", key="k2")], id="different-data"),
        pytest.param(
            [ev("1", key="k1", type_="test.other.v1"), ev("2", key="k2")], id="different-type"
        ),
        pytest.param([ev("1", key="k1"), ev("3", key="k3")], id="partial-stored-plus-new"),
        pytest.param([ev("1", key="k1"), ev("3")], id="partial-stored-plus-unkeyed"),
        pytest.param([ev("2", key="k2"), ev("1", key="k1")], id="reordered"),
    ],
)
def test_key_reused_with_other_content_conflicts(log: EventLog, retry: list[NewEvent]) -> None:
    log.append("s", [ev("1", key="k1"), ev("2", key="k2")])
    with pytest.raises(IdempotencyConflict):
        log.append("s", retry)
    assert all_seqs(log) == [1, 2]


def test_key_reused_on_another_stream_conflicts(log: EventLog) -> None:
    log.append("s", [ev("1", key="k1")])
    with pytest.raises(IdempotencyConflict):
        log.append("t", [ev("1", key="k1")])
    assert all_seqs(log) == [1]


def test_key_twice_in_one_append_conflicts(log: EventLog) -> None:
    with pytest.raises(IdempotencyConflict):
        log.append("s", [ev("1", key="k"), ev("2", key="k")])
    assert all_seqs(log) == []


# -- 4. global positions: gap-free, increasing, never seen out of order --------------------


def test_global_sequence_is_gap_free_under_concurrent_writers_and_a_reader(
    log: EventLog, db: Path
) -> None:
    writers, appends_each = 4, 40
    done = threading.Event()
    problems: list[str] = []
    reads = 0

    def read_continuously() -> None:
        nonlocal reads
        seen = 0
        with EventLog(db, readonly=True) as reader:
            while True:
                finished = done.is_set()
                seqs = [e.seq for e in reader.read_all(after=seen)]
                reads += 1
                if seqs and seqs != list(range(seen + 1, seen + 1 + len(seqs))):
                    problems.append(f"after {seen} read {seqs[:5]}...")
                    return
                seen = seqs[-1] if seqs else seen
                if finished:
                    if seen != writers * appends_each * 2:
                        problems.append(f"reader ended at {seen}")
                    return

    def write(w: int) -> None:
        for i in range(appends_each):
            log.append(f"w{w}", [ev(str(i)), ev(str(i))], expected_version=2 * i)

    reader = threading.Thread(target=read_continuously)
    reader.start()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join(10)
    assert not problems
    assert reads > 1
    assert all_seqs(log) == list(range(1, writers * appends_each * 2 + 1))
    # each append's two events got adjacent positions (never interleaved)
    events = list(log.read_all())
    for a, b in zip(events[::2], events[1::2], strict=True):
        assert (a.stream, a.version + 1) == (b.stream, b.version)
        assert b.seq == a.seq + 1


def test_positions_beyond_64_bits_read_as_bounds(log: EventLog) -> None:
    log.append("s", [ev(), ev()])
    huge = 10**30
    assert list(log.read_all(huge)) == []
    assert [e.seq for e in log.read_all(-huge)] == [1, 2]
    assert [e.seq for e in log.read_all(0, until=huge)] == [1, 2]
    assert list(log.read_all(0, until=-huge)) == []
    assert list(log.read_stream("s", huge)) == []
    assert [e.version for e in log.read_stream("s", -huge, limit=huge)] == [1, 2]


def test_read_all_bounds(log: EventLog) -> None:
    for i in range(10):
        log.append("s", [ev(str(i))])
    assert [e.seq for e in log.read_all(3, until=6)] == [4, 5, 6]
    assert [e.seq for e in log.read_all(3, limit=2)] == [4, 5]
    assert [e.seq for e in log.read_all(10)] == []
    assert [e.version for e in log.read_stream("s", 7)] == [8, 9, 10]
    assert [e.version for e in log.read_stream("s", 2, limit=3)] == [3, 4, 5]


# -- 5. the log is immutable -----------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET data = x'00' WHERE seq = 1",
        "UPDATE events SET seq = 99 WHERE seq = 1",
        "DELETE FROM events WHERE seq = 1",
        "DELETE FROM events",
    ],
)
def test_events_cannot_be_updated_or_deleted(log: EventLog, db: Path, statement: str) -> None:
    log.append("s", [ev("original")])
    before = list(log.read_all())
    conn = apsw.Connection(str(db))
    try:
        with pytest.raises(apsw.ConstraintError, match="append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert list(log.read_all()) == before


# -- 6. durability is configured -----------------------------------------------------------


def test_writer_connections_use_wal_and_full_sync(log: EventLog, db: Path) -> None:
    log.append("s", [ev()])
    conn = connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        assert conn.execute("PRAGMA synchronous").fetchall() == [(2,)]  # FULL
    finally:
        conn.close()
    # and the log's own writer connection (private, but it is the one that commits)
    writer = log._writer
    assert writer is not None
    assert writer._conn.execute("PRAGMA synchronous").fetchall() == [(2,)]
    assert writer._conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]


# -- files are private -----------------------------------------------------------------------


def test_files_are_0600(tmp_path: Path) -> None:
    # The directory is the caller's (the CLI creates its default one 0700:
    # tests/cmd/test_cli_db_path.py); the store never creates one.
    db = tmp_path / "state" / "events.db"
    db.parent.mkdir()
    old = os.umask(0o022)  # a permissive caller umask must not leak into our files
    try:
        with EventLog(db, projections=[StreamsView()]) as log:
            log.append("s", [ev()])
            lock = InstanceLock(db)
            try:
                names = {p.name: stat.S_IMODE(p.stat().st_mode) for p in db.parent.iterdir()}
            finally:
                lock.release()
    finally:
        os.umask(old)
    assert names == {
        "events.db": 0o600,
        "events.db-wal": 0o600,
        "events.db-shm": 0o600,
        "events.db.lock": 0o600,
    }


def test_the_store_never_creates_a_directory(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "events.db"
    with pytest.raises(StoreUnavailable, match="no such directory"):
        EventLog(db)
    with pytest.raises(StoreUnavailable, match="cannot create the lock file"):
        InstanceLock(db)
    assert not db.parent.exists()


# -- opening: missing, read-only, foreign and garbage files ---------------------------------


def test_readonly_open_of_a_missing_file_fails_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nothing" / "events.db"
    with pytest.raises(StoreUnavailable):
        EventLog(db, readonly=True)
    assert not db.exists()
    assert not db.parent.exists()
    with pytest.raises(StoreUnavailable):
        EventLog(tmp_path / "events.db", readonly=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "read-only"])
def test_a_directory_is_not_an_event_log(tmp_path: Path, readonly: bool) -> None:
    with pytest.raises(StoreUnavailable, match="is a directory"):
        EventLog(tmp_path, readonly=readonly)
    assert list(tmp_path.iterdir()) == []


def test_readonly_log_cannot_append(log: EventLog, db: Path) -> None:
    log.append("s", [ev()])
    with EventLog(db, readonly=True) as ro, pytest.raises(StoreProgrammingError):
        ro.append("s", [ev()])


def test_readonly_open_while_a_writer_appends(log: EventLog, db: Path) -> None:
    total = 60
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(total):
                log.append("s", [ev(str(i))], expected_version=i)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    seen: list[int] = []
    with EventLog(db, readonly=True) as ro:
        while True:
            finished = not writer.is_alive()
            seen.extend(e.seq for e in ro.read_all(after=seen[-1] if seen else 0))
            if finished:
                break
        assert ro.stream_version("s") == total
    writer.join()
    assert not errors
    assert seen == list(range(1, total + 1))


def _foreign_sqlite(path: Path) -> bytes:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')")
    conn.close()
    return path.read_bytes()


def test_foreign_sqlite_file_is_corrupt_store(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    _foreign_sqlite(db)
    with pytest.raises(CorruptStore):
        EventLog(db)


def test_foreign_sqlite_file_is_left_unchanged(tmp_path: Path) -> None:
    """Refusing a file must not convert it to WAL (or change it in any other way)."""
    db = tmp_path / "notes.db"
    original = _foreign_sqlite(db)
    with pytest.raises(CorruptStore):
        EventLog(db)
    assert db.read_bytes() == original
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchall() == [("delete",)]
    finally:
        conn.close()


def test_foreign_sqlite_file_read_only_is_corrupt_store(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    _foreign_sqlite(db)
    with pytest.raises(CorruptStore), EventLog(db, readonly=True) as ro:
        ro.head()


@pytest.mark.parametrize("readonly", [False, True])
def test_garbage_file_is_corrupt_store(tmp_path: Path, readonly: bool) -> None:
    db = tmp_path / "events.db"
    garbage = b"this is not a database, only some bytes " * 200
    db.write_bytes(garbage)
    with pytest.raises(CorruptStore), EventLog(db, readonly=readonly) as opened:
        opened.head()
    assert db.read_bytes() == garbage


# -- 8. views are updated in the append's transaction ---------------------------------------


def view_rows(log: EventLog) -> dict[str, tuple[int, int, int, int]]:
    rows = log.read_connection().execute(
        "SELECT stream, version, events, first_seq, last_seq FROM view_streams"
    )
    return {r[0]: tuple(r[1:]) for r in rows}  # type: ignore[misc]


def test_views_track_the_head_after_every_append(db: Path) -> None:
    with EventLog(db, projections=[StreamsView()]) as log:
        assert log.tracking_position("view:streams") in (None, 0)
        log.append("a", [session_ev(), session_ev()])
        assert log.tracking_position("view:streams") == log.head()[0] == 2
        log.append_batch([StreamAppend("b", (session_ev(),)), StreamAppend("a", (session_ev(),))])
        assert log.tracking_position("view:streams") == log.head()[0] == 4
        with pytest.raises(WrongExpectedVersion):
            log.append("a", [session_ev()], expected_version=0)
        assert log.tracking_position("view:streams") == log.head()[0] == 4
        assert view_rows(log) == {"a": (3, 3, 1, 4), "b": (1, 1, 3, 3)}
    assert replay(db, [StreamsView()], verify=True).ok


def test_a_second_writer_without_views_is_caught_up_by_the_next_append(db: Path) -> None:
    with EventLog(db, projections=[StreamsView()]) as first:
        first.append("a", [session_ev()])
        with EventLog(db) as second:  # another process, without the projections
            second.append("b", [session_ev(), session_ev()])
            second.append("a", [session_ev()])
        assert first.head()[0] == 4
        assert first.tracking_position("view:streams") == 1  # the view lags ...
        assert view_rows(first) == {"a": (1, 1, 1, 1)}
        first.append("c", [session_ev()])  # ... until our next append folds in what it missed
        assert first.tracking_position("view:streams") == first.head()[0] == 5
        assert view_rows(first) == {"a": (2, 2, 1, 4), "b": (2, 2, 2, 3), "c": (1, 1, 5, 5)}
    assert replay(db, [StreamsView()], verify=True).ok


# -- lifecycle ---------------------------------------------------------------------------------


def test_close_is_idempotent_and_later_calls_fail_cleanly(db: Path) -> None:
    before = len(writer_threads())
    log = EventLog(db)
    log.append("s", [ev()])
    log.close()
    log.close()
    assert len(writer_threads()) == before
    with pytest.raises(StoreClosed):
        log.append("s", [ev()])
    with pytest.raises(StoreClosed):
        log.head()


def test_close_checkpoints_the_wal_into_the_database_file(db: Path, tmp_path: Path) -> None:
    """After close() the database file alone holds every event (a copy is a backup)."""
    with EventLog(db) as log:
        log.append("s", [ev("1"), ev("2")])
        assert log.head()[0] == 2  # a read: this thread now has a reader connection
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    backup = tmp_path / "backup" / "events.db"
    backup.parent.mkdir()
    shutil.copyfile(db, backup)
    with EventLog(backup, readonly=True) as copy:
        assert [e.data for e in copy.read_all()] == [b"1", b"2"]


def test_close_while_another_thread_reads(log: EventLog) -> None:
    """close() must not raise (nor leave connections open) because a reader is mid-query."""
    log.append("s", [ev()])
    in_query, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def slow_read() -> None:
        conn = log.read_connection()

        def block(x: int) -> int:
            in_query.set()
            release.wait(5)
            return x

        conn.create_scalar_function("sw_test_block", block)
        try:
            outcome.append(conn.execute("SELECT sw_test_block(seq) FROM events").fetchall())
        except Exception as exc:
            outcome.append(exc)

    reader = threading.Thread(target=slow_read)
    reader.start()
    assert in_query.wait(5)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        log.close()
    finally:
        release.set()
        timer.cancel()
        reader.join(5)
    assert not reader.is_alive()
    with pytest.raises(StoreClosed):
        log.head()


# -- the single-instance lock -----------------------------------------------------------------


def test_instance_lock_is_exclusive_until_released(db: Path) -> None:
    first = InstanceLock(db)
    try:
        with pytest.raises(StoreClaimed, match=rf"pid {os.getpid()}\b"):
            InstanceLock(db)
        assert isinstance(StoreClaimed("x"), StoreUnavailable)
    finally:
        first.release()
    first.release()  # idempotent
    with InstanceLock(db), pytest.raises(StoreClaimed):
        InstanceLock(db)
    with InstanceLock(db) as again:
        assert again.path == db.with_name("events.db.lock")


def test_instance_lock_is_released_when_the_holder_dies(db: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, time; from pathlib import Path;"
        "from sessionwarden.store import InstanceLock;"
        "lock = InstanceLock(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(StoreClaimed, match=rf"pid {child.pid}\b"):
            InstanceLock(db)
    finally:
        child.kill()
        child.wait(10)
    deadline = time.monotonic() + 5
    while True:
        try:
            InstanceLock(db).release()
            break
        except StoreClaimed:  # pragma: no cover - the kernel is about to drop it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
