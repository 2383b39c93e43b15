"""Content-addressed data stored with appends: the ``contents`` table.

An append may carry :class:`~sessionwarden.store.records.Content` items (a call's
request messages, for instance). Each is stored once under its key, the SHA-256 prefix
of its bytes (:func:`~sessionwarden.store.hashing.content_key`), with ``INSERT OR
IGNORE`` in the transaction that writes the append's events: a refused append writes
none of its contents, a committed one all of them, and a content sent by 200 calls is
one row.

Rows are immutable (triggers forbid UPDATE and DELETE); ``replay --verify``
rehashes every one.

A content is compressed with zlib level 1 when that saves at least 10 % (``zlib`` = 1).
On the benchmark session's 2,001 messages (7.2 MB of JSON) that stores 34 % of the
bytes, for 13 µs of compression per KB, paid in the appender's thread (here, in
:func:`encode_contents`), never in the writer's. Rows stay in a rowid table with a
unique index on the key rather than a ``WITHOUT ROWID`` one: most contents are larger
than the tenth of a page past which a ``WITHOUT ROWID`` row spills to overflow pages,
and the file measured 1.31 × larger that way.
"""

import zlib
from collections.abc import Iterable, Iterator, Sequence

import apsw
from sessionwarden.store.errors import StoreProgrammingError
from sessionwarden.store.hashing import content_key
from sessionwarden.store.records import StreamAppend

__all__ = [
    "ContentRow",
    "decode_content",
    "encode_contents",
    "has_contents",
    "intact",
    "iter_contents",
    "missing_contents",
    "read_stored",
]

#: A ``contents`` row: key, stored bytes, 1 if they are zlib-compressed.
ContentRow = tuple[str, bytes, int]

#: Compress only when it saves at least this share of the bytes: decompressing costs
#: every reader, and a few percent of a small message is not worth it.
_MIN_SAVING = 0.10
#: Below this size zlib's own header and checksum eat any saving.
_MIN_COMPRESS = 64
_LEVEL = 1  # level 6 stores 30.0 % instead of 33.6 %, at half the speed
#: Keys per ``IN (…)`` query, well below SQLite's bound-parameter limit.
_KEYS_PER_QUERY = 500
_PAGE = 500


def encode_contents(appends: Sequence[StreamAppend]) -> list[ContentRow]:
    """The rows to store for the contents of ``appends``, each key once.

    Raises:
        StoreProgrammingError: a content is not a ``Content`` with ``str`` key and
            ``bytes`` data, or its key is not the key of its data.
    """
    rows: dict[str, ContentRow] = {}
    for part in appends:
        for content in getattr(part, "contents", ()):
            key, data = getattr(content, "key", None), getattr(content, "data", None)
            if not isinstance(key, str) or not isinstance(data, bytes):
                raise StoreProgrammingError("contents must be Content with str key, bytes data")
            if key in rows:
                continue
            if content_key(data) != key:
                raise StoreProgrammingError(f"content {key!r} is not the key of its data")
            rows[key] = _encoded(key, data)
    return list(rows.values())


def _encoded(key: str, data: bytes) -> ContentRow:
    if len(data) >= _MIN_COMPRESS:
        packed = zlib.compress(data, _LEVEL)
        if len(packed) <= len(data) * (1 - _MIN_SAVING):
            return key, packed, 1
    return key, data, 0


def decode_content(stored: bytes, compressed: int) -> bytes:
    """A content's bytes from its stored form.

    Raises:
        zlib.error: ``stored`` claims to be compressed and is not.
    """
    return zlib.decompress(stored) if compressed else stored


def has_contents(conn: apsw.Connection) -> bool:
    """Whether the database has a ``contents`` table.

    A schema-3 log opened read-only has none until a writer migrates it.
    """
    row = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'contents'"
    ).fetchone()
    return row is not None


def read_stored(conn: apsw.Connection, keys: Iterable[str]) -> dict[str, bytes]:
    """The stored contents among ``keys``, decompressed.

    Keys not stored are left out, and so are rows whose bytes are not those of their key
    (damaged or tampered with: ``replay --verify`` names them), so what is returned is
    always what was appended.
    """
    wanted = list(dict.fromkeys(keys))
    found: dict[str, bytes] = {}
    if not wanted or not has_contents(conn):
        return found
    for start in range(0, len(wanted), _KEYS_PER_QUERY):
        chunk = wanted[start : start + _KEYS_PER_QUERY]
        marks = ", ".join("?" * len(chunk))
        for key, stored, compressed in conn.execute(
            f"SELECT key, data, zlib FROM contents WHERE key IN ({marks})", chunk
        ):
            data = intact(key, stored, compressed)
            if data is not None:
                found[key] = data
    return found


def intact(key: object, stored: object, compressed: object) -> bytes | None:
    """A row's content if its bytes are those of its key, else None."""
    if not isinstance(key, str) or not isinstance(stored, bytes) or compressed not in (0, 1):
        return None
    try:
        data = decode_content(stored, int(compressed))
    except zlib.error:
        return None
    return data if content_key(data) == key else None


def missing_contents(conn: apsw.Connection, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` that have no row (without reading any content)."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return set()
    if not has_contents(conn):
        return set(wanted)
    present: set[str] = set()
    for start in range(0, len(wanted), _KEYS_PER_QUERY):
        chunk = wanted[start : start + _KEYS_PER_QUERY]
        marks = ", ".join("?" * len(chunk))
        present.update(
            key for (key,) in conn.execute(
                f"SELECT key FROM contents WHERE key IN ({marks})", chunk)
        )
    return set(wanted) - present


def iter_contents(conn: apsw.Connection) -> Iterator[tuple[object, object, object]]:
    """Every stored row as it is (key, stored bytes, zlib flag), in insertion order.

    Read in pages, each its own short read transaction. Values are not type-checked:
    this is what an audit reads, and a tampered row may hold anything.
    """
    if not has_contents(conn):
        return
    after: object = 0
    while True:
        rows = conn.execute(
            "SELECT rowid, key, data, zlib FROM contents WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, _PAGE),
        ).fetchall()
        for rowid, key, stored, compressed in rows:
            after = rowid
            yield key, stored, compressed
        if len(rows) < _PAGE:
            return
