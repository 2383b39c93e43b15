"""The SQLite schema of the event log, and how its connections are opened.

Every connection is opened here so every pragma is applied the same way: WAL, FULL
synchronous commits, a short busy timeout (the application retries with jitter on top, see
``sessionwarden.store.retry``), and no double-quoted string literals.

Files are created
0600; SQLite gives the ``-wal`` and ``-shm`` files the mode of the database file, so
creating the database under a 0077 umask covers all three without ever opening them
outside SQLite (closing a descriptor would drop SQLite's POSIX locks). Directories are
never created here: the caller decides whether a missing one may be made (the CLI makes
only its default state directory, 0700).
"""

import os
import threading
from pathlib import Path

import apsw
from sessionwarden.store.errors import CorruptStore, StoreError, StoreUnavailable

__all__ = [
    "BUSY_TIMEOUT_MS",
    "EVENT_COLUMNS",
    "SCHEMA_VERSION",
    "check_version",
    "connect",
    "default_db_path",
    "ensure_schema",
    "presize_wal",
    "query_int",
    "translate",
]

#: The log's format, stored in ``PRAGMA user_version``: bumped with every change to the
#: DDL below, and with every change to the stored events that older builds cannot read.
#: 1: text-keyed index; 2: numbered streams; 3: lean call records (two events per call,
#: no tag inside payloads); 4: the ``contents`` table. 1 and 2 only ever existed in
#: pre-release builds. A schema-3 log is migrated to 4 by the first writable open (one
#: table created, nothing rewritten); read-only, it reads as a log with no contents.
SCHEMA_VERSION = 4

#: SQLite's own busy handler waits this long before the application-level retry takes
#: over; long waits in the busy handler alone make writers convoy under FULL sync.
BUSY_TIMEOUT_MS = 100

_APPLICATION_ID = 0x53574431  # "SWD1": tells our files from other SQLite databases

#: The columns of an ``events`` row as the store's readers see them, in
#: :class:`~sessionwarden.store.records.RecordedEvent` order (``stream_no`` is internal).
EVENT_COLUMNS = (
    "seq, stream, version, type, schema_version, recorded_at, idempotency_key, data,"
    " prev_hash, hash"
)

