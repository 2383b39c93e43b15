"""The ``contents`` table: content-addressed data stored in the transaction of its append."""

import asyncio
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import apsw
import pytest
from sessionwarden.domain.context.transcript import content_key as domain_content_key
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import (
    ANY,
    NO_STREAM,
    Content,
    EventLog,
    ExpectedVersion,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    content_key,
    replay,
)
from sessionwarden.store.errors import StoreProgrammingError, WrongExpectedVersion

from tests.store.store_support import ev, session_ev, writer_threads
from tests.store.test_streams_table import plain, submit_as_one_group, user_version


def content(data: bytes) -> Content:
    return Content(content_key(data), data)


def prose(n: int, seed: int = 0) -> bytes:
    """``n`` bytes of compressible text (words, as in a message)."""
    words = [b"alpha", b"beta", b"gamma", b"delta", b"tool", b"result", b"file", b"line"]
    out = bytearray()
    i = seed
    while len(out) < n:
        out += words[(i * 7 + i // 3) % len(words)] + b" "
        i += 1
    return bytes(out[:n])


def rows(db: Path) -> list[tuple[str, bytes, int]]:
    with plain(db, readonly=True) as conn:
        return conn.execute("SELECT key, data, zlib FROM contents ORDER BY rowid").fetchall()


def append_with(log: EventLog, stream: str, *items: Content,
                expected: ExpectedVersion = ANY) -> None:
    log.append_batch([StreamAppend(stream, (session_ev(),), expected, contents=items)])


def test_the_store_and_the_domain_name_contents_alike() -> None:
    for data in (b"", b"x", prose(5000), os.urandom(300)):
        assert content_key(data) == domain_content_key(data)


def test_contents_are_stored_with_their_append_and_read_back(log: EventLog, db: Path) -> None:
    small, text, noise = b'{"role":"user"}', prose(20_000), os.urandom(4000)
    append_with(log, "s", content(small), content(text), content(noise))
    got = log.read_contents([content_key(small), content_key(text), content_key(noise), "0" * 32])
    assert got == {content_key(small): small, content_key(text): text,
                   content_key(noise): noise}
    flags = {key: flag for key, _, flag in rows(db)}
    # compressed only where it saves 10 %: text yes, random bytes and tiny JSON no
    assert flags == {content_key(small): 0, content_key(text): 1, content_key(noise): 0}
    stored = {key: data for key, data, _ in rows(db)}
    assert len(stored[content_key(text)]) < len(text) / 5


def test_the_same_content_in_200_appends_is_stored_once(log: EventLog, db: Path) -> None:
    system = prose(7000, seed=3)
    for i in range(200):
        append_with(log, f"s{i % 7}", content(system), content(f"message {i}".encode()))
    keys = [key for key, _, _ in rows(db)]
    assert len(keys) == 201
    assert keys.count(content_key(system)) == 1
    assert log.read_contents([content_key(system)]) == {content_key(system): system}


def test_a_conflicting_append_writes_none_of_its_contents(log: EventLog, db: Path) -> None:
    append_with(log, "s", content(b"first"))
    with pytest.raises(WrongExpectedVersion):
        append_with(log, "s", content(b"lost-1"), content(b"lost-2"), expected=NO_STREAM)
    assert [data for _, data, _ in rows(db)] == [b"first"]
    assert log.read_contents([content_key(b"lost-1")]) == {}


def test_in_one_group_only_the_committed_appends_store_contents(
    log: EventLog, db: Path
) -> None:
    log.append("taken", [ev()])
    done = submit_as_one_group(log, db, [
        [StreamAppend("a", (ev(),), NO_STREAM, contents=(content(b"kept-a"),))],
        [StreamAppend("taken", (ev(),), NO_STREAM, contents=(content(b"refused"),))],
        [StreamAppend("b", (ev(),), contents=(content(b"kept-b"), content(b"kept-a")))],
    ])
    assert [r.error is None for r in done] == [True, False, True]
    assert sorted(data for _, data, _ in rows(db)) == [b"kept-a", b"kept-b"]


class FailOn:
    """A projection that fails on one event type: its request must fail alone."""

    name = "fail_on"
    tables = ("fail_on",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS fail_on (seq INTEGER)")

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        for event in events:
            if event.type == "test.poison.v1":
                raise RuntimeError("poisoned")


def test_an_append_that_fails_while_written_leaves_no_contents(db: Path) -> None:
    with EventLog(db, projections=[FailOn()]) as log:
        log.append("plug", [ev()])
        done = submit_as_one_group(log, db, [
            [StreamAppend("a", (ev(),), contents=(content(b"good"),))],
            [StreamAppend("b", (ev(type_="test.poison.v1"),), contents=(content(b"bad"),))],
        ])
        assert done[0].error is None
        assert isinstance(done[1].error, StoreProgrammingError)
    assert [data for _, data, _ in rows(db)] == [b"good"]


def test_a_content_whose_key_is_not_its_hash_is_refused(log: EventLog, db: Path) -> None:
    with pytest.raises(StoreProgrammingError, match="not the key of its data"):
        append_with(log, "s", Content(content_key(b"this"), b"that"))
    with pytest.raises(StoreProgrammingError, match="Content"):
        append_with(log, "s", Content(content_key(b"x"), "x"))  # type: ignore[arg-type]
    assert rows(db) == []
    assert log.stream_version("s") == 0


def test_the_writer_used_directly_encodes_and_checks_contents(log: EventLog) -> None:
    writer = log._writer
    assert writer is not None
    good = writer.submit([StreamAppend("s", (ev(),), contents=(content(b"direct"),))])
    bad = writer.submit([StreamAppend("t", (ev(),), contents=(Content("0" * 32, b"x"),))])
    assert good.wait(10)
    with pytest.raises(StoreProgrammingError, match="not the key of its data"):
        bad.wait(10)
    assert log.read_contents([content_key(b"direct"), "0" * 32]) == {
        content_key(b"direct"): b"direct"}
    assert log.stream_version("t") == 0


def test_contents_are_immutable(log: EventLog, db: Path) -> None:
    append_with(log, "s", content(b"fixed"))
    with plain(db) as conn:
        with pytest.raises(apsw.ConstraintError, match="immutable"):
            conn.execute("UPDATE contents SET data = x'00'")
        with pytest.raises(apsw.ConstraintError, match="immutable"):
            conn.execute("DELETE FROM contents")
    assert [data for _, data, _ in rows(db)] == [b"fixed"]


def test_async_appends_store_contents(log: EventLog) -> None:
    async def go() -> None:
        await log.append_batch_async(
            [StreamAppend("s", (ev(),), contents=(content(b"from a loop"),))])

    asyncio.run(go())
    assert log.read_contents([content_key(b"from a loop")]) == {
        content_key(b"from a loop"): b"from a loop"}


def tamper(db: Path, sql: str, *args: object) -> None:
    with plain(db) as conn:
        conn.execute("DROP TRIGGER contents_no_update")
        conn.execute(sql, args)


def test_a_tampered_row_is_never_returned_and_verify_names_it(db: Path) -> None:
    text = prose(3000)
    with EventLog(db) as log:
        append_with(log, "s", content(b"honest"), content(text))
    assert replay(db, [], verify=True).ok
    tamper(db, "UPDATE contents SET data = ?, zlib = 0 WHERE key = ?",
           b"forged", content_key(text))
    with EventLog(db, readonly=True) as log:
        assert log.read_contents([content_key(text), content_key(b"honest")]) == {
            content_key(b"honest"): b"honest"}
    report = replay(db, [], verify=True)
    assert not report.ok
    assert report.kind == "content_modified"
    assert content_key(text) in report.detail


def test_a_row_that_is_not_zlib_is_reported_too(db: Path) -> None:
    with EventLog(db) as log:
        append_with(log, "s", content(prose(500)))
    tamper(db, "UPDATE contents SET data = ?", zlib.compress(b"x")[:-2])
    assert replay(db, [], verify=True).kind == "content_modified"


def test_verify_finds_a_referenced_content_that_is_not_stored(db: Path) -> None:
    present, absent = content(b"here"), content(b"nowhere")
    refs = {b"here": present.key, b"gone": absent.key}

    def references(event: object) -> list[str]:
        client = getattr(event, "client", "")
        return [refs[k] for k in refs if client == f"s-{k.decode()}"]

    with EventLog(db) as log:
        log.append_batch([StreamAppend("a", (session_ev_named("here"),), contents=(present,))])
        assert replay(db, [], verify=True, references=references).ok
        log.append_batch([StreamAppend("b", (session_ev_named("gone"),))])
    report = replay(db, [], verify=True, references=references)
    assert (report.ok, report.kind, report.first_bad_seq) == (False, "content_missing", 2)
    assert absent.key in report.detail


def session_ev_named(name: str) -> NewEvent:
    """A decodable event whose ``client`` is ``s-<name>`` (what ``references`` reads)."""
    encoded = CODEC.encode(SessionStarted(client=f"s-{name}", model="m"))
    return NewEvent(encoded.type, encoded.data, encoded.schema_version)


# -- schema 3 → 4 ----------------------------------------------------------------------------


def make_schema_3(db: Path) -> None:
    """A log as schema 3 wrote it: the same tables, no ``contents``."""
    with EventLog(db) as log:
        log.append("old", [session_ev(1), session_ev(2)])
    with plain(db) as conn:
        conn.execute("DROP TABLE contents; PRAGMA user_version = 3")


def test_a_schema_3_log_reads_as_one_without_contents(db: Path) -> None:
    make_schema_3(db)
    with EventLog(db, readonly=True) as log:
        assert [e.stream for e in log.read_all()] == ["old", "old"]
        assert log.read_contents(["0" * 32]) == {}
    assert replay(db, [], verify=True).ok
    assert user_version(db) == 3  # a reader changes nothing


def test_a_schema_3_log_is_migrated_by_a_writable_open(db: Path) -> None:
    make_schema_3(db)
    before = len(writer_threads())
    with EventLog(db) as log:
        append_with(log, "new", content(b"after the migration"))
        assert log.read_contents([content_key(b"after the migration")])
        assert [e.stream for e in log.read_all()] == ["old", "old", "new"]
    assert len(writer_threads()) == before
    assert user_version(db) == 4
    assert replay(db, [], verify=True).ok
    with plain(db) as conn, pytest.raises(apsw.ConstraintError, match="immutable"):
        conn.execute("DELETE FROM contents")
