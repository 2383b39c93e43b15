"""``status --session ID``: one session's usage and context, read from its stream in a real log."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.cli.main import main
from sessionwarden.cmd.daemon.config import load_config
from sessionwarden.domain.admission.caps_stage import SessionBudget
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CompactionRequested,
    ContextCompressed,
    RateLimitBucketSeen,
    RateLimitsObserved,
    SessionStarted,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog
from sessionwarden.views.session_status import read_status, status_json, status_text
from sessionwarden.views.wiring import default_projections

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CONFIG = """
[[providers]]
name = "openai"
base_url = "https://api.openai.com/v1"
[[models]]
name = "gpt-4o"
provider = "openai"
context_length = 400000
max_output_tokens = 16000
"""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Session ``work``: two calls, a spill, a failed summariser, a compression, a request."""
    path = tmp_path / "events.db"
    clock = Clock()
    stream = session_stream("work")
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        log.append(stream, [
            new_event(SessionStarted(model="openai/gpt-4o")),
            new_event(ToolResultSpilled(call_id="c1", message=2, tool="shell",
                                        file="0" * 32, chars=150_000, bytes=150_000)),
            new_event(CallAdmitted(call_id="c1", provider="openai", model="gpt-4o",
                                   estimated_tokens=70_000)),
            new_event(CallCompleted(call_id="c1", input_tokens=60_000,
                                    cache_read_tokens=12_000, output_tokens=500)),
        ])
        clock.now = T0 + timedelta(minutes=1)
        log.append(stream, [
            new_event(SummariserFailed(call_id="c2", model="openai/gpt-4o-mini",
                                       reason="HTTP 503 from the summary model",
                                       cooldown_s=600.0)),
            new_event(ContextCompressed(call_id="c2", summariser="builtin-fallback",
                                        tokens_before=80_000, tokens_after=20_000,
                                        threshold=64_000, summarised=40)),
            new_event(CallAdmitted(call_id="c2", provider="openai", model="gpt-4o",
                                   estimated_tokens=21_000)),
        ])
        clock.now = T0 + timedelta(minutes=2)
        log.append(stream, [new_event(CompactionRequested(focus="the failing\x1b[31m test"))])
    return path


