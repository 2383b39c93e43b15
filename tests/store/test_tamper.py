"""Tampering with a closed log is found, located and classified by verify and replay.

A log of 30 events is written through ``EventLog`` and closed. Each test copies the file,
drops the append-only triggers with raw apsw (as an attacker with write access could) and
applies one kind of damage at event ``k``. ``verify_chain`` and ``replay(verify=True)``
must then report ``ok=False``, the first bad sequence number ``k``, the right kind, and
``clean_through == k - 1``.
"""

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from sessionwarden.events import CODEC, CredentialAdded, SessionStarted, WalCheckpointed
from sessionwarden.store import EventLog, NewEvent, StreamsView, replay, verify_chain
from sessionwarden.store.hashing import GENESIS, event_hash

N = 30
KS = [1, 2, 15, N - 1, N]

Tamper = Callable[[apsw.Connection, int], None]


def _new(event: object, key: str | None = None) -> NewEvent:
    encoded = CODEC.encode(event)  # type: ignore[arg-type]
    return NewEvent(encoded.type, encoded.data, encoded.schema_version, key)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("tamper") / "events.db"
    with EventLog(db, projections=[StreamsView()]) as log:
        for i in range(N):
            if i % 3 == 0:
                event = _new(SessionStarted(model="m", client=f"c{i}"), f"k{i}")
                log.append(f"session-{i % 4}", [event])
            elif i % 3 == 1:
                event = _new(CredentialAdded(provider="p", ref=f"env:K{i}", fingerprint=f"f{i}"))
                log.append("credentials", [event])
            else:
                event = _new(WalCheckpointed(mode="PASSIVE", wal_frames=i, checkpointed_frames=i))
                log.append("store", [event])
        assert log.head()[0] == N
    # Fold the WAL into the main file so that copying events.db alone copies everything
    # (EventLog.close() may leave a WAL behind when readers were used; see test_log.py).
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not db.with_name("events.db-wal").exists()
    return db


def _pristine_hash(pristine: Path, seq: int) -> bytes:
    if seq == 0:
        return GENESIS
    with EventLog(pristine, readonly=True) as log:
        (event,) = log.read_all(seq - 1, limit=1)
    return event.hash


def _copy(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "events.db"
    shutil.copyfile(pristine, target)
    return target


def _tamper(db: Path, fn: Tamper, k: int) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete")
        with conn:
            fn(conn, k)
    finally:
        conn.close()


def _row(conn: apsw.Connection, seq: int) -> tuple[object, ...]:
    rows = conn.execute("SELECT * FROM events WHERE seq = ?", (seq,)).fetchall()
    assert len(rows) == 1
    return rows[0]


def flip_data_byte(conn: apsw.Connection, k: int) -> None:
    data = bytearray(_row(conn, k)[7])  # type: ignore[arg-type]
    data[len(data) // 2] ^= 0x01
    conn.execute("UPDATE events SET data = ? WHERE seq = ?", (bytes(data), k))


def delete_event(conn: apsw.Connection, k: int) -> None:
    conn.execute("DELETE FROM events WHERE seq = ?", (k,))


def swap_with_next(conn: apsw.Connection, k: int) -> None:
    """Swap rows k and k+1 in every column but seq (for k = N, swap N-1 and N)."""
    k = min(k, N - 1)
    a, b = _row(conn, k), _row(conn, k + 1)
    conn.execute("DELETE FROM events WHERE seq IN (?, ?)", (k, k + 1))
    conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (k, *b[1:]))
    conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (k + 1, *a[1:]))


