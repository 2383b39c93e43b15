"""Schema 2: streams are numbered in order of first appearance, events refer to them.

The numbers must stay gap-free however appends fail, the name in each event row must
agree with its number (``replay --verify`` audits it), the ``streams`` table is as immutable as
``events``, schema-1 files are refused, and the streams view still replays identically.
"""

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest
from sessionwarden.store import (
    NO_STREAM,
    EventLog,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    StreamsView,
    replay,
)
from sessionwarden.store.bulk import CHUNK
from sessionwarden.store.errors import (
    StoreProgrammingError,
    StoreUnavailable,
    WrongExpectedVersion,
)
from sessionwarden.store.writer import AppendRequest

from tests.store.store_support import ev, session_ev, writer_threads

WAIT_S = 30.0








@contextmanager
def plain(db: Path, *, readonly: bool = False) -> Iterator[apsw.Connection]:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
    conn = apsw.Connection(str(db), flags=flags)
    try:
        yield conn
    finally:
        conn.close()


def streams_table(db: Path) -> list[tuple[int, str]]:
    with plain(db, readonly=True) as conn:
        return [(no, name) for no, name in conn.execute("SELECT no, name FROM streams ORDER BY no")]


def assert_gap_free(db: Path) -> None:
    numbers = [no for no, _ in streams_table(db)]
    assert numbers == list(range(1, len(numbers) + 1)), numbers


def one(stream: str, *events: NewEvent, expected: object = None) -> StreamAppend:
    if expected is None:
        return StreamAppend(stream, events or (ev(),))
    return StreamAppend(stream, events or (ev(),), expected)  # type: ignore[arg-type]


def submit_as_one_group(
    log: EventLog, db: Path, requests: Sequence[Sequence[StreamAppend]]
) -> list[AppendRequest]:
    """Queue ``requests`` so the writer takes them all in one group.

    Another connection holds the write lock while a first request (stream "plug") keeps
    the writer busy retrying; everything submitted meanwhile waits in the inbox and is
    taken at once when the lock is released.
    """
    with plain(db) as blocker:
        blocker.execute("BEGIN IMMEDIATE")
        plug = log.submit([one("plug")])
        time.sleep(0.2)  # the writer has taken "plug" and is stuck on the lock
        assert not plug.finished
        pending = [log.submit(list(r)) for r in requests]
        blocker.execute("COMMIT")
    plug.wait(WAIT_S)
    for request in pending:
        try:
            request.wait(WAIT_S)
        except (WrongExpectedVersion, StoreProgrammingError):
            pass
    return pending


def events_of(log: EventLog, stream: str) -> list[RecordedEvent]:
    return list(log.read_stream(stream))


# -- numbering -------------------------------------------------------------------------------


def test_streams_are_numbered_in_order_of_first_appearance(log: EventLog, db: Path) -> None:
    log.append("b", [ev()])
    log.append("a", [ev()])
    log.append("b", [ev()])  # not new: keeps its number
    log.append_batch([one("c"), one("a"), one("d")])
    log.append("e", [ev(), ev()])
    assert streams_table(db) == [(1, "b"), (2, "a"), (3, "c"), (4, "d"), (5, "e")]


def test_an_empty_append_does_not_number_a_stream(log: EventLog, db: Path) -> None:
    result = log.append("ghost", [])
    assert (result.first_seq, result.last_seq, result.version) == (0, 0, 0)
    log.append("real", [ev()])
    assert streams_table(db) == [(1, "real")]


def test_a_batch_of_many_new_streams_is_numbered_in_batch_order(log: EventLog, db: Path) -> None:
    n = 3 * CHUNK + 5  # more rows than one multi-row INSERT holds
    names = [f"z{n - i:04}" for i in range(n)]  # descending, so not alphabetical order
    log.append_batch([one(name, ev(name), ev(name)) for name in names])
    assert streams_table(db) == list(enumerate(names, start=1))
    assert log.head()[0] == 2 * n
    for name in (names[0], names[CHUNK], names[-1]):
        assert [e.version for e in events_of(log, name)] == [1, 2]
        assert log.stream_version(name) == 2


