"""One rule for a query that matches nothing: not an error.

``events``, ``usage`` and ``status`` exit 0 when their filters match nothing. The text
output says so (``events`` on stderr, so a pipe sees no lines); ``--json`` prints the
empty answer: no lines for ``events``, ``[]`` for ``usage``. ``status --session ID`` is
not a filter but names one session: one the log does not have is an error (exit 1).
"""

import json
from pathlib import Path

import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.session import session_stream
from sessionwarden.events import CallAdmitted, CallCompleted, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.wiring import default_projections


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A log with one session, ``alpha``, and one call of it in the ledger."""
    path = tmp_path / "events.db"
    sid, call = "alpha", "alpha-c1"
    with EventLog(path, projections=default_projections()) as log:
        log.append(session_stream(sid), [
            new_event(SessionStarted(model="openai/m")),
            new_event(CallAdmitted(call_id=call, provider="openai", model="m",
                                   message_count=1, estimated_tokens=5)),
            new_event(CallCompleted(call_id=call, status=200, latency_ms=1.0,
                                    credential="fp:aaaaaaaaaaaa", input_tokens=5,
                                    output_tokens=1)),
        ])
    return path


def test_the_fixture_matches_what_the_filters_name(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same filters with a name that exists do find something.
    assert len(run(capsys, "events", "--db", str(db), "--stream", "session-alpha")[1]
               .splitlines()) == 3
    assert len(json.loads(run(capsys, "usage", "--db", str(db), "--session", "alpha",
                              "--json")[1])) == 1
    assert json.loads(run(capsys, "status", "--db", str(db), "--session", "alpha",
                          "--json")[1])["calls"] == 1


@pytest.mark.parametrize("filters", [["--stream", "session-nobody"], ["--after", "4"],
                                     ["--limit", "0"]])
def test_events_matching_nothing(
    db: Path, capsys: pytest.CaptureFixture[str], filters: list[str]
) -> None:
    code, out, err = run(capsys, "events", "--db", str(db), *filters)
    assert (code, out) == (0, "")
    assert err == "no events recorded matching the filters\n"
    assert run(capsys, "events", "--db", str(db), "--json", *filters) == (0, "", "")


def test_events_of_an_empty_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "events.db"
    EventLog(db).close()
    assert run(capsys, "events", "--db", str(db)) == (0, "", "no events recorded\n")
    assert run(capsys, "events", "--db", str(db), "--json") == (0, "", "")


def test_usage_matching_nothing(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "usage", "--db", str(db), "--session", "nobody") == (
        0, "no calls recorded matching the filters\n", "")
    code, out, err = run(capsys, "usage", "--db", str(db), "--session", "nobody", "--json")
    assert (code, err) == (0, "") and json.loads(out) == []
    code, out, err = run(capsys, "usage", "--db", str(db), "--session", "nobody", "--csv")
    assert (code, err) == (0, "") and len(out.splitlines()) == 1  # the header only


def test_status_of_an_unknown_session_is_an_error(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ([], ["--json"]):
        code, out, err = run(capsys, "status", "--db", str(db), "--session", "nobody", *fmt)
        assert (code, out) == (1, "")
        assert err == f"sessionwarden: no session 'nobody' in {db}\n"
