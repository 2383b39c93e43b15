"""Connection setup: the WAL is presized at open without writing anything to the log."""

from pathlib import Path

import apsw
from sessionwarden.store import EventLog, StreamsView, replay
from sessionwarden.store.schema import presize_wal

from tests.store.store_support import session_ev

PAGE = 4096
CHECKPOINT_PAGES = 1000  # SQLite's default wal_autocheckpoint


def wal(db: Path) -> Path:
    return Path(f"{db}-wal")


def schema_names(db: Path) -> list[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_schema"))
    finally:
        conn.close()


def test_open_grows_the_wal_to_one_checkpoint_interval(db: Path) -> None:
    with EventLog(db):
        assert wal(db).stat().st_size >= CHECKPOINT_PAGES * PAGE


def test_presize_leaves_no_trace_in_the_log(tmp_path: Path) -> None:
    plain, presized = tmp_path / "plain.db", tmp_path / "presized.db"
    with EventLog(plain, autocheckpoint=False), EventLog(presized):
        assert schema_names(presized) == schema_names(plain)
        assert "sw_presize" not in schema_names(presized)
    with EventLog(presized, readonly=True) as log:
        assert log.head()[0] == 0


def test_without_autocheckpoint_the_wal_is_not_presized(db: Path) -> None:
    with EventLog(db, autocheckpoint=False):
        assert wal(db).stat().st_size < CHECKPOINT_PAGES * PAGE


def test_appends_over_the_presized_wal_survive_reopening(db: Path) -> None:
    with EventLog(db, projections=[StreamsView()]) as log:
        for i in range(50):
            log.append(f"s-{i % 5}", [session_ev(i)])
        # A reader sees exactly the committed events, not the rolled-back spill.
        with EventLog(db, readonly=True) as reader:
            assert reader.head()[0] == 50
    with EventLog(db, readonly=True) as log:
        assert [e.seq for e in log.read_all()] == list(range(1, 51))
    report = replay(db, [StreamsView()], verify=True)
    assert report.ok, report


def test_a_second_writer_presizes_behind_committed_frames(db: Path) -> None:
    with EventLog(db) as first:
        first.append("s", [session_ev(1), session_ev(2), session_ev(3)])
        # The WAL holds these commits, not yet checkpointed, when the second writer opens.
        with EventLog(db) as second:
            assert second.head()[0] == 3
            second.append("s", [session_ev(4)])
        first.append("s", [session_ev(5)])
        assert [e.version for e in first.read_stream("s")] == [1, 2, 3, 4, 5]
    assert replay(db, [], verify=True).ok


def test_a_wal_already_at_size_is_not_written_again(db: Path) -> None:
    with EventLog(db):
        before = wal(db).stat()
        with EventLog(db):
            after = wal(db).stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_presize_restores_the_page_cache_size(db: Path) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("PRAGMA cache_size = -4321")
        presize_wal(conn)
        assert conn.execute("PRAGMA cache_size").fetchall()[0][0] == -4321
        assert conn.getautocommit()
    finally:
        conn.close()