def test_a_failed_append_does_not_burn_numbers(log: EventLog, db: Path) -> None:
    log.append("first", [ev()])
    with pytest.raises(WrongExpectedVersion):
        log.append_batch([one("new-1"), one("new-2"), one("first", expected=NO_STREAM)])
    log.append("second", [ev()])
    assert streams_table(db) == [(1, "first"), (2, "second")]
    assert log.stream_version("new-1") == 0
    assert events_of(log, "new-1") == []


@pytest.mark.parametrize("failing_first", [False, True], ids=["fail-mid-group", "fail-first"])
def test_a_conflict_inside_a_group_does_not_burn_numbers(
    log: EventLog, db: Path, failing_first: bool
) -> None:
    ok_a = [one("a1"), one("a2")]
    bad_b = [one("b1"), one("b2"), one("plug", expected=NO_STREAM)]  # plug exists by then
    ok_c = [one("c1")]
    ok_d = [one("a1")]  # created earlier in the group: not new
    bad_e = [one("e1"), one("a2", expected=0)]  # a2 is at 1 within the group
    ok_f = [one("f1"), one("a2", expected=1)]
    requests = [ok_a, bad_b, ok_c, ok_d, bad_e, ok_f]
    if failing_first:
        requests = [bad_b, ok_a, ok_c, ok_d, bad_e, ok_f]
    done = submit_as_one_group(log, db, requests)
    failed = {i for i, r in enumerate(done) if r.error is not None}
    assert failed == ({0, 4} if failing_first else {1, 4})
    assert all(isinstance(done[i].error, WrongExpectedVersion) for i in failed)

    assert streams_table(db) == [(1, "plug"), (2, "a1"), (3, "a2"), (4, "c1"), (5, "f1")]
    # the successful requests really shared one transaction (one clock reading)
    stamps = {e.recorded_at for e in log.read_all() if e.stream != "plug"}
    assert len(stamps) == 1
    for name in ("b1", "b2", "e1"):
        assert log.stream_version(name) == 0
    assert log.stream_version("a1") == 2
    assert log.stream_version("a2") == 2

    log.append_batch([one("g1"), one("b1")])
    assert streams_table(db)[-2:] == [(6, "g1"), (7, "b1")]
    assert_gap_free(db)
    assert [e.seq for e in log.read_all()] == list(range(1, log.head()[0] + 1))


class Explosive:
    """A projection that raises on events whose payload is b"boom"."""

    name = "explosive"
    tables: tuple[str, ...] = ("view_explosive",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS view_explosive (seq INTEGER PRIMARY KEY)")

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        if any(e.data == b"boom" for e in events):
            raise RuntimeError("boom")
        conn.executemany("INSERT INTO view_explosive VALUES (?)", [(e.seq,) for e in events])


def test_a_request_failing_in_the_write_does_not_burn_numbers(db: Path) -> None:
    """A projection raising sends the group down the request-by-request path."""
    with EventLog(db, projections=[Explosive()]) as log:
        done = submit_as_one_group(
            log,
            db,
            [
                [one("a")],
                [one("b1"), one("b2", ev("boom"))],
                [one("c")],
                [one("a")],
            ],
        )
        assert [r.error is None for r in done] == [True, False, True, True]
        assert isinstance(done[1].error, StoreProgrammingError)
        assert streams_table(db) == [(1, "plug"), (2, "a"), (3, "c")]
        log.append("d", [ev()])
        assert streams_table(db)[-1] == (4, "d")
        assert log.stream_version("a") == 2
        assert log.stream_version("b1") == 0
        with plain(db, readonly=True) as conn:
            seqs = [s for (s,) in conn.execute("SELECT seq FROM view_explosive ORDER BY seq")]
        assert seqs == [e.seq for e in log.read_all()]


def test_two_writers_on_one_file_keep_numbers_unique_and_gap_free(db: Path) -> None:
    with EventLog(db) as first, EventLog(db) as second:  # as two processes would
        first.append("a", [ev()])
        second.append("b", [ev()])
        first.append("c", [ev()])
        second.append_batch([one("a"), one("d")])
        first.append("e", [ev()])
        assert first.stream_version("a") == 2
    assert streams_table(db) == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]


# -- reading by name -------------------------------------------------------------------------