# Streams are numbered in the order they first appear, and events are indexed by
# (stream_no, version) rather than by name. The index entries shrink from ~45 bytes to a
# few, and, what matters more, streams created together sit together in the index: a
# group commit touching the streams of recent sessions dirties a few adjacent leaves
# instead of one random leaf per event, and each dirty page is a WAL frame written
# inside the fsync-bound COMMIT. The name stays in every event row, so rows (and hashes)
# are self-describing. That the two agree is audited by ``replay --verify``
# (``sessionwarden.store.replay``, kind "misindexed") rather than by an insert trigger:
# the trigger cost 1.4 µs per event on the writer's critical path, and could not see a
# ``streams`` row edited after the fact, which the audit does.
_DDL = """
CREATE TABLE IF NOT EXISTS streams (
    no   INTEGER PRIMARY KEY,
    name TEXT    NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS events (
    seq             INTEGER PRIMARY KEY,
    stream          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    type            TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    recorded_at     TEXT    NOT NULL,
    idempotency_key TEXT,
    data            BLOB    NOT NULL,
    prev_hash       BLOB    NOT NULL,
    hash            BLOB    NOT NULL,
    stream_no       INTEGER NOT NULL,
    UNIQUE (stream_no, version)
);
-- Partial: most events carry no key, and a NULL entry per event would only cost writes.
CREATE UNIQUE INDEX IF NOT EXISTS events_idempotency_key ON events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only: UPDATE is forbidden'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only: DELETE is forbidden'); END;
CREATE TRIGGER IF NOT EXISTS streams_no_update BEFORE UPDATE ON streams
BEGIN SELECT RAISE(ABORT, 'stream numbers are permanent: UPDATE is forbidden'); END;
CREATE TRIGGER IF NOT EXISTS streams_no_delete BEFORE DELETE ON streams
BEGIN SELECT RAISE(ABORT, 'stream numbers are permanent: DELETE is forbidden'); END;
CREATE TABLE IF NOT EXISTS tracking (
    name     TEXT PRIMARY KEY,
    position INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Content-addressed data (``store/contents.py``): ``key`` names ``data`` (decompressed
# when ``zlib`` is 1). A rowid table: most rows are too large for ``WITHOUT ROWID``,
# whose rows spill to overflow pages past a tenth of a page.
_CONTENTS_DDL = """
CREATE TABLE IF NOT EXISTS contents (
    key  TEXT    NOT NULL UNIQUE,
    data BLOB    NOT NULL,
    zlib INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS contents_no_update BEFORE UPDATE ON contents
BEGIN SELECT RAISE(ABORT, 'stored contents are immutable: UPDATE is forbidden'); END;
CREATE TRIGGER IF NOT EXISTS contents_no_delete BEFORE DELETE ON contents
BEGIN SELECT RAISE(ABORT, 'stored contents are immutable: DELETE is forbidden'); END;
"""

#: The DDL that takes a log of schema N (the key) to N + 1: a writable open applies
#: them in order, in one transaction.
_MIGRATIONS = {3: _CONTENTS_DDL}

_umask_lock = threading.Lock()


def default_db_path(environ: dict[str, str] | None = None) -> Path:
    """The database path: ``SESSIONWARDEN_DB``, else the user's state directory."""
    env = os.environ if environ is None else environ
    explicit = env.get("SESSIONWARDEN_DB")
    if explicit:
        return Path(explicit)
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "sessionwarden" / "events.db"


def translate(exc: apsw.Error, path: Path) -> StoreError:
    """Map an apsw error to the store's error tree."""
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        return CorruptStore(f"{path}: the database is corrupt or not an event log ({exc})")
    if isinstance(exc, apsw.FullError):
        return StoreUnavailable(f"{path}: the disk is full")
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreUnavailable(f"{path}: the database is read-only")
    if isinstance(exc, apsw.CantOpenError | apsw.PermissionsError | apsw.AuthError):
        return StoreUnavailable(f"{path}: cannot open the database ({exc})")
    if isinstance(exc, apsw.IOError):
        return StoreUnavailable(f"{path}: I/O error ({exc})")
    return StoreUnavailable(f"{path}: {exc}")


#: The most WAL pages :func:`presize_wal` writes (16 MiB at 4 KiB pages).
_PRESIZE_MAX_PAGES = 4096


def connect(path: Path, *, readonly: bool = False) -> apsw.Connection:
    """Open a connection with the log's pragmas; create the file (0600) if writable.

    The file's directory must exist; it is never created here.

    Raises:
        StoreUnavailable: the file (read-only mode) or its directory is missing, or the
            file cannot be opened.
        CorruptStore: the file is not a SQLite database.
    """
    if path.is_dir():
        # SQLite would only say "disk I/O error" (or "unable to open") about a directory.
        raise StoreUnavailable(f"{path}: is a directory, not an event log file")
    if readonly:
        if not path.exists():
            raise StoreUnavailable(f"{path}: no event log here (nothing has been recorded)")
        flags = apsw.SQLITE_OPEN_READONLY
    else:
        # The store never creates directories: whether a missing one is a typo or a
        # first run is the caller's call (the CLI creates only its default directory).
        if not path.parent.is_dir():
            raise StoreUnavailable(f"{path.parent}: no such directory")
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        with _umask_lock:
            # The umask is process-wide; the lock keeps two of our own opens from
            # restoring each other's value.
            old = os.umask(0o077)
            try:
                conn = apsw.Connection(str(path), flags=flags)
            finally:
                os.umask(old)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.execute("PRAGMA trusted_schema = OFF")
        _check_identity(conn, path, readonly=readonly)
        if not readonly:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
            if mode != "wal":
                raise StoreUnavailable(f"{path}: cannot switch the database to WAL ({mode})")
            conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
    except apsw.Error as exc:
        raise translate(exc, path) from None
    return conn


def presize_wal(conn: apsw.Connection) -> None:
    """Grow the WAL file to its working size now, writing nothing to the log.

    Until the WAL first restarts, every commit appends to the file, and the fsync of a
    file that grew must also journal its new size and blocks: such a commit cost about
    twice one that overwrites blocks the file already has (300 vs 150 µs here). A
    transaction that spills one checkpoint interval's worth of pages and rolls back
    leaves the file at that size and the log untouched, so commits overwrite from the
    first one on. Costs about 5 ms, and nothing when the file already has that size (a
    second writer, or a reopen while another connection keeps the WAL).
    """
    pages = min(max(query_int(conn, "PRAGMA wal_autocheckpoint"), 0), _PRESIZE_MAX_PAGES)
    if not pages:
        return
    page_size = query_int(conn, "PRAGMA page_size")
    try:
        if os.stat(conn.filename_wal).st_size >= pages * page_size:
            return
    except FileNotFoundError:
        pass
    cache = query_int(conn, "PRAGMA cache_size")
    # A tiny page cache makes SQLite spill the dirty pages to the WAL before the commit
    # that never comes.
    conn.execute("PRAGMA cache_size = 16")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE sw_presize (b BLOB)")
            conn.execute("INSERT INTO sw_presize VALUES (zeroblob(?))", (pages * page_size,))
        finally:
            # SQLite rolls back by itself after SQLITE_FULL: a second ROLLBACK would
            # raise "no transaction is active" and hide the real error.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    except apsw.FullError:
        # A head start, not a need: on a full disk the log opens without it, and what
        # cannot be written then fails where it is written, as "the disk is full".
        pass
    finally:
        conn.execute(f"PRAGMA cache_size = {cache}")


def query_int(
    conn: apsw.Connection, sql: str, args: tuple[object, ...] = (), default: int = 0
) -> int:
    """The first column of the first row of ``sql`` as an int (``default`` if none)."""
    row = conn.execute(sql, args).fetchone()
    value = row[0] if row else None
    return value if isinstance(value, int) else default


def _check_identity(conn: apsw.Connection, path: Path, *, readonly: bool) -> None:
    """Refuse a SQLite file that is not ours before changing anything in it."""
    app_id = conn.execute("PRAGMA application_id").fetchall()[0][0]
    if app_id == _APPLICATION_ID:
        if readonly:  # a writable open checks inside ensure_schema's transaction
            check_version(query_int(conn, "PRAGMA user_version"), path, readonly=True)
        return
    tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0]
    if app_id == 0 and tables == 0:
        if readonly:
            raise StoreUnavailable(f"{path}: no event log here (nothing has been recorded)")
        return
    raise CorruptStore(f"{path}: this SQLite file is not a sessionwarden event log")


