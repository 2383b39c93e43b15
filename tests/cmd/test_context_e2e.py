"""Context governance through the daemon: spill, turn budget, resends, hostile ids.

A real in-process daemon, the ``openai`` SDK as the client and the fake provider as the
upstream, which records the exact bytes it receives.
"""

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.context.spill import TRUNCATION_MARKER
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CompactionSkipped,
    ContextCompressed,
    ContextLimits,
    HistoryReset,
    ToolResultSpilled,
)

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer, RecordedRequest


@pytest.fixture
def daemon(inprocess: InProcessDaemon) -> InProcessDaemon:
    """The shared in-process daemon (``tests/cmd/inprocess.py``), stopped at teardown."""
    return inprocess


def lines(count: int, width: int = 99) -> str:
    """``count`` distinct lines of ``width`` characters plus a newline."""
    return "".join(f"{i:06d} " + "x" * (width - 7) + "\n" for i in range(count))


def turn(calls: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """An assistant message calling tools, then their results: ``(id, tool, result)``."""
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": tool, "arguments": json.dumps({"path": "a.txt"})}}
        for call_id, tool, _ in calls]}
    return [assistant, *({"role": "tool", "tool_call_id": call_id, "content": result}
                         for call_id, _, result in calls)]


def history(*turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                 {"role": "user", "content": "Fix the failing build."}]
    for t in turns:
        out.extend(t)
    return out


def upstream(fake: FakeProviderServer) -> list[RecordedRequest]:
    return [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]


def spills(daemon: InProcessDaemon, session: str) -> list[ToolResultSpilled]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, ToolResultSpilled)]


