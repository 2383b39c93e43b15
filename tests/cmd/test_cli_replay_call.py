"""``replay --session ID --call N``: the exact request a call sent, rebuilt from the log.

The log is built through EventLog as the daemon records a governed session (the
admission's events and the request's contents in one append, the completion after), on a
real SQLite file, and read back through ``main()``.
"""

import json
from pathlib import Path

import apsw
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.context.transcript import content_key, content_ref
from sessionwarden.domain.session import session_stream
from sessionwarden.events import (
    CallAdmitted,
    CallRefused,
    ContextCompressed,
    HistoryReset,
    RequestRecord,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.store import EventLog
from sessionwarden.text import json_safe
from sessionwarden.views.wiring import default_projections

from tests.support.recorded import RecordedSession, new_event

SYSTEM = b'{"role":"system","content":"You are terse. Today is 2026-12-01."}'
FIELDS = b'{"model":"up-model","temperature":0.25,"stream":false,"tools":[]}'
SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"


def msg(role: str, text: str) -> bytes:
    return json.dumps({"role": role, "content": text}, separators=(",", ":")).encode()


SPILL = ToolResultSpilled(call_id="c2", message=3, tool="terminal", file="ab12cd34.txt",
                          chars=150_000, bytes=150_000, preview_chars=1_500)
COMPRESSED = ContextCompressed(
    call_id="c3", summariser="builtin-fallback", model="small", source="real",
    tokens_before=120_000, tokens_after=30_000, threshold=96_000, messages_before=5,
    messages_after=3, summarised=3, pruned=1, summary=("0" * 32, 10))
FAILED = SummariserFailed(call_id="c3", model="small", reason="upstream 503",
                          cooldown_s=60.0)
SIDE_CALL = CallAdmitted(call_id="side", provider="p1", model="small", purpose="summary",
                         parent_call="c3")


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, RecordedSession]:
    """Session s1: four calls (a spill, a compression), then one refused call."""
    db = tmp_path / "events.db"
    with EventLog(db, projections=default_projections()) as log:
        s = RecordedSession(log, "s1", SYSTEM, FIELDS)
        s.call("c1", [msg("user", "list the files")])
        s.call("c2", [msg("assistant", "running ls"), msg("tool", "a.py\nb.py [preview]")],
               decisions=[SPILL])
        s.call("c3", [msg("user", "now fix \u202e b.py")],
               restart=[msg("user", "summary: listed files"), *s.history[-1:]],
               decisions=[COMPRESSED, FAILED])
        log.append(session_stream("s1"), [new_event(SIDE_CALL)])
        s.call("c4", [msg("assistant", "done")])
        log.append(session_stream("s1"), [new_event(CallRefused(
            call_id="refused", stage="budget", status=429, reason="over budget"))])
    return db, s


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def text_body(out: str) -> object:
    """The body part of the text output (after the header's blank line)."""
    return json.loads(out.split("\n\n", 1)[1])


@pytest.mark.parametrize("call", ["c1", "c2", "c3", "c4"])
def test_each_call_s_body_is_rebuilt_exactly(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str], call: str
) -> None:
    db, session = recorded
    number = str(session.calls.index(call) + 1)
    code, out, err = run(capsys, "replay", "--db", str(db), "--session", "s1",
                         "--call", number, "--json")
    assert (code, err) == (0, "")
    expected = session.bodies[call]
    got = json.loads(out)
    assert got["request"] == json.loads(expected)
    # the body is spliced in as sent: its bytes are in the output as they are (only the
    # characters a terminal would act on escaped, which decode to the same values)
    assert json_safe(expected.decode()) in out
    assert got["call_id"] == call


def test_the_text_output_has_a_header_and_the_body_indented(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str]
) -> None:
    db, session = recorded
    code, out, err = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "2")
    assert (code, err) == (0, "")
    header, body = out.split("\n\n", 1)
    assert "c2 (request 2 of 4 in session s1)" in header
    assert "p1/m1" in header
    assert "fp:0123456789ab" in header
    assert "tool result of message 3 (terminal) spilled" in header
    assert "150,000 chars to ab12cd34.txt" in header
    assert json.loads(body) == json.loads(session.bodies["c2"])
    assert '\n  "messages": [\n    {\n      "role": "system"' in body  # indent 2


def test_a_call_id_works_as_well_as_its_number(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = recorded
    by_number = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "3")
    by_id = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "c3")
    assert by_number == by_id
    assert by_id[0] == 0


def test_json_gives_the_call_s_decisions_and_only_its_own(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str]
) -> None:
    db, session = recorded
    _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "c3",
                    "--json")
    got = json.loads(out)
    assert {"call_id", "model", "credential", "decisions", "request"} <= set(got)
    assert (got["provider"], got["model"], got["credential"], got["outcome"]) == (
        "p1", "m1", "fp:0123456789ab", "ok")
    assert (got["complete"], got["missing"]) == (True, [])
    assert [d["event"] for d in got["decisions"]] == [
        "context.compressed.v2", "context.summariser_failed.v1", "session.call_admitted.v5"]
    assert got["decisions"][0]["summariser"] == "builtin-fallback"
    assert got["decisions"][2]["parent_call"] == "c3"
    # after the compression the history restarted: the summary, the kept tail, the new
    messages = got["request"]["messages"]
    assert [m["content"] for m in messages[1:]] == [
        "summary: listed files", "a.py\nb.py [preview]", "now fix \u202e b.py"]
    assert json.loads(out)["request"] == json.loads(session.bodies["c3"])
    _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "c4",
                    "--json")
    assert json.loads(out)["decisions"] == []