def check_version(version: int, path: Path, *, readonly: bool = False) -> None:
    """Refuse a log whose schema this version cannot read.

    ``readonly`` also accepts the schemas a writable open would migrate: their tables
    are a subset of the current ones, which readers treat as empty when missing.

    Raises:
        StoreUnavailable: the schema is newer, or one of the pre-release schemas.
    """
    if readonly and version in _MIGRATIONS:
        return
    if version > SCHEMA_VERSION:
        raise StoreUnavailable(
            f"{path}: written by a newer sessionwarden (schema {version}); upgrade"
        )
    if version < SCHEMA_VERSION:
        # Schemas 1 and 2 only ever existed in pre-release builds; no migration is kept.
        raise StoreUnavailable(
            f"{path}: written by a pre-release sessionwarden (schema {version}),"
            f" which this version cannot read; move it aside to start a new log"
        )


def ensure_schema(conn: apsw.Connection, path: Path) -> None:
    """Create the log's tables on a fresh file, or check an existing file is ours.

    An existing file of an older schema that has a migration is migrated, in the same
    transaction as the check: a crash leaves it at the old schema or at the new one.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            app_id = query_int(conn, "PRAGMA application_id")
            version = query_int(conn, "PRAGMA user_version")
            tables = query_int(conn, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'")
            if app_id == 0 and version == 0 and tables == 0:
                conn.execute(_DDL + _CONTENTS_DDL)
                conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif app_id != _APPLICATION_ID:
                raise CorruptStore(f"{path}: this SQLite file is not a sessionwarden event log")
            else:
                while version in _MIGRATIONS:
                    conn.execute(_MIGRATIONS[version])
                    version += 1
                    conn.execute(f"PRAGMA user_version = {version}")
                check_version(version, path)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except apsw.BusyError:
        raise  # another writer (a running daemon) holds the log: the caller's retry_busy waits
    except apsw.Error as exc:
        raise translate(exc, path) from None
