"""The event log: an append-only, hash-chained SQLite file, its views, replay and audit.

Public surface::

    EventLog            open a log; append, append_batch, submit, read_all, read_stream,
                        read_contents
    NewEvent, StreamAppend, Content, Tracking, AppendResult, RecordedEvent,
    ANY/NO_STREAM/EXISTS
    content_key         the key a Content is stored under
    Projection          the protocol of a derived view; StreamsView is the built-in one
    replay, ReplayReport, verify_chain, ChainReport
    InstanceLock        the single-instance claim of a daemon; read_announcement (and
                        Announcement): where the daemon holding a log listens
    errors              the store's error tree (see sessionwarden.store.errors)
"""

from sessionwarden.store import errors
from sessionwarden.store.hashing import content_key
from sessionwarden.store.lock import Announcement, InstanceLock, read_announcement
from sessionwarden.store.log import EventLog
from sessionwarden.store.projections import Projection
from sessionwarden.store.records import (
    ANY,
    EXISTS,
    NO_STREAM,
    AppendResult,
    Content,
    ExpectedVersion,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    StreamState,
    Tracking,
)
from sessionwarden.store.replay import ReplayReport, replay
from sessionwarden.store.schema import default_db_path
from sessionwarden.store.verify import ChainReport, verify_chain
from sessionwarden.store.views import StreamsView

__all__ = [
    "ANY",
    "EXISTS",
    "NO_STREAM",
    "Announcement",
    "AppendResult",
    "ChainReport",
    "Content",
    "EventLog",
    "ExpectedVersion",
    "InstanceLock",
    "NewEvent",
    "Projection",
    "RecordedEvent",
    "ReplayReport",
    "StreamAppend",
    "StreamState",
    "StreamsView",
    "Tracking",
    "content_key",
    "default_db_path",
    "errors",
    "read_announcement",
    "replay",
    "verify_chain",
]
