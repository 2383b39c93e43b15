"""``view_responses``: the responses the daemon relayed, by id — what a chain continues.

A Responses request may send only its new items and name the response it continues
(``previous_response_id``); the rest of its history is stored at the provider. The proxy
reads this view to name such a request's session and to count the chain in its estimate.

Rules:

Each completed call records the id of the response it made (CallCompleted's
``response_id``); the view keeps, per id, its session and the chain's size once it was
made: the prompt the provider counted for it (cache reads and writes included) plus what
it generated, which is what a request continuing it carries before its own items. Like
every view it is applied in the transaction of its events, so a client that got a
response can continue it at once, and rebuilt identically by ``replay``: the chain's
session and size survive a restart.
"""

from collections.abc import Sequence
from typing import NamedTuple

import apsw
from sessionwarden.domain.session import session_id_of
from sessionwarden.events import CODEC, CallCompleted
from sessionwarden.store import RecordedEvent

__all__ = ["Chain", "ResponsesView", "chain_of"]

_COMPLETED = CODEC.tags_of(CallCompleted)


class Chain(NamedTuple):
    """What the log knows of a stored response: its session and the chain's tokens."""

    session_id: str
    tokens: int


class ResponsesView:
    """``view_responses``: (response id, session, call, the chain's tokens) per response."""

    name = "responses"
    tables: tuple[str, ...] = ("view_responses",)

    def create(self, conn: apsw.Connection) -> None:
        """Create ``view_responses``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS view_responses ("
            " response_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, call_id TEXT NOT NULL,"
            " tokens INTEGER NOT NULL) WITHOUT ROWID"
        )

    def apply(self, conn: apsw.Connection, events: Sequence[RecordedEvent]) -> None:
        """Fold the CallCompleted that name a response (older versions name none)."""
        for e in events:
            if e.type not in _COMPLETED:
                continue
            session_id = session_id_of(e.stream)
            if session_id is None:
                continue
            event = CODEC.decode(e.type, e.data)
            assert isinstance(event, CallCompleted)
            if not event.response_id:
                continue
            tokens = (event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
                      + event.output_tokens)
            # An id is the provider's and unique; one seen again (a provider replaying
            # ids, a hostile upstream) keeps its first session: a later call cannot
            # pull another session's chain into its own.
            conn.execute("INSERT OR IGNORE INTO view_responses VALUES (?, ?, ?, ?)",
                         (event.response_id, session_id, event.call_id, tokens))


def chain_of(conn: apsw.Connection, response_id: str) -> Chain | None:
    """The session and size of the chain ending at ``response_id``; None if not relayed."""
    row = conn.execute("SELECT session_id, tokens FROM view_responses WHERE response_id = ?",
                       (response_id,)).fetchone()
    return None if row is None else Chain(str(row[0]), int(row[1]))
