"""The log grows with a session's distinct content, not with the square of its history.

A 200-call session whose history grows to about 1 MB is recorded as the daemon records
it: each call's request record names only the messages it added to the previous call's
governed history, with those contents in the same append. The database file must grow
by well under twice the distinct content (the issue's bound), with or without help from
compression.
"""

import base64
import random
from pathlib import Path

import pytest
from sessionwarden.domain.context.transcript import content_key, sent_items
from sessionwarden.events import CODEC, CallAdmitted
from sessionwarden.store import EventLog

from tests.support.recorded import RecordedSession

CALLS = 200
HISTORY_BYTES = 1_000_000  # what the history holds at the last call
COMPRESSED_AT = 40

_WORDS = [
    "the", "file", "line", "error", "test", "result", "tool", "call", "read", "write",
    "patch", "function", "return", "value", "module", "import", "class", "self", "args",
    "none", "true", "false", "for", "while", "if", "else",
]


def prose(rng: random.Random, size: int) -> str:
    """Text that compresses about as well as tool output does (~3×)."""
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS) if rng.random() < 0.8 else f"{rng.getrandbits(24):x}"
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def noise(rng: random.Random, size: int) -> str:
    """Text that does not compress (base64 of random bytes)."""
    return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]


def message(role: str, text: str) -> bytes:
    return ('{"role":"%s","content":"%s"}' % (role, text)).encode()  # noqa: UP031


@pytest.mark.parametrize("kind", ["prose", "noise"])
def test_a_200_call_session_costs_well_under_twice_its_distinct_content(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "events.db"
    EventLog(db).close()
    empty = db.stat().st_size
    rng = random.Random(11)
    text = prose if kind == "prose" else noise
    per_call = HISTORY_BYTES // (CALLS - COMPRESSED_AT)
    with EventLog(db) as log:
        session = RecordedSession(log, "s1", message("system", text(rng, 6000)))
        for n in range(CALLS):
            # sizes spread as tool output's are (median about half the mean)
            spread = rng.lognormvariate(0, 1) / 1.65
            new = [message("assistant", text(rng, per_call // 5)),
                   message("tool", text(rng, int(per_call * 4 // 5 * spread)))]
            restart = None
            if n == COMPRESSED_AT:  # a compression: a summary, then the newest ten messages
                restart = [message("user", "summary: " + text(rng, 3000)),
                           *session.history[-10:]]
            session.call(f"c{n:03d}", new, restart=restart)
        records = {
            r.call_id: r.request for r in (
                CODEC.decode(e.type, e.data) for e in log.read_stream("session-s1"))
            if isinstance(r, CallAdmitted) and r.request is not None}
        # every distinct content sent, including the messages compressed away
        distinct = dict(
            ref for r in records.values()
            for ref in (*([r.fields] if r.fields else []), *(r.system or ()), *r.appended))
        # the last call's history rebuilds from the chain, and is what was sent
        history = sent_items(session.last_call, records.get).history
        assert [k for k, _ in history] == [content_key(m) for m in session.history]
    assert sum(len(m) for m in session.history) > 0.8 * HISTORY_BYTES
    growth = db.stat().st_size - empty
    content_bytes = sum(distinct.values())
    ratio = growth / content_bytes
    assert ratio < 1.5, (
        f"{kind}: the database grew by {growth:,} bytes for {content_bytes:,} bytes of "
        f"distinct content: {ratio:.2f}x")
