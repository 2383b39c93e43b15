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

import openai
import pytest
from sessionwarden.events import CODEC, CallCompleted, ContextCompressed, ToolResultSpilled

from tests.cmd.inprocess import InProcessDaemon
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer, RecordedRequest

#: A Responses provider, a 64K-window agent model on it that makes 30 tool rounds, and a
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
                        extra_config=RSP.format(base=fake.base_url), clock=clock,
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
