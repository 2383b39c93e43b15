"""Fixtures shared by the store's tests: a database path and an open log on it."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from sessionwarden.store import EventLog

from tests.store.store_support import writer_threads


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "events.db"


@pytest.fixture
def log(db: Path) -> Iterator[EventLog]:
    """An open log on ``db``; closing it must stop its writer thread."""
    before = len(writer_threads())
    with EventLog(db) as opened:
        yield opened
    assert len(writer_threads()) == before, "close() left the writer thread running"
