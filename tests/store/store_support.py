"""Helpers shared by the store's tests: events, the writer thread's name, a held write lock."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
from sessionwarden.events import CODEC, SessionStarted
from sessionwarden.store import NewEvent

WRITER_THREAD = "sw-store-writer"


def ev(data: str = "x", *, key: str | None = None, type_: str = "test.happened.v1") -> NewEvent:
    """A small event with ``data`` as its payload (not decodable: fine unless replayed)."""
    return NewEvent(type_, data.encode(), idempotency_key=key)


def session_ev(n: int = 0) -> NewEvent:
    """A real, decodable event (replay --verify decodes every event)."""
    encoded = CODEC.encode(SessionStarted(client=f"s-{n}", model="m"))
    return NewEvent(encoded.type, encoded.data, encoded.schema_version)


def writer_threads() -> list[threading.Thread]:
    """The store writer threads alive now (a closed log must leave none behind)."""
    return [t for t in threading.enumerate() if t.name == WRITER_THREAD]


@contextmanager
def write_lock(db: Path) -> Iterator[apsw.Connection]:
    """Hold the database's write lock from another connection (as another process would).

    The log's writer cannot commit until the block exits (or the caller commits).
    """
    conn = apsw.Connection(str(db))
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        if not conn.getautocommit():
            conn.execute("COMMIT")
    finally:
        conn.close()