def insert_forged(conn: apsw.Connection, k: int) -> None:
    """Insert a self-consistent event at k, chained to the real k-1; renumber the rest."""
    prev = GENESIS if k == 1 else _row(conn, k - 1)[9]
    assert isinstance(prev, bytes)
    conn.execute("UPDATE events SET seq = -seq WHERE seq >= ?", (k,))
    conn.execute("UPDATE events SET seq = 1 - seq WHERE seq < 0")
    forged = _new(SessionStarted(model="m", client="forged"))
    fields = ("forged-stream", 1, forged.type, forged.schema_version,
              "2020-01-01T00:00:00.000000+00:00", None, forged.data)
    digest = event_hash(prev, k, *fields)
    # A careful forger numbers the new stream too, so the insert trigger lets it through.
    conn.execute("INSERT INTO streams (name) VALUES ('forged-stream')")
    number = conn.execute("SELECT no FROM streams WHERE name = 'forged-stream'").fetchall()[0][0]
    conn.execute(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (k, *fields, prev, digest, number),
    )


def overwrite_hash(conn: apsw.Connection, k: int) -> None:
    conn.execute(
        "UPDATE events SET hash = ? WHERE seq = ?", (hashlib.sha256(b"forged").digest(), k)
    )


TAMPERS: list[tuple[str, Tamper, str]] = [
    ("flip-data-byte", flip_data_byte, "modified"),
    ("delete", delete_event, "missing"),
    ("swap-with-next", swap_with_next, "reordered"),
    ("insert-forged", insert_forged, "inserted"),
    ("overwrite-hash", overwrite_hash, "modified"),
]


CASES = [
    pytest.param(fn, kind, k, id=f"{name}-{k}")
    for name, fn, kind in TAMPERS
    for k in KS
    # deleting the newest event is truncation, which the chain cannot reveal on its own:
    # see test_truncation_of_the_newest_event_leaves_a_valid_shorter_chain
    if not (fn is delete_event and k == N)
]


@pytest.mark.parametrize(("fn", "kind", "k"), CASES)
def test_tamper_is_located_and_classified(
    pristine: Path, tmp_path: Path, fn: Tamper, kind: str, k: int
) -> None:
    bad = min(k, N - 1) if fn is swap_with_next else k
    db = _copy(pristine, tmp_path)
    _tamper(db, fn, k)

    with EventLog(db, readonly=True) as log:
        report = verify_chain(log.read_all())
    assert not report.ok
    assert (report.first_bad_seq, report.kind, report.clean_through) == (bad, kind, bad - 1)
    # the counts and head hash describe the intact prefix, never the damaged event
    assert report.events == bad - 1
    assert report.head_hash == _pristine_hash(pristine, bad - 1).hex()

    replayed = replay(db, [StreamsView()], verify=True)
    assert not replayed.ok
    assert (replayed.first_bad_seq, replayed.kind) == (bad, kind)
    assert replayed.events == bad - 1
    assert replayed.head_hash == report.head_hash


def test_pristine_copy_verifies(pristine: Path, tmp_path: Path) -> None:
    db = _copy(pristine, tmp_path)
    with EventLog(db, readonly=True) as log:
        report = verify_chain(log.read_all())
        head_seq, head_hash = log.head()
    assert report.ok
    assert (report.events, report.clean_through, report.head_hash) == (N, N, head_hash.hex())
    assert head_seq == N
    replayed = replay(db, [StreamsView()], verify=True)
    assert replayed.ok, replayed
    assert (replayed.events, replayed.head_hash) == (N, head_hash.hex())


def test_truncation_of_the_newest_event_leaves_a_valid_shorter_chain(
    pristine: Path, tmp_path: Path
) -> None:
    """Documented limit: only an anchor kept elsewhere (the old head hash) reveals it."""
    db = _copy(pristine, tmp_path)
    with EventLog(db, readonly=True) as log:
        old_head = log.head()
    _tamper(db, delete_event, N)
    with EventLog(db, readonly=True) as log:
        report = verify_chain(log.read_all())
        new_head = log.head()
    assert report.ok
    assert report.events == N - 1
    assert new_head[0] == N - 1
    assert new_head[1] != old_head[1]  # an anchored head hash would no longer match
