"""The live page's board folds sessions, caps, keys and breakers from recorded events."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    BUDGETS_STREAM,
    CODEC,
    BreakerChanged,
    CallAdmitted,
    CallCompleted,
    CallRefused,
    ContextCompressed,
    ContextLimits,
    CredentialAdded,
    Event,
    GuardrailTripped,
    IterationCounted,
    KeyStateChanged,
    SessionCapSet,
    SessionStarted,
    ToolResultSpilled,
)
from sessionwarden.store import RecordedEvent
from sessionwarden.views.board import LIVE_FOR, Board

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Recorder:
    """Recorded events, one second apart, as the log would hand them to the board."""

    def __init__(self) -> None:
        self.seq = 0
        self.board = Board(default_cap=Decimal("5"))

    def add(self, stream: str, event: Event) -> None:
        self.seq += 1
        encoded = CODEC.encode(event)
        at = (T0 + timedelta(seconds=self.seq)).isoformat()
        self.board.add(RecordedEvent(self.seq, stream, 1, encoded.type, encoded.schema_version,
                                     at, None, encoded.data, b"", b""))

    def call(self, session: str, call_id: str, *, estimate: int, prompt: int, cost: str | None,
             credential: str = "fp-a", purpose: str = "") -> None:
        stream = session_stream(session)
        self.add(stream, CallAdmitted(call_id, "openai", "gpt-x", estimated_tokens=estimate,
                                      purpose=purpose,
                                      limits=ContextLimits(threshold=1000, window=2000)))
        self.add(stream, CallCompleted(call_id, status=200, credential=credential,
                                       input_tokens=prompt - 100, cache_read_tokens=100,
                                       output_tokens=7, cost=cost,
                                       cost_status="actual" if cost else "unknown"))


def test_a_session_shows_its_latest_context_its_spend_and_its_cap() -> None:
    r = Recorder()
    r.add(session_stream("s1"), SessionStarted("openai/gpt-x", client="agent/1"))
    r.call("s1", "c1", estimate=300, prompt=310, cost="0.10")
    r.call("s1", "c2", estimate=700, prompt=690, cost="0.0000001")
    row = r.board.snapshot(T0 + timedelta(seconds=5))["sessions"][0]
    assert row["id"] == "s1" and row["client"] == "agent/1" and row["calls"] == 2
    # The provider's count of the latest call, not the estimate; the limits it ran under.
    assert row["context"] == {"tokens": 690, "source": "real", "threshold": 1000,
                              "window": 2000}
    assert row["spent"] == "0.1000001" and row["cap"] == "5"  # exact, the default cap
    assert row["last_status"] == 200 and row["last_outcome"] == "ok" and row["live"]


def test_a_side_call_is_metered_but_never_the_context_figure() -> None:
    r = Recorder()
    r.call("s1", "c1", estimate=900, prompt=905, cost="0.01")
    r.call("s1", "sum1", estimate=50, prompt=60, cost="0.02", purpose="summary")
    row = r.board.snapshot(T0)["sessions"][0]
    assert row["calls"] == 1 and row["side_calls"] == 1
    assert row["context"]["tokens"] == 905 and row["spent"] == "0.03"


def test_compactions_spills_refusals_and_runaway_are_counted() -> None:
    r = Recorder()
    stream = session_stream("s1")
    r.call("s1", "c1", estimate=900, prompt=905, cost=None)
    r.add(stream, ToolResultSpilled("c2", 3, bytes=50_000))
    r.add(stream, ContextCompressed("c2", tokens_before=1200, tokens_after=400))
    # The call the compression served is admitted after it: its estimate is the figure.
    r.add(stream, CallAdmitted("c2", "openai", "gpt-x", estimated_tokens=400))
    r.add(stream, CallRefused("c3", "budgets", 429, "cap reached", "session_cap"))
    r.add(stream, GuardrailTripped("c4", "exact_failure", tool="shell", count=2))
    r.add(stream, IterationCounted("c5", "t1", 4, 3, decision="grace"))
    row = r.board.snapshot(T0)["sessions"][0]
    assert row["spills"] == 1 and row["compressions"] == 1 and row["tokens_saved"] == 800
    assert row["context"] == {"tokens": 400, "source": "estimated", "threshold": 1000,
                              "window": 2000}
    assert row["refused"] == 1 and row["last_outcome"] == "refused: session_cap"
    assert row["unknown_cost_calls"] == 1 and row["spent"] == "0"  # never a silent $0
    assert row["guardrail_warnings"] == 1 and row["stopped_by"] == "iteration budget"
    r.add(stream, IterationCounted("c6", "t2", 1, 3))  # a new turn
    assert r.board.snapshot(T0)["sessions"][0]["stopped_by"] is None


def test_a_cap_set_or_lifted_holds_the_subtree() -> None:
    r = Recorder()
    r.add(session_stream("parent"), SessionStarted("openai/gpt-x"))
    r.add(session_stream("child"), SessionStarted("openai/gpt-x", parent_session_id="parent"))
    r.call("parent", "p1", estimate=10, prompt=200, cost="1.5")
    r.call("child", "k1", estimate=10, prompt=200, cost="0.25")
    r.add(BUDGETS_STREAM, SessionCapSet("parent", "2.00"))
    r.add(BUDGETS_STREAM, SessionCapSet("child", None))
    rows = {s["id"]: s for s in r.board.snapshot(T0)["sessions"]}
    assert rows["parent"]["cap"] == "2.00" and rows["parent"]["subtree_spent"] == "1.75"
    assert rows["child"]["cap"] is None and rows["child"]["parent"] == "parent"


def test_sessions_go_quiet_and_the_latest_come_first() -> None:
    r = Recorder()
    r.call("old", "a", estimate=1, prompt=101, cost="0")
    r.call("new", "b", estimate=1, prompt=101, cost="0")
    later = T0 + LIVE_FOR + timedelta(seconds=3)
    snap = r.board.snapshot(later)
    assert [s["id"] for s in snap["sessions"]] == ["new", "old"]
    assert [s["live"] for s in snap["sessions"]] == [True, False]
    assert snap["live_sessions"] == 1 and snap["total_sessions"] == 2
    assert [s["id"] for s in r.board.snapshot(later, limit=1)["sessions"]] == ["new"]


def test_keys_show_their_state_their_calls_and_a_bench_that_ended() -> None:
    r = Recorder()
    r.add("credentials-openai", CredentialAdded("openai", "env:A", "fp-a"))
    r.add("credentials-openai", CredentialAdded("openai", "env:B", "fp-b"))
    r.call("s1", "c1", estimate=1, prompt=101, cost="0")
    until = (T0 + timedelta(minutes=1)).isoformat()
    r.add("credentials-openai", KeyStateChanged("openai", "fp-b", "cooling", at=until,
                                                until=until, reason="transient_limit"))
    r.add("ratelimits-openai", BreakerChanged("openai", "open", reason="overload"))
    openai = r.board.snapshot(T0)["providers"]["openai"]
    keys = {k["fingerprint"]: k for k in openai["keys"]}
    assert keys["fp-a"]["calls"] == 1 and keys["fp-a"]["state"] == "ok"
    assert keys["fp-b"]["state"] == "cooling" and keys["fp-b"]["reason"] == "transient_limit"
    assert openai["breaker"]["state"] == "open"
    after = r.board.snapshot(T0 + timedelta(minutes=2))["providers"]["openai"]
    assert {k["fingerprint"]: k["state"] for k in after["keys"]}["fp-b"] == "ok"


def test_a_long_log_is_caught_up_in_steps(tmp_path: Path) -> None:
    from sessionwarden.store import EventLog, NewEvent
    from sessionwarden.views.board import LiveBoard

    with EventLog(tmp_path / "events.db") as log:
        for n in range(5):
            encoded = CODEC.encode(SessionStarted("openai/gpt-x"))
            log.append(session_stream(f"s{n}"), [
                NewEvent(encoded.type, encoded.data, encoded.schema_version)])
        live = LiveBoard(log, limit=2)
        steps = []
        while True:
            snap = live.snapshot(T0)
            steps.append(snap["total_sessions"])
            if snap["caught_up"]:
                break
        assert steps == [2, 4, 5] and snap["position"] == 5