def test_the_text_output_lists_every_decision(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = recorded
    _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "c3")
    header = out.split("\n\n", 1)[0]
    assert "compressed (threshold): 120,000 -> 30,000 tokens (real)" in header
    assert "summarised by builtin-fallback (small)" in header
    assert "summariser small failed (upstream 503): fallback, cooldown 60 s" in header
    assert "side call side (summary): p1/small" in header
    assert "\u202e" not in out  # a bidi override in a message reaches no terminal raw
    assert "\\u202e" in out


def test_output_passes_through_the_redactor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    with EventLog(db) as log:
        RecordedSession(log, "s5", SYSTEM).call("r1", [msg("user", f"my key is {SECRET}")])
    for extra in ((), ("--json",)):
        _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s5", "--call", "1",
                        *extra)
        assert SECRET not in out
        assert "[REDACTED:fp:" in out


def test_without_recorded_contents_messages_are_keys_and_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    hello, bye = msg("user", "hello"), msg("user", "bye")
    with EventLog(db) as log:
        s = RecordedSession(log, "s2", SYSTEM, FIELDS)
        s.call("k1", [hello])
        s.call("k2", [bye], stored=False)
    code, out, err = run(capsys, "replay", "--db", str(db), "--session", "s2", "--call", "2",
                         "--json")
    assert (code, err) == (0, "")
    got = json.loads(out)
    assert (got["complete"], got["recorded"]) == (False, False)
    # the fields, the system message and hello were stored by the first call
    assert got["request"]["messages"] == [
        json.loads(SYSTEM), json.loads(hello), {"key": content_key(bye), "size": len(bye)}]
    assert got["missing"] == [content_key(bye)]
    _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s2", "--call", "2")
    assert "recording was off" in out
    assert json.loads(out.split("\n\n", 1)[1])["messages"][2] == {
        "key": content_key(bye), "size": len(bye)}


def test_missing_contents_are_shown_as_keys_and_verify_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    with EventLog(db, projections=default_projections()) as log:
        s = RecordedSession(log, "s3", SYSTEM)
        s.call("m1", [msg("user", "kept")])
        s.call("m2", [msg("user", "lost")], store_contents=False)  # a daemon bug, say
    code, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s3", "--call", "m2")
    assert code == 0
    assert "1 content(s) missing from the log" in out
    lost = msg("user", "lost")
    assert text_body(out)["messages"][-1] == {"key": content_key(lost), "size": len(lost)}
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify", "--json")
    report = json.loads(out)
    assert (code, report["kind"]) == (3, "content_missing")
    assert content_key(lost) in report["detail"]


def test_verify_passes_on_a_sound_log_and_catches_tampered_content(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = recorded
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify")
    assert code == 0, out
    conn = apsw.Connection(str(db))
    conn.execute("DROP TRIGGER contents_no_update")
    conn.execute("UPDATE contents SET data = ?, zlib = 0 WHERE key = ?",
                 (msg("user", "list no files"), content_key(msg("user", "list the files"))))
    conn.close()
    code, out, _ = run(capsys, "replay", "--db", str(db), "--verify")
    assert code == 3
    assert out.startswith("FAILED: content_modified")
    # and replay of a call no longer shows the forged bytes
    _, out, _ = run(capsys, "replay", "--db", str(db), "--session", "s1", "--call", "1")
    assert "list no files" not in out
    assert "missing from the log" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("--session", "nobody", "--call", "1"), "no session 'nobody'"),
    (("--session", "s1", "--call", "0"), "--call takes 1 to 4"),
    (("--session", "s1", "--call", "5"), "--call takes 1 to 4"),
    (("--session", "s1", "--call", "zzz"), "no call 'zzz' in session s1"),
    (("--session", "s1", "--call", "refused"), "has no recorded request"),
])
def test_errors_are_one_line_and_exit_1(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...], message: str,
) -> None:
    db, _ = recorded
    code, out, err = run(capsys, "replay", "--db", str(db), *argv)
    assert (code, out) == (1, "")
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv", [("--session", "s1"), ("--call", "1"),
                                  ("--session", "s1", "--call", "1", "--verify")])
def test_bad_combinations_are_usage_errors(
    recorded: tuple[Path, RecordedSession], capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
) -> None:
    db, _ = recorded
    code, out, err = run(capsys, "replay", "--db", str(db), *argv)
    assert (code, out) == (64, "")
    assert err.count("\n") == 1


def test_a_broken_chain_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "events.db"
    with EventLog(db) as log:
        orphan = CallAdmitted(call_id="b2", provider="p1", model="m1", request=RequestRecord(
            fields=content_ref(FIELDS), base="b1", kept=1,
            appended=(content_ref(msg("user", "x")),)))
        log.append(session_stream("s4"), [new_event(orphan)])
        log.append(session_stream("s4"), [new_event(HistoryReset(call_id="b2",
                                                                  reason="edited"))])
    code, out, err = run(capsys, "replay", "--db", str(db), "--session", "s4", "--call", "1")
    assert (code, out) == (1, "")
    assert "cannot rebuild call b2" in err and "b1" in err
    assert err.count("\n") == 1