def test_status_session_json(db: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    code, out, err = run(capsys, "status", "--db", str(db), "--session", "work", "--json",
                         "--config", str(config))
    assert (code, err) == (0, "")
    data = json.loads(out)
    # c2 is in flight: its estimate; the threshold of gpt-4o's window: (400K - 16K) x 0.5.
    assert data["context"] == {"tokens": 21_000, "source": "estimated", "call_id": "c2"}
    assert (data["threshold_tokens"], data["context_percent"]) == (192_000, 10.9)
    assert (data["calls"], data["provider"], data["model"]) == (2, "openai", "gpt-4o")
    assert (data["started_at"], data["last_at"]) == (  # as usage --json writes times
        "2026-12-01T09:00:00.000000+00:00", "2026-12-01T09:02:00.000000+00:00")
    assert data["compressions"] == 1
    last = data["last_compression"]
    assert (last["tokens_before"], last["tokens_after"], last["saved_tokens"],
            last["saved_percent"], last["summariser"]) == (80_000, 20_000, 60_000, 75.0,
                                                           "builtin-fallback")
    assert (data["spills"], data["spilled_bytes"], data["spills_truncated"]) == (1, 150_000, 0)
    assert data["summariser_failures"] == 1
    assert data["last_failure"]["cooldown_until"] == "2026-12-01T09:11:00.000000+00:00"
    assert data["pending_compaction"] == {"focus": "the failing\x1b[31m test",
                                          "requested_at": "2026-12-01T09:02:00.000000+00:00"}


def test_status_session_text_escapes_what_it_read(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    code, out, err = run(capsys, "status", "--db", str(db), "--session", "work")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == ["session: work", "model: openai/gpt-4o"]
    # No limits recorded (a log from before they were) and no config: gpt-4o has no
    # [[models]] entry, so the default window's trigger, said to be the configuration's.
    assert ("context: 21,000 / 64,000 tokens (32.8 %, estimated); window 128,000 "
            "(as configured now)") in lines
    assert lines[lines.index("compressions: 1") + 1] == (
        "  2026-12-01 09:01:00: threshold, builtin-fallback, made at the call, 80,000 -> "
        "20,000 tokens (saved 60,000, 75.0 %), 40 messages summarised")
    assert "spills: 1 (150,000 bytes)" in lines
    assert lines[lines.index("summariser failures: 1") + 1].startswith(
        "  last 2026-12-01 09:01:00: openai/gpt-4o-mini: HTTP 503")
    assert "cooldown until 2026-12-01 09:11:00 (over)" in out  # that was long ago
    assert "focus 'the failing\\x1b[31m test'" in out and "\x1b" not in out


def test_status_session_real_figure_after_a_completed_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    path = tmp_path / "events.db"
    with EventLog(path, projections=default_projections()) as log:
        log.append(session_stream("s1"), [
            new_event(SessionStarted(model="openai/gpt-4o")),
            new_event(CallAdmitted(call_id="c1", provider="openai", model="gpt-4o",
                                   estimated_tokens=900)),
            new_event(CallCompleted(call_id="c1", input_tokens=1000, cache_write_tokens=24)),
        ])
    code, out, _ = run(capsys, "status", "--db", str(path), "--session", "s1")
    assert code == 0 and "context: 1,024 / 64,000 tokens (1.6 %, real)" in out
    assert "compressions: 0\nspills: 0\nsummariser failures: 0\n" in out


def test_a_bad_config_is_one_line(db: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "status", "--db", str(db), "--session", "work",
                         "--config", str(tmp_path / "none.toml"))
    assert (code, out) == (78, "")
    assert len(err.splitlines()) == 1 and "config file not found" in err


def test_the_budget_and_the_notices_of_the_session(db: Path, tmp_path: Path) -> None:
    with EventLog(db, readonly=True) as log:
        status = read_status(log, load_config(None, {}), "work", T0)
    assert status is not None
    data = status_json(status)
    assert data["budget"] == {"session_id": "work", "cap": None, "spent": "0",
                              "reserved": "0", "left": None, "unknown_calls": 1, "parent": ""}
    assert data["notices"] == []
    text = status_text(status, T0)
    assert ("budget: no session cap (spent unknown: 1 call of unknown cost, "
            "with its subsessions)") in text.splitlines()
    assert "notice" not in text
    notice = {"provider": "p", "credential": "fp:k", "key": "credits.usage", "level": "warn",
              "message": "75 %\x1b[2J of the credits used", "band": 75,
              "raised_at": "2026-12-01T09:00:00.000000+00:00"}
    status = msgspec.structs.replace(
        status, budget=SessionBudget(session_id="work", cap="5", spent="1.25",
                                     reserved="0.5", left="3.25", parent="boss"),
        notices=(notice,))
    data = status_json(status)
    assert data["budget"]["left"] == "3.25" and data["notices"] == [notice]
    lines = status_text(status, T0).splitlines()
    budget = lines.index("budget left: ~$3.25 of $5 (spent ~$1.25, ~$0.50 reserved by calls "
                         "in flight; draws from session boss's cap too, with its subsessions)")
    assert lines[budget + 1] == ("notice: p fp:k: warn credits.usage: 75 %\\x1b[2J of the "
                                 "credits used")
    assert lines[budget + 2].startswith("context: ")


def test_the_rate_limit_line_is_the_key_the_latest_client_call_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    path = tmp_path / "events.db"
    clock = Clock()
    with EventLog(path, projections=default_projections(), clock=clock) as log:
        log.append(session_stream("s1"), [
            new_event(SessionStarted(model="openai/gpt-4o")),
            new_event(CallAdmitted(call_id="c1", provider="openai", model="gpt-4o")),
            new_event(CallCompleted(call_id="c1", input_tokens=10, credential="fp:main")),
            new_event(CallAdmitted(call_id="c2", provider="cheap", model="mini",
                                   purpose="summary", parent_call="c1")),
            new_event(CallCompleted(call_id="c2", input_tokens=10, credential="fp:side")),
        ])
        for provider, credential in (("openai", "fp:main"), ("cheap", "fp:side")):
            log.append(f"ratelimits-{provider}", [new_event(RateLimitsObserved(
                credential=credential, buckets=(
                    RateLimitBucketSeen("tokens", 30_000, 29_000, 0.5),
                    RateLimitBucketSeen("requests", 500, 0, 20.0))))])
    code, out, _ = run(capsys, "status", "--db", str(path), "--session", "s1", "--json")
    limits = json.loads(out)["rate_limits"]
    assert code == 0 and (limits["provider"], limits["credential"]) == ("openai", "fp:main")
    assert limits["buckets"][0] == {"name": "requests", "limit": 500, "remaining": 0,
                                    "reset_seconds": 20.0,
                                    "reset_at": "2026-12-01T09:00:20.000000+00:00"}
    # An empty bucket says until when; a spent one whose reset has passed does not.
    for now, until in ((T0, " (empty until 2026-12-01 09:00:20)"), (T0 + timedelta(hours=1), "")):
        with EventLog(path, readonly=True) as log:
            status = read_status(log, load_config(None, {}), "s1", now)
        assert status is not None
        assert ("rate limits: openai key fp:main (last recorded 2026-12-01 09:00:00): "
                f"requests 0/500 left{until}, tokens 29,000/30,000 left") in status_text(
                    status, now).splitlines()


def test_a_log_written_before_the_side_calls_view_still_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    path = tmp_path / "events.db"
    older = [p for p in default_projections()
             if p.name not in ("side_calls", "ratelimits")]
    with EventLog(path, projections=older) as log:
        log.append(session_stream("s1"), [
            new_event(SessionStarted(model="openai/gpt-4o")),
            new_event(CallAdmitted(call_id="c1", provider="openai", model="gpt-4o")),
            new_event(CallCompleted(call_id="c1", input_tokens=10, credential="fp:main")),
            new_event(CallAdmitted(call_id="c2", provider="openai", model="gpt-4o",
                                   purpose="summary", parent_call="c1")),
            new_event(CallCompleted(call_id="c2", input_tokens=5)),
        ])
    code, out, _ = run(capsys, "usage", "--db", str(path), "--json")
    [row] = json.loads(out)
    assert (code, row["requests"], row["side_calls"]) == (0, 2, [])
    code, out, _ = run(capsys, "status", "--db", str(path), "--session", "s1", "--json")
    data = json.loads(out)
    assert data["rate_limits"] is None and data["usage"]["side_calls"]["summary"]["requests"] == 1
    # The next writer with today's views catches the new one up from the start of the log.
    with EventLog(path, projections=default_projections()) as log:
        log.append(session_stream("s2"), [new_event(SessionStarted(model="openai/gpt-4o"))])
    code, out, _ = run(capsys, "usage", "--db", str(path), "--session", "s1", "--json")
    [row] = json.loads(out)
    assert [(s["purpose"], s["requests"], s["input_tokens"]) for s in row["side_calls"]] == [
        ("summary", 1, 5)]
