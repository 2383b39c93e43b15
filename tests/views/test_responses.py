"""``views/responses.py``: which session a response belongs to and its chain's size."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from sessionwarden.events import CallAdmitted, CallCompleted, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.responses import Chain, chain_of
from sessionwarden.views.wiring import default_projections

from tests.support.recorded import new_event


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    with EventLog(tmp_path / "events.db", projections=default_projections()) as opened:
        yield opened


def call(log: EventLog, session: str, call_id: str, **done: object) -> None:
    log.append(f"session-{session}", [
        new_event(SessionStarted(model="m")),
        new_event(CallAdmitted(call_id=call_id, provider="p", model="m", estimated_tokens=9)),
        new_event(CallCompleted(call_id=call_id, **done)),  # type: ignore[arg-type]
    ])


def test_a_response_names_its_session_and_the_chain_it_closes(log: EventLog) -> None:
    call(log, "a", "c1", input_tokens=100, cache_read_tokens=900, cache_write_tokens=50,
         output_tokens=25, reasoning_tokens=10, response_id="resp_1")
    conn = log.read_connection()
    # The whole prompt the provider counted (cached or not) and what it generated.
    assert chain_of(conn, "resp_1") == Chain("a", 1_075)
    assert chain_of(conn, "resp_unknown") is None


def test_a_call_without_a_response_id_adds_nothing(log: EventLog) -> None:
    call(log, "a", "c1", input_tokens=100)
    count = log.read_connection().execute("SELECT count(*) FROM view_responses").fetchone()
    assert count == (0,)


def test_an_id_seen_again_keeps_its_first_session(log: EventLog) -> None:
    call(log, "a", "c1", input_tokens=10, response_id="resp_1")
    # An upstream replaying an id must not pull session a's chain into session b.
    call(log, "b", "c2", input_tokens=99_999, response_id="resp_1")
    assert chain_of(log.read_connection(), "resp_1") == Chain("a", 10)