def test_read_stream_and_stream_version_work_by_name(log: EventLog) -> None:
    log.append("a", [ev("a1"), ev("a2")])
    log.append("b", [ev("b1")])
    log.append("a", [ev("a3")])
    assert [e.data for e in log.read_stream("a")] == [b"a1", b"a2", b"a3"]
    assert [e.version for e in log.read_stream("a")] == [1, 2, 3]
    assert [e.seq for e in log.read_stream("a")] == [1, 2, 4]
    assert [e.data for e in log.read_stream("a", 1)] == [b"a2", b"a3"]
    assert [e.data for e in log.read_stream("a", limit=2)] == [b"a1", b"a2"]
    assert [e.data for e in log.read_stream("b")] == [b"b1"]
    assert list(log.read_stream("missing")) == []
    assert (log.stream_version("a"), log.stream_version("b")) == (3, 1)
    assert log.stream_version("missing") == 0
    assert {e.stream for e in log.read_all()} == {"a", "b"}


def test_read_stream_pages_through_a_long_stream(log: EventLog) -> None:
    log.append_batch([one("long", *(ev(str(i)) for i in range(5200)))])
    log.append("other", [ev()])
    versions = [e.version for e in log.read_stream("long")]
    assert versions == list(range(1, 5201))


def test_a_read_only_log_reads_by_name(log: EventLog, db: Path) -> None:
    log.append("a", [ev(), ev()])
    with EventLog(db, readonly=True) as reader:
        assert reader.stream_version("a") == 2
        assert [e.version for e in reader.read_stream("a")] == [1, 2]


# -- integrity inside the file ---------------------------------------------------------------

def _damage(db: Path, *statements: str) -> None:
    """Edit the file as a careless tool or a tamperer would: triggers dropped first."""
    with plain(db) as conn:
        conn.execute(
            "DROP TRIGGER events_no_update; DROP TRIGGER streams_no_update;"
            " DROP TRIGGER streams_no_delete"
        )
        for statement in statements:
            conn.execute(statement)


def _filed(db: Path) -> Path:
    with EventLog(db, projections=[StreamsView()]) as log:
        log.append("a", [session_ev(1)])
        log.append("b", [session_ev(2)])
        log.append("a", [session_ev(3)])
        log.append("b", [session_ev(4)])
        log.append("c", [session_ev(5)])
    return db


@pytest.mark.parametrize(
    ("statements", "first_bad"),
    [
        (("UPDATE events SET stream_no = 3 WHERE seq = 4",), 4),
        (("UPDATE events SET stream_no = 99 WHERE seq = 2",), 2),
        (("UPDATE streams SET name = 'renamed' WHERE no = 2",), 2),
        (("UPDATE streams SET no = 7 WHERE no = 1",), 1),
    ],
    ids=["other-stream's-number", "unknown-number", "renamed-stream", "renumbered-stream"],
)
def test_replay_verify_finds_an_event_filed_under_the_wrong_stream(
    db: Path, statements: tuple[str, ...], first_bad: int
) -> None:
    """The chain hashes names, not numbers: the index is audited on its own."""
    _damage(_filed(db), *statements)
    report = replay(db, [StreamsView()], verify=True)
    assert (report.ok, report.kind, report.first_bad_seq) == (False, "misindexed", first_bad)
    assert report.events == first_bad - 1


def test_replay_verify_passes_an_intact_index(db: Path) -> None:
    report = replay(_filed(db), [StreamsView()], verify=True)
    assert report.ok and report.kind is None


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE streams SET name = 'renamed' WHERE no = 1",
        "UPDATE streams SET no = 99 WHERE no = 1",
        "DELETE FROM streams WHERE no = 2",
        "DELETE FROM streams",
    ],
)
def test_streams_cannot_be_updated_or_deleted(log: EventLog, db: Path, statement: str) -> None:
    log.append("a", [ev()])
    log.append("b", [ev()])
    with plain(db) as conn, pytest.raises(apsw.ConstraintError, match="permanent"):
        conn.execute(statement)
    assert streams_table(db) == [(1, "a"), (2, "b")]


def test_a_stream_name_cannot_be_numbered_twice(log: EventLog, db: Path) -> None:
    log.append("a", [ev()])
    with plain(db) as conn, pytest.raises(apsw.ConstraintError):
        conn.execute("INSERT INTO streams VALUES (2, 'a')")
    assert streams_table(db) == [(1, "a")]


# -- schema versions -------------------------------------------------------------------------


def set_user_version(db: Path, version: int) -> None:
    EventLog(db).close()
    with plain(db) as conn:
        conn.execute(f"PRAGMA user_version = {version}")