def test_a_150kb_result_is_spilled_to_a_private_file_and_previewed(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    big = lines(1500)  # 150,000 characters
    with daemon.openai(session="spill") as client:
        client.chat.completions.create(model=MODEL, messages=history(
            turn([("call_1", "terminal", big)])))  # type: ignore[arg-type]
    sent = upstream(fake)[0].body["messages"]
    stand_in = sent[-1]["content"]
    assert sent[-1]["tool_call_id"] == "call_1" and len(stand_in) < 2_500
    assert "150,000 characters" in stand_in and big[:1000] in stand_in
    path = Path(stand_in.split("Full output: ", 1)[1].split("\n", 1)[0])
    assert path.parent == tmp_path / "spill" and path.read_text() == big
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    [event] = spills(daemon, "spill")
    assert (event.file, event.chars, event.bytes, event.reason) == (
        path.name, 150_000, 150_000, "result")
    assert sent[:-1] == history(turn([("call_1", "terminal", big)]))[:-1]


def test_read_file_is_never_spilled(daemon: InProcessDaemon, fake: FakeProviderServer) -> None:
    big = lines(1500)
    with daemon.openai(session="pinned") as client:
        client.chat.completions.create(model=MODEL, messages=history(
            turn([("call_1", "read_file", big)])))  # type: ignore[arg-type]
    assert upstream(fake)[0].body["messages"][-1]["content"] == big
    assert spills(daemon, "pinned") == []


def test_the_turn_budget_spills_the_largest_results_first(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    # gpt-test has a 128K window: a result may hold 76,800 characters, a turn 153,600.
    sizes = {"c1": 50_000, "c2": 70_000, "c3": 60_000}
    calls = [(cid, "terminal", lines(n // 100)) for cid, n in sizes.items()]
    with daemon.openai(session="budget") as client:
        client.chat.completions.create(model=MODEL, messages=history(turn(calls)))  # type: ignore[arg-type]
    sent = {m["tool_call_id"]: m["content"] for m in upstream(fake)[0].body["messages"]
            if m["role"] == "tool"}
    # 180,000 > 153,600: the largest (c2) goes, and 110,000 + its stand-in fits.
    assert len(sent["c2"]) < 2_500 and sent["c1"] == calls[0][2] and sent["c3"] == calls[2][2]
    assert [(e.reason, e.chars) for e in spills(daemon, "budget")] == [("turn", 70_000)]


def test_a_resend_forwards_the_same_bytes_and_spills_nothing_again(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    first = history(turn([("call_1", "terminal", lines(1500))]))
    with daemon.openai(session="resend") as client:
        client.chat.completions.create(model=MODEL, messages=first)  # type: ignore[arg-type]
        second = [*first, {"role": "assistant", "content": "The build log is long."},
                  {"role": "user", "content": "Then read it."}]
        client.chat.completions.create(model=MODEL, messages=second)  # type: ignore[arg-type]
    one, two = upstream(fake)
    # The conversation comes first in the forwarded body: call 1's messages are a byte
    # prefix of call 2's (up to the list's closing bracket, then the other fields).
    prefix = one.raw[: one.raw.rindex(b'],"model":')]
    assert prefix.startswith(b'{"messages":[') and b"end of preview" in prefix
    assert two.raw.startswith(prefix + b",")
    assert two.body["messages"][-2:] == second[-2:]
    assert len(spills(daemon, "resend")) == 1
    assert len(list((tmp_path / "spill").iterdir())) == 1


def test_an_edited_history_is_governed_afresh_with_the_same_stand_ins(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    first = history(turn([("call_1", "terminal", lines(1500))]))
    edited = [first[0], {"role": "user", "content": "Fix the build, quickly."}, *first[2:]]
    with daemon.openai(session="edited") as client:
        client.chat.completions.create(model=MODEL, messages=first)  # type: ignore[arg-type]
        client.chat.completions.create(model=MODEL, messages=edited)  # type: ignore[arg-type]
    one, two = upstream(fake)
    assert one.body["messages"][-1] == two.body["messages"][-1]  # byte-identical stand-in
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream("session-edited")]
    [reset] = [e for e in events if isinstance(e, HistoryReset)]
    assert reset.matched == 0 and reset.reason == "a new conversation (message 1 differs)"


@pytest.mark.parametrize("call_id", ["../../../etc/passwd", "/tmp/evil", "x" * 400,
                                     "..", "a/../../b\x00c"])
def test_hostile_tool_call_ids_never_leave_the_spill_directory(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path, call_id: str
) -> None:
    big = lines(1000) + call_id
    with daemon.openai(session="hostile") as client:
        client.chat.completions.create(model=MODEL, messages=history(
            turn([(call_id, "terminal", big)])))  # type: ignore[arg-type]
    spill_dir = tmp_path / "spill"
    [written] = list(spill_dir.iterdir())
    assert written.read_text() == big and len(written.name) == 64 + len(".txt")
    found = [Path(root) / name for root, _, names in os.walk(tmp_path) for name in names
             if (Path(root) / name).is_file() and Path(root) != tmp_path]
    assert found == [written]
    assert upstream(fake)[0].body["messages"][-1]["tool_call_id"] == call_id


# --------------------------------------------------------------------- compression

SMALL = """
[[models]]
name = "small"
provider = "fake"
context_length = 16000
max_output_tokens = 1000
"""
# A 16K window less 1K reserved: the trigger is 85 % of 15,000 tokens, 12,750.
SMALL_TRIGGER = 12_750


def agent_session(turns: int) -> list[list[dict[str, Any]]]:
    """A realistic tool-heavy agent's histories, one per call, each extending the last."""
    tools = ("terminal", "read_file", "search_files")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Work in /repo."},
        {"role": "user", "content": "The test suite fails on main; find out why and fix it."},
    ]
    calls = [list(messages)]
    for n in range(turns):
        if n % 9 == 8:
            messages.append({"role": "assistant", "content": f"Progress report {n}: still going."})
            messages.append({"role": "user", "content": f"Keep going, and check module {n}."})
        parallel = 1 + n % 3
        batch = [(f"call_{n}_{k}", tools[(n + k) % 3],
                  f"$ step {n}.{k}\n" + lines(20 + (n * 7 + k * 13) % 40, 80))
                 for k in range(parallel)]
        messages.extend(turn(batch))
        calls.append(list(messages))
    messages.append({"role": "assistant", "content": "I found it: a stale fixture."})
    messages.append({"role": "user", "content": "Great. Now write the fix in tests/conftest.py."})
    calls.append(list(messages))
    return calls


def check_forwarded(sent: list[dict[str, Any]]) -> None:
    """Valid tool pairs, no two user messages touching."""
    open_calls: set[str] = set()
    for index, message in enumerate(sent):
        if message["role"] == "assistant":
            assert not open_calls, f"calls left unanswered before message {index}"
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, f"orphan result at {index}"
            open_calls.discard(message["tool_call_id"])
        elif open_calls:
            raise AssertionError(f"calls left unanswered before message {index}")
        if index and message["role"] == "user":
            assert sent[index - 1]["role"] != "user", f"two user messages at {index}"
    assert not open_calls


def events_of(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def small(tmp_path: Path, fake: FakeProviderServer, clock: FakeClock
          ) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake, extra_config=SMALL, clock=clock)
    try:
        yield d.start()
    finally:
        d.stop()


def test_a_long_tool_heavy_session_is_compressed_under_its_threshold(
    small: InProcessDaemon, fake: FakeProviderServer, clock: FakeClock
) -> None:
    histories = agent_session(60)
    with small.openai(session="long") as client:
        for messages in histories:
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            clock.advance(90)  # an agent's turn: the guard's 3 compressions in 10 min hold
    compressed = [e for e in events_of(small, "long") if isinstance(e, ContextCompressed)]
    assert compressed, "the session never compressed"
    assert all(e.tokens_after < SMALL_TRIGGER <= e.tokens_before for e in compressed)
    assert all(e.summariser == "builtin" and e.summarised > 0 for e in compressed)
    received = upstream(fake)
    assert len(received) == len(histories)
    for request, messages in zip(received, histories, strict=True):
        sent = request.body["messages"]
        check_forwarded(sent)
        newest = [m for m in messages if m["role"] == "user"][-1]
        assert newest in sent  # the newest request, verbatim
        assert sent[0] == messages[0]  # the system message, from the request itself
    # What is sent always fits the window (by our estimate, which the fake's readings
    # calibrate): the trigger is reached, and the history brought back under it.
    admitted = [e.estimated_tokens for e in events_of(small, "long")
                if isinstance(e, CallAdmitted)]
    assert max(admitted) < 15_000 and max(admitted) > SMALL_TRIGGER * 0.8
    last = received[-1].body["messages"]
    assert any("Context summary" in str(m.get("content")) for m in last)


def test_after_a_compression_resends_extend_it_without_summarising_again(
    small: InProcessDaemon, fake: FakeProviderServer
) -> None:
    histories = agent_session(60)
    with small.openai(session="stable") as client:
        for messages in histories:
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            if any(isinstance(e, ContextCompressed) for e in events_of(small, "stable")):
                break
        step = len(upstream(fake))
        after = [*messages, {"role": "assistant", "content": "Looking at it."},
                 {"role": "user", "content": "Also run the linter."}]
        client.chat.completions.create(model="small", messages=after)  # type: ignore[arg-type]
    compressions = [e for e in events_of(small, "stable") if isinstance(e, ContextCompressed)]
    assert len(compressions) == 1
    one, two = upstream(fake)[step - 1], upstream(fake)[step]
    prefix = one.raw[: one.raw.rindex(b'],"model":')]
    assert two.raw.startswith(prefix + b",")
    assert two.body["messages"][-2:] == after[-2:]


def test_replay_rebuilds_each_call_byte_for_byte_from_the_log(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    first = history(turn([("call_1", "terminal", lines(1500))]))
    second = [*first, {"role": "assistant", "content": "Long log."},
              {"role": "user", "content": "Summarise it."}]
    with daemon.openai(session="replayed") as client:
        client.chat.completions.create(model=MODEL, messages=first)  # type: ignore[arg-type]
        client.chat.completions.create(model=MODEL, messages=second,  # type: ignore[arg-type]
                                       stream=True).close()
    sent = upstream(fake)
    for number, request in enumerate(sent, 1):
        code = main(["replay", "--db", str(daemon.db), "--session", "replayed",
                     "--call", str(number), "--json"])
        out = capsys.readouterr().out
        assert code == 0
        replayed = json.loads(out)
        assert replayed["request"] == json.loads(request.raw)
        assert request.raw in out.encode()  # pasted byte for byte
        assert replayed["complete"] and replayed["model"] == MODEL
    decisions = json.loads(out)["decisions"]
    assert decisions == []  # the second call spilled nothing: it reused the first's
    main(["replay", "--db", str(daemon.db), "--session", "replayed", "--call", "1"])
    text = capsys.readouterr().out
    assert "spilled" in text and "terminal" in text


def test_a_compaction_asked_for_is_made_at_the_next_call_with_its_focus(
    small: InProcessDaemon, fake: FakeProviderServer
) -> None:
    histories = agent_session(7)  # well under the trigger: only the request compresses
    control = httpx.Client(base_url=f"http://127.0.0.1:{small.port}",
                           headers={"authorization": f"Bearer {small.token}"})
    with small.openai(session="asked") as client, control:
        client.chat.completions.create(model="small", messages=histories[0])  # type: ignore[arg-type]
        # Nothing to summarise yet: the request is served, not left pending.
        assert control.post("/v1/sessions/asked/compact", json={}).status_code == 202
        client.chat.completions.create(model="small", messages=histories[1])  # type: ignore[arg-type]
        assert control.get("/v1/sessions/asked").json()["pending_compaction"] is None
        for messages in histories[2:-1]:
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
        reply = control.post("/v1/sessions/asked/compact", json={"focus": "the fixture"})
        assert reply.status_code == 202
        client.chat.completions.create(model="small", messages=histories[-1])  # type: ignore[arg-type]
        status = control.get("/v1/sessions/asked").json()
    found = events_of(small, "asked")
    [skipped] = [e for e in found if isinstance(e, CompactionSkipped)]
    assert skipped.reason == "nothing to summarise"
    [compressed] = [e for e in found if isinstance(e, ContextCompressed)]
    assert (compressed.trigger, compressed.focus) == ("requested", "the fixture")
    assert compressed.tokens_before < SMALL_TRIGGER and compressed.summarised > 0
    assert status["compressions"] == 1 and status["pending_compaction"] is None
    check_forwarded(upstream(fake)[-1].body["messages"])


def test_a_message_holding_one_of_our_keys_is_sent_but_never_stored(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    key = daemon.keys["FAKE_KEY_A"]
    leaky = history(turn([("call_1", "terminal", f"$ env\nFAKE_KEY_A={key}\nHOME=/root\n")]))
    with daemon.openai(session="leaky") as client:
        client.chat.completions.create(model=MODEL, messages=leaky)  # type: ignore[arg-type]
    assert key in upstream(fake)[0].body["messages"][-1]["content"]  # the client's own text
    [record] = [e.request for e in events_of(daemon, "leaky") if isinstance(e, CallAdmitted)]
    assert record is not None
    assert len(record.withheld) == 1
    stored = daemon.runtime.log.read_contents(k for k, _ in record.appended)
    assert record.withheld[0] not in stored and len(stored) == len(record.appended) - 1
    assert all(key.encode() not in data for data in stored.values())
    assert key.encode() not in daemon.db.read_bytes()
    assert main(["replay", "--db", str(daemon.db), "--verify"]) == 0
    main(["replay", "--db", str(daemon.db), "--session", "leaky", "--call", "1"])
    out = capsys.readouterr().out
    assert "held an API key" in out and key not in out


def test_a_spill_that_cannot_be_written_is_truncated_inline_and_the_call_goes_on(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    (tmp_path / "spill").write_text("a file where the spill directory should be")
    big = lines(1500)
    with daemon.openai(session="nospill") as client:
        reply = client.chat.completions.create(model=MODEL, messages=history(
            turn([("call_1", "terminal", big)])))  # type: ignore[arg-type]
    assert reply.choices[0].message.content
    sent = upstream(fake)[0].body["messages"][-1]["content"]
    assert TRUNCATION_MARKER in sent and big[:1000] in sent and len(sent) < 2_500
    [event] = spills(daemon, "nospill")
    assert event.truncated and event.file == "" and event.error


def test_a_written_result_limit_is_used_as_written_even_when_it_is_the_default(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    # 100000 written equals the default: it was taken for unset and scaled to gpt-test's
    # 128K window (76,800 characters), so this 80,000-character result was spilled.
    extra = '[tools]\nresult_size_chars = 100000\n'
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra).start()
    try:
        big = lines(800)  # 80,000 characters
        with daemon.openai(session="written") as client:
            client.chat.completions.create(model=MODEL, messages=history(
                turn([("call_1", "terminal", big)])))  # type: ignore[arg-type]
        assert upstream(fake)[0].body["messages"][-1]["content"] == big
        assert spills(daemon, "written") == []
    finally:
        daemon.stop()


def test_two_agents_without_a_session_header_never_share_a_governed_history(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # One shared "implicit" session made every call of two such agents a history reset.
    histories = {name: [{"role": "system", "content": "You are a coding agent."},
                        {"role": "user", "content": f"Task of agent {name}."}]
                 for name in ("a", "b")}
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    with daemon.openai() as client:  # no X-Session-Id
        for n in range(4):
            for name, messages in histories.items():
                messages.extend(turn([(f"call_{name}{n}", "terminal", lines(20))]))
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=messages)  # type: ignore[arg-type]
                seen[name].add(raw.headers["x-sessionwarden-session-id"])
    (a,), (b,) = seen["a"], seen["b"]
    assert a != b and a.startswith("auto-") and b.startswith("auto-")
    for session in (a, b):
        types = daemon.types(f"session-{session}")
        assert types.count("session.call_admitted.v5") == 4
        assert not any(t.startswith("context.history_reset") for t in types)
    capsys.readouterr()
    assert main(["status", "--json", "--db", str(daemon.db)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert {a, b} <= {s["session_id"] for s in status["sessions"]}


def test_status_says_the_limits_a_call_was_governed_under_without_the_config(
    tmp_path: Path, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 16,000-token window with 1,000 reserved: the trigger is 85 % of 15,000. Read
    # without the config, status said 64,000 (the default model's).
    extra = ('[[models]]\nname = "small"\nprovider = "fake"\ncontext_length = 16000\n'
             'max_output_tokens = 1000\n')
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra).start()
    try:
        with daemon.openai(session="small") as client:
            for _ in range(2):
                client.chat.completions.create(model="small", messages=history())  # type: ignore[arg-type]
        admitted = [CODEC.decode(e.type, e.data)
                    for e in daemon.runtime.log.read_stream("session-small")
                    if e.type.startswith("session.call_admitted")]
    finally:
        daemon.stop()
    # Recorded once: the second call was governed under the same limits.
    assert [a.limits for a in admitted] == [  # type: ignore[attr-defined]
        ContextLimits(threshold=12_750, window=16_000), None]
    monkeypatch.delenv("SESSIONWARDEN_CONFIG", raising=False)
    capsys.readouterr()
    assert main(["status", "--db", str(daemon.db), "--session", "small"]) == 0
    out = capsys.readouterr().out
    assert "/ 12,750 tokens" in out and "window 16,000" in out and "configured" not in out
    assert main(["status", "--db", str(daemon.db), "--session", "small", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["threshold_tokens"], data["window_tokens"]) == (12_750, 16_000)
