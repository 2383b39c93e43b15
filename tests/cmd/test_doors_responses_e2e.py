"""The OpenAI Responses door end to end: the official ``openai`` SDK as the client.

An in-process daemon whose provider ``rsp`` speaks the Responses API (``api_mode =
"codex_responses"``), the fake provider as the upstream, recording the exact bytes it
receives. A Codex-like loop (``store: false``, the whole input each time, a real
file-reading tool on real files, encrypted reasoning fed back) runs on a small window, so
the daemon spills and compresses; every forwarded request must stay a valid Responses
input: calls paired by ``call_id``, reasoning and ``compaction`` items byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CallCompleted,
    ContextCompressed,
    ToolResultSpilled,
)

from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer, RecordedRequest

#: A Responses provider, a 64K-window agent model on it that makes 20 tool rounds, and a
#: roomy model for the short tests.
RSP = """
[[providers]]
name = "rsp"
base_url = "{base}"
api_mode = "codex_responses"
keys = ["env:FAKE_KEY_A", "env:FAKE_KEY_B"]
strategy = "fill_first"

[[models]]
name = "small-agent-20"
provider = "rsp"
context_length = 64000
max_output_tokens = 1000

[[models]]
name = "rsp-model"
provider = "rsp"
context_length = 128000
price = { input = "2.00", output = "8.00", cache_read = "0.20" }
"""
WINDOW = 64000

#: Codex's shell tool; the loop answers each call by reading the next module (``cat``).
SHELL = {"type": "function", "name": "shell", "description": "Run a shell command.",
         "parameters": {"type": "object", "properties": {
             "command": {"type": "array", "items": {"type": "string"}}},
             "required": ["command"]}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer, clock: FakeClock
           ) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "events.db", fake,
                        extra_config=RSP.replace("{base}", fake.base_url), clock=clock,
                        max_body_bytes=16 << 20)
    try:
        yield d.start()
    finally:
        d.stop()


def client(daemon: InProcessDaemon, session: str | None = "s") -> openai.OpenAI:
    return daemon.openai(session=session)


def forwarded(fake: FakeProviderServer, path: str = "/v1/responses") -> list[RecordedRequest]:
    return [r for r in fake.state.snapshot() if r.path == path]


def events_of(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def raw_items(raw: bytes) -> list[bytes]:
    """The forwarded ``input`` items as their exact JSON bytes (the daemon writes compact
    JSON; re-encoding a parsed item the same way gives its bytes back)."""
    body = json.loads(raw)
    return [json.dumps(i, separators=(",", ":"), ensure_ascii=False).encode()
            for i in body["input"]]


# ------------------------------------------------------------------ the long session


def repository(root: Path, count: int) -> list[Path]:
    """``count`` source files of 20–60 KB under ``root``."""
    root.mkdir()
    files = []
    for n in range(count):
        path = root / f"mod_{n:02d}.py"
        size = 20_000 + (n * 7919) % 40_000
        line = f"def function_{n}(x):  # module {n}\n    return x * {n}\n"
        path.write_text((line * (size // len(line) + 1))[:size])
        files.append(path)
    return files


def check_items(items: list[dict[str, Any]]) -> None:
    """Every function_call answered by its function_call_output, in order, and back."""
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs, (calls, outputs)
    for index, item in enumerate(items):
        if item.get("type") == "function_call_output":
            before = [i.get("call_id") for i in items[:index] if i.get("type") == "function_call"]
            assert item["call_id"] in before, f"orphan output at {index}"


def test_a_long_codex_session_is_spilled_and_compressed_with_its_items_intact(
    daemon: InProcessDaemon, fake: FakeProviderServer, clock: FakeClock, tmp_path: Path
) -> None:
    files = repository(tmp_path / "repo", 20)
    compaction = {"type": "compaction", "id": "cmp_native_0",
                  "encrypted_content": "gAAAA-native-compaction-opaque=="}
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Earlier work, compacted by the provider."}]},
        compaction,
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Read every module and report."}]}]
    reasonings: list[bytes] = []
    rounds = 0
    with client(daemon, "long") as sdk:
        while True:
            response = sdk.responses.create(
                model="small-agent-20", input=items, tools=[SHELL],  # type: ignore[list-item]
                store=False, include=["reasoning.encrypted_content"],
                reasoning={"effort": "low"})
            out = [item.model_dump(exclude_none=True) for item in response.output]
            items.extend(out)
            reasonings += [json.dumps(i, separators=(",", ":"), ensure_ascii=False).encode()
                           for i in out if i["type"] == "reasoning"]
            calls = [i for i in out if i["type"] == "function_call"]
            if not calls:
                break
            for call in calls:
                # The tool really runs: the next module's text is the result.
                path = files[rounds % len(files)]
                items.append({"type": "function_call_output", "call_id": call["call_id"],
                              "output": path.read_text()})
                rounds += 1
            clock.advance(90)
            if rounds == 20:
                # The fake counts calls since the user's message, and our compression
                # summarises old ones away: it would call tools forever. Offer a tool it
                # cannot find instead, so it answers.
                fake.state.by_model["small-agent-20"] = {"tool_name": "none"}
    assert rounds == 20 and response.output_text.startswith("ok: ")
    sent = forwarded(fake)
    assert len(sent) == 21
    native = json.dumps(compaction, separators=(",", ":")).encode()
    for request in sent:
        body = json.loads(request.raw)
        assert body["store"] is False
        check_items(body["input"])
        exact = raw_items(request.raw)
        assert native in exact, "the native compaction was rewritten or dropped"
        at = exact.index(native)
        assert exact[0] == raw_items(sent[0].raw)[0], "compressed before the compaction"
        assert at == 1
        # Every reasoning item forwarded is one the provider produced, byte for byte.
        for item in body["input"]:
            if item.get("type") == "reasoning":
                encoded = json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode()
                assert encoded in reasonings
        assert request.raw.count(b'"encrypted_content"') >= 1
    # The newest reasoning (fed back on the last call) went untouched.
    assert reasonings[-2] in raw_items(sent[-1].raw)
    # No forwarded request over the window (the fake counts a quarter of the JSON).
    for request in sent:
        assert len(request.raw) // 4 < WINDOW
    compressed = [e for e in events_of(daemon, "long") if isinstance(e, ContextCompressed)]
    assert compressed, "the session never compressed"
    assert any(isinstance(e, ToolResultSpilled) for e in events_of(daemon, "long"))
    done = [e for e in events_of(daemon, "long") if isinstance(e, CallCompleted)]
    assert len(done) == 21 and all(e.status == 200 for e in done)


# ------------------------------------------------------------ streaming, usage, compact


def test_a_streamed_call_its_usage_and_a_compact_side_call_are_metered(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two items: the fake caches a proper prefix of the prompt (the first item).
    ask = {"model": "rsp-model", "input": [
               {"type": "message", "role": "user", "content": "x" * 4000},
               {"type": "message", "role": "user", "content": "stream me"}],
           "reasoning": {"effort": "low"}, "store": False}
    with client(daemon, "meter") as sdk:
        sdk.responses.create(**ask)  # type: ignore[call-overload]
        events = list(sdk.responses.create(stream=True, **ask))  # type: ignore[call-overload]
        compacted = sdk.responses.compact(model="rsp-model", input=[
            {"type": "message", "role": "user", "content": "first ask"},
            {"type": "message", "role": "assistant", "content": "an answer"}])
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text.startswith("ok: stream me") and final.usage is not None
    assert compacted.output[-1].type == "compaction" and compacted.usage.input_tokens > 0
    assert forwarded(fake, "/v1/responses/compact")
    found = events_of(daemon, "meter")
    admitted = [e for e in found if isinstance(e, CallAdmitted)]
    assert [e.purpose for e in admitted] == ["", "", "compact"]
    done = [e for e in found if isinstance(e, CallCompleted)]
    assert len(done) == 3 and all(e.status == 200 for e in done)
    # The second call repeats the first's prompt: the fake reports it cached.
    assert done[1].cache_read_tokens > 0 and done[1].reasoning_tokens > 0
    assert done[1].input_tokens + done[1].cache_read_tokens == final.usage.input_tokens
    assert done[1].output_tokens == final.usage.output_tokens
    assert done[2].input_tokens == compacted.usage.input_tokens
    assert all(e.cost is not None for e in done)
    capsys.readouterr()
    assert main(["usage", "--db", str(daemon.db), "--session", "meter", "--json"]) == 0
    [group] = json.loads(capsys.readouterr().out)
    assert group["requests"] == 3 and float(group["cost"]) > 0


# ------------------------------------------------------------------------- errors


def test_errors_keep_the_openai_shape(daemon: InProcessDaemon, fake: FakeProviderServer
                                      ) -> None:
    with client(daemon, "err") as sdk:
        with pytest.raises(openai.BadRequestError) as bad:
            sdk.responses.create(model="rsp-model", input="x",
                                 extra_body={"fake": {"status": 400,
                                                      "error_code": "invalid_value"}})
        assert bad.value.code == "invalid_value"
        with pytest.raises(openai.InternalServerError):
            sdk.responses.create(model="rsp-model", input="x",
                                 extra_body={"fake": {"status": 500}})
    # A daemon refusal (a body that is not JSON), in OpenAI's error shape.
    refused = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/responses", content=b"{not json",
                         headers={"authorization": f"Bearer {daemon.token}"})
    assert refused.status_code == 400 and refused.json()["error"]["message"]
    with client(daemon, "err") as sdk:
        # A client naming a chat-completions model at the Responses door.
        with pytest.raises(openai.BadRequestError) as mismatch:
            sdk.responses.create(model="gpt-test", input="x")
        assert mismatch.value.code == "wire_mismatch"
        assert "gpt-test" in mismatch.value.message and "responses" in mismatch.value.message
        # A stream the upstream fails: its response.failed event reaches the client.
        failed = list(sdk.responses.create(model="rsp-model", input="x", stream=True,
                                           extra_body={"fake": {"stream_error_at": 2}}))
        assert [e.type for e in failed] == [
            "response.created", "response.in_progress", "response.failed"]
        # A stream the upstream breaks off: the daemon ends it with an ``error`` event,
        # which the SDK raises on.
        with pytest.raises(openai.APIError):
            for _ in sdk.responses.create(model="rsp-model", input="x", stream=True,
                                          extra_body={"fake": {"break_after_chunks": 2}}):
                pass


def test_a_429_fails_over_to_the_second_key_and_replay_gives_the_forwarded_bytes(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state.by_key[daemon.keys["FAKE_KEY_A"]] = {"status": 429,
                                                    "headers": {"retry-after": "7200"}}
    with client(daemon, "fo") as sdk:
        reply = sdk.responses.create(model="rsp-model", input="fail over")
    assert reply.output_text == "ok: fail over"
    sent = forwarded(fake)
    assert [r.headers["authorization"] for r in sent] == [
        "Bearer " + daemon.keys["FAKE_KEY_A"], "Bearer " + daemon.keys["FAKE_KEY_B"]]
    [done] = [e for e in events_of(daemon, "fo") if isinstance(e, CallCompleted)]
    assert [t.status for t in done.attempts] == [429] and done.status == 200
    capsys.readouterr()
    assert main(["replay", "--db", str(daemon.db), "--session", "fo", "--call", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["request"] == json.loads(sent[-1].raw)


# ------------------------------------------------------------------ session naming


@pytest.mark.parametrize(("headers", "body", "expected"), [
    ({"X-Session-Id": "named", "session-id": "codex"}, {}, "named"),
    ({"session-id": "codex-sess", "thread-id": "t"}, {}, "codex-sess"),
    ({"session_id": "underscored"}, {}, "underscored"),
    ({"conversation_id": "conv"}, {}, "conv"),
    ({}, {"prompt_cache_key": "pck"}, "pck"),
    ({}, {}, "auto-"),
])
def test_the_session_is_named_by_header_then_client_identity_then_derived(
    daemon: InProcessDaemon, headers: dict[str, str], body: dict[str, Any], expected: str
) -> None:
    answer = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/responses",
                        json={"model": "rsp-model", "input": "name me", **body},
                        headers={"authorization": f"Bearer {daemon.token}", **headers})
    assert answer.status_code == 200, answer.text
    named = answer.headers["x-sessionwarden-session-id"]
    assert named.startswith(expected) if expected == "auto-" else named == expected


# ------------------------------------------------------ previous_response_id chains


def test_a_previous_response_id_chain_stays_in_its_session_and_is_sized_whole(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    url = f"http://127.0.0.1:{daemon.port}/v1/responses"
    auth = {"authorization": f"Bearer {daemon.token}"}
    first = httpx.post(url, json={"model": "rsp-model", "input": "y" * 40_000},
                       headers={**auth, "X-Session-Id": "chain"})
    assert first.status_code == 200
    used = first.json()["usage"]
    # The session and the chain's size come from the log: they survive a restart.
    daemon.stop()
    daemon.start()
    url = f"http://127.0.0.1:{daemon.port}/v1/responses"
    second = httpx.post(url, json={"model": "rsp-model", "input": "next",
                                   "previous_response_id": first.json()["id"]}, headers=auth)
    assert second.status_code == 200
    assert second.headers["x-sessionwarden-session-id"] == "chain"
    admitted = [e for e in events_of(daemon, "chain") if isinstance(e, CallAdmitted)]
    assert len(admitted) == 2
    assert admitted[1].estimated_tokens >= used["input_tokens"] + used["output_tokens"]


def test_a_streamed_chain_is_followed_and_a_link_over_the_window_is_refused_unsent(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with client(daemon, None) as sdk:
        # Codex's header names the first call's session; the chain names the others'.
        events = list(sdk.responses.create(model="small-agent-20", input="x" * 160_000,
                                           stream=True, extra_headers={"session-id": "long"}))
        first = events[-1].response  # type: ignore[union-attr]
        second = sdk.responses.create(model="small-agent-20", input="go on",
                                      previous_response_id=first.id)
        sent = len(forwarded(fake))
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.responses.create(model="small-agent-20", input="z" * 130_000,
                                 previous_response_id=second.id)
    assert len(forwarded(fake)) == sent == 2  # refused before anything was sent
    assert refused.value.code == "context_length_exceeded"
    message = refused.value.message
    assert second.id in message and "store: false" in message and str(WINDOW)[:2] in message
    assert refused.value.response.headers["x-sessionwarden-session-id"] == "long"
    found = events_of(daemon, "long")
    admitted = [e for e in found if isinstance(e, CallAdmitted)]
    done = [e for e in found if isinstance(e, CallCompleted)]
    assert len(admitted) == 2 and [e.response_id for e in done] == [first.id, second.id]
    # The whole chain is in the second call's estimate: the first call's prompt and answer.
    assert admitted[1].estimated_tokens >= first.usage.input_tokens + first.usage.output_tokens
    # A link of a chain is new items, not a history that changed: nothing was reset.
    assert not [e for e in found if type(e).__name__ == "HistoryReset"]


def test_a_response_the_daemon_never_relayed_is_forwarded_and_its_error_relayed(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with client(daemon, None) as sdk, pytest.raises(openai.BadRequestError) as missing:
        sdk.responses.create(model="rsp-model", input="hello", previous_response_id="resp_gone")
    # Unknown to the log (made before the daemon, or elsewhere): the provider decides.
    assert missing.value.code == "previous_response_not_found"
    assert len(forwarded(fake)) == 1
    assert missing.value.response.headers["x-sessionwarden-session-id"].startswith("auto-")
