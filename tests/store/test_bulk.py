"""insert_rows: many rows with few statements, values always bound as parameters."""

import math
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from sessionwarden.store.bulk import CHUNK, insert_rows


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[apsw.Connection]:
    connection = apsw.Connection(str(tmp_path / "bulk.db"))
    connection.execute("CREATE TABLE t (id INTEGER UNIQUE, name TEXT, blob BLOB, n REAL)")
    try:
        yield connection
    finally:
        connection.close()


def make_rows(n: int) -> list[tuple[int, str, bytes, float | None]]:
    """Ids count down, so rowid order (insertion order) differs from id order."""
    return [
        (i, f"name-{i}", bytes([i % 256]) * (i % 5), None if i % 3 == 0 else i / 7)
        for i in range(n, 0, -1)
    ]


def stored(conn: apsw.Connection) -> list[tuple[object, ...]]:
    return list(conn.execute("SELECT id, name, blob, n FROM t ORDER BY rowid"))


def count_inserts(conn: apsw.Connection) -> list[str]:
    """Record every INSERT statement the connection executes from now on."""
    seen: list[str] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql.lstrip().upper().startswith("INSERT"):
            seen.append(sql)
        return True

    conn.exec_trace = tracer
    return seen


def test_chunk_is_a_sane_size() -> None:
    assert isinstance(CHUNK, int)
    assert 1 <= CHUNK <= 1000


@pytest.mark.parametrize(
    "n",
    [0, 1, 2, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 5],
    ids=lambda n: f"rows={n}",
)
def test_inserts_every_row_in_order(conn: apsw.Connection, n: int) -> None:
    rows = make_rows(n)
    inserts = count_inserts(conn)
    insert_rows(conn, "INSERT INTO t", rows)
    assert stored(conn) == [tuple(r) for r in rows]
    assert len(inserts) == math.ceil(n / CHUNK)  # one statement per chunk, none for no rows


def test_accepts_any_iterable_of_sequences(conn: apsw.Connection) -> None:
    rows = make_rows(CHUNK + 3)
    insert_rows(conn, "INSERT INTO t", (list(r) for r in rows))  # a generator of lists
    assert stored(conn) == [tuple(r) for r in rows]


def test_an_empty_generator_runs_nothing(conn: apsw.Connection) -> None:
    inserts = count_inserts(conn)
    insert_rows(conn, "INSERT INTO t", iter(()))
    assert inserts == []
    assert stored(conn) == []


def test_head_may_name_columns(conn: apsw.Connection) -> None:
    insert_rows(conn, "INSERT INTO t (name, id)", [("b", 2), ("a", 1)])
    assert list(conn.execute("SELECT id, name, blob FROM t ORDER BY rowid")) == [
        (2, "b", None),
        (1, "a", None),
    ]


def test_wide_rows_stay_within_the_parameter_limit(conn: apsw.Connection) -> None:
    """The writer's events rows have 11 columns; 3 chunks and a bit of them."""
    conn.execute("CREATE TABLE wide (" + ", ".join(f"c{i}" for i in range(11)) + ")")
    rows = [tuple(r * 100 + c for c in range(11)) for r in range(3 * CHUNK + 5)]
    insert_rows(conn, "INSERT INTO wide", rows)
    assert list(conn.execute("SELECT * FROM wide ORDER BY rowid")) == rows


def test_tail_upserts(conn: apsw.Connection) -> None:
    conn.execute("CREATE TABLE counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    tail = " ON CONFLICT (key) DO UPDATE SET n = n + excluded.n"
    keys = [f"k{i}" for i in range(2 * CHUNK + 3)]
    insert_rows(conn, "INSERT INTO counts (key, n)", [(k, 1) for k in keys], tail=tail)
    # second round: every existing key is bumped, in several chunks, and new keys added
    insert_rows(
        conn, "INSERT INTO counts (key, n)", [(k, 10) for k in [*keys, "new"]], tail=tail
    )
    result = dict(conn.execute("SELECT key, n FROM counts"))
    assert result == {**{k: 11 for k in keys}, "new": 10}


def test_a_failing_chunk_raises_and_earlier_chunks_stay_in_the_transaction(
    conn: apsw.Connection,
) -> None:
    rows = make_rows(CHUNK + 2)
    rows[-1] = (rows[0][0], "dup", b"", None)  # conflicts with the first row, in chunk 2
    with pytest.raises(apsw.ConstraintError), conn:
        insert_rows(conn, "INSERT INTO t", rows)
    assert stored(conn) == []  # the caller's transaction rolled everything back


HOSTILE = [
    "'); DROP TABLE t; --",
    "x', 'y'); DROP TABLE t; --",
    "?",
    "?1, ?2",
    ":name",
    "\"quoted\"",
    "a\x00b",
    "",
]


def test_values_are_bound_never_spliced(conn: apsw.Connection) -> None:
    rows = [(i, text, text.encode(), None) for i, text in enumerate(HOSTILE, start=1)]
    insert_rows(conn, "INSERT INTO t", rows)
    assert stored(conn) == [tuple(r) for r in rows]
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema")}
    assert "t" in tables


def test_statement_text_does_not_depend_on_the_values(conn: apsw.Connection) -> None:
    inserts = count_inserts(conn)
    insert_rows(conn, "INSERT INTO t", [(1, "'); DROP TABLE t; --", b"", None)])
    insert_rows(conn, "INSERT INTO t", [(2, "harmless", b"", None)])
    assert len(inserts) == 2
    assert inserts[0] == inserts[1]
    assert "DROP" not in inserts[0]


def test_rows_of_different_widths_are_refused_not_realigned(tmp_path: Path) -> None:
    conn = apsw.Connection(str(tmp_path / "ragged.db"))
    try:
        conn.execute("CREATE TABLE t (a, b)")
        with pytest.raises(ValueError, match="one width"):
            insert_rows(conn, "INSERT INTO t", [(1, 2), (3,), (4, 5, 6)])
        assert conn.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
    finally:
        conn.close()