def user_version(db: Path) -> int:
    with plain(db, readonly=True) as conn:
        return conn.execute("PRAGMA user_version").fetchall()[0][0]


def test_a_new_log_is_schema_4(db: Path) -> None:
    EventLog(db).close()
    assert user_version(db) == 4


@pytest.mark.parametrize("version", [1, 2])
def test_a_pre_release_file_is_refused(db: Path, version: int) -> None:
    set_user_version(db, version)
    before = len(writer_threads())
    with pytest.raises(StoreUnavailable, match="pre-release") as info:
        EventLog(db)
    assert f"schema {version}" in str(info.value)
    assert len(writer_threads()) == before
    assert user_version(db) == version  # refused, not migrated or touched


@pytest.mark.parametrize(("version", "words"), [(1, "pre-release"), (2, "pre-release"),
                                                (5, "newer")])
def test_a_read_only_open_refuses_other_schemas_too(db: Path, version: int, words: str) -> None:
    set_user_version(db, version)
    with pytest.raises(StoreUnavailable, match=words):
        EventLog(db, readonly=True)


def test_the_head_cache_bound_never_causes_a_false_conflict_inside_a_group(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is applied between groups: a stream created earlier in a group stays
    known to the requests after it, even when the cache is over its bound."""
    from sessionwarden.store import planning

    monkeypatch.setattr(planning, "MAX_CACHED_HEADS", 2)
    with EventLog(db) as log:
        for name in ("a", "b", "c"):
            log.append(name, [ev()])
        requests = submit_as_one_group(
            log, db,
            [[one(f"new-{i}", expected=NO_STREAM)] for i in range(5)]
            + [[one(f"new-{i}", expected=1)] for i in range(5)],
        )
        for request in requests:
            assert request.error is None, request.error
        assert [log.stream_version(f"new-{i}") for i in range(5)] == [2] * 5


def test_a_file_from_a_newer_version_is_refused(db: Path) -> None:
    set_user_version(db, 5)
    with pytest.raises(StoreUnavailable, match="newer"):
        EventLog(db)
    assert user_version(db) == 5


# -- the streams view ------------------------------------------------------------------------


def view_rows(db: Path) -> dict[str, tuple[int, int, int, int]]:
    with plain(db, readonly=True) as conn:
        rows = conn.execute(
            "SELECT stream, version, events, first_seq, last_seq FROM view_streams"
        )
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def test_view_streams_after_appends_to_three_streams(db: Path) -> None:
    with EventLog(db, projections=[StreamsView()]) as log:
        log.append("a", [session_ev(1), session_ev(2)])  # seq 1-2
        log.append("b", [session_ev(3)])  # seq 3
        log.append_batch(
            [StreamAppend("c", (session_ev(4), session_ev(5))), StreamAppend("a", (session_ev(6),))]
        )  # c: 4-5, a: 6
        log.append("b", [session_ev(7)])  # seq 7
        with pytest.raises(WrongExpectedVersion):
            log.append("c", [session_ev(8)], expected_version=0)
        assert log.tracking_position("view:streams") == log.head()[0] == 7
    assert view_rows(db) == {
        "a": (3, 3, 1, 6),
        "b": (2, 2, 3, 7),
        "c": (2, 2, 4, 5),
    }
    with plain(db, readonly=True) as conn:  # rows are keyed (ordered) by first appearance
        order = [s for (s,) in conn.execute("SELECT stream FROM view_streams ORDER BY rowid")]
    assert order == ["a", "b", "c"]
    assert replay(db, [StreamsView()], verify=True).ok


def test_view_streams_with_more_streams_than_one_statement_holds(db: Path) -> None:
    n = 2 * CHUNK + 7
    with EventLog(db, projections=[StreamsView()]) as log:
        log.append_batch([StreamAppend(f"s{i}", (session_ev(i),)) for i in range(n)])
        log.append_batch(
            [StreamAppend(f"s{i}", (session_ev(i), session_ev(i))) for i in range(0, n, 2)]
        )
    rows = view_rows(db)
    assert len(rows) == n
    for i in range(n):
        version = 3 if i % 2 == 0 else 1
        assert rows[f"s{i}"][:3] == (version, version, i + 1)
    assert replay(db, [StreamsView()], verify=True).ok
