"""``status --session ID``: one session's context, read from its stream in a real log."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.main import main
from sessionwarden.cmd.wiring import default_projections
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    CompactionRequested,
    ContextCompressed,
    SessionStarted,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog

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
    # No config: gpt-4o has no [[models]] entry, so the default window's trigger.
    assert "context: 21,000 / 64,000 tokens (32.8 %, estimated)" in lines
    assert lines[lines.index("compressions: 1") + 1] == (
        "  last 2026-12-01 09:01:00: threshold, builtin-fallback, 80,000 -> 20,000 tokens "
        "(saved 60,000, 75.0 %), 40 messages summarised")
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
