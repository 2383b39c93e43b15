"""Writing many rows with few SQLite calls, for the writer and for projections.

apsw releases the GIL around every step of a statement, and ``executemany`` steps once
per row. Inside the writer's transaction each release is a chance for one of the waiting
appender threads to take the GIL, so the writer pays a hand-off per row it writes. One
``INSERT ... VALUES (...), (...), ...`` of up to :data:`CHUNK` rows is one step: the
writer keeps the GIL while it binds, and gives it up once, for SQLite's own work.
"""

from collections.abc import Iterable, Sequence
from functools import lru_cache

import apsw

__all__ = ["CHUNK", "insert_rows"]

#: Rows per statement: 64 rows of 11 columns stay far below SQLite's bound-parameter
#: limit, and every chunk size up to this is a distinct statement for apsw's cache.
CHUNK = 64


@lru_cache(maxsize=512)
def _statement(head: str, width: int, rows: int, tail: str) -> str:
    one = "(" + ", ".join("?" * width) + ")"
    return f"{head} VALUES {', '.join([one] * rows)}{tail}"


def insert_rows(
    conn: apsw.Connection,
    head: str,
    rows: Iterable[Sequence[object]],
    *,
    tail: str = "",
) -> None:
    """Run ``{head} VALUES (row), (row), ...{tail}`` over ``rows``, in chunks.

    ``head`` is e.g. ``"INSERT INTO t"`` and ``tail`` e.g. an ``ON CONFLICT`` clause; all
    rows must have the same width. The SQL text must not depend on data: values are
    always bound as parameters.
    """
    batch = rows if isinstance(rows, list) else list(rows)
    if not batch:
        return
    width = len(batch[0])
    if any(len(row) != width for row in batch):
        # Flattened, ragged rows would be silently realigned into the wrong columns.
        raise ValueError("insert_rows needs rows of one width")
    for start in range(0, len(batch), CHUNK):
        chunk = batch[start : start + CHUNK]
        conn.execute(
            _statement(head, width, len(chunk), tail),
            [value for row in chunk for value in row],
        )
