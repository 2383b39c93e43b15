"""The Anthropic Messages door end to end: the official ``anthropic`` SDK as the client.

An in-process daemon with a provider in ``anthropic_messages`` mode on the fake upstream
(which speaks Messages and records every request it receives, raw bytes included). Each
test asserts on what reached the upstream (the fake's recording), what the client got, and
what the ledger holds — the daemon's view of the call is never taken on trust.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import CODEC, CallAdmitted, ContextCompressed, KeyStateChanged
from sessionwarden.redact import fingerprint

from tests.cmd.daemon_fixtures import MODEL, completions, ledger_rows
from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.support.fake_agent import api_key
from tests.support.fake_provider import FakeProviderServer

AGENT = "claude-agent-40"  # calls its tool while offered one, up to 40 rounds
PLAIN = "claude-plain"
ROUNDS = 24
COMPACT_AT = 3
WINDOW = 12000

READ: Any = {"name": "Read", "description": "Read a file",
             "input_schema": {"type": "object", "required": ["file_path"],
                              "properties": {"file_path": {"type": "string"}}}}


def extra(fake: FakeProviderServer, window: int = WINDOW) -> str:
    """An ``anthropic_messages`` provider on the fake with two keys, and its models."""
    return (
        "[[providers]]\n"
        'name = "ant"\n'
        f'base_url = "{fake.base_url}"\n'
        'api_mode = "anthropic_messages"\n'
        'keys = ["env:FAKE_KEY_A", "env:FAKE_KEY_B"]\n'
        'strategy = "fill_first"\n'
        "[[models]]\n"
        f'name = "{AGENT}"\n'
        'provider = "ant"\n'
        f"context_length = {window}\n"
        "[[models]]\n"
        f'name = "{PLAIN}"\n'
        'provider = "ant"\n'
        "context_length = 200000\n"
        'price = { input = "3.00", output = "15.00", cache_read = "0.30", '
        'cache_write = "3.75", web_search = "0.025" }\n'
    )


def client(daemon: InProcessDaemon, **kwargs: Any) -> anthropic.Anthropic:
    """An SDK client on the daemon (no retries: every failure is seen as it is)."""
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{daemon.port}",
                               api_key=daemon.token, max_retries=0, **kwargs)


def forwarded(fake: FakeProviderServer, path: str = "/v1/messages") -> list[Any]:
    """Every request the fake received on ``path``, oldest first."""
    return [r for r in fake.state.snapshot() if r.path.split("?")[0] == path]


# -- 1. a long tool-heavy session ---------------------------------------------------------

def _pairing_ok(messages: list[dict[str, Any]]) -> None:
    """Every tool_result answers a tool_use of the message before; every tool_use is answered."""
    for i, msg in enumerate(messages):
        blocks = msg["content"] if isinstance(msg["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            prev = messages[i - 1]
            assert prev["role"] == "assistant", f"tool_result at {i} without an assistant before"
            uses = {b["id"] for b in prev["content"] if b.get("type") == "tool_use"}
            assert set(results) == uses, f"tool_result ids at {i} do not answer {uses}"
        if msg["role"] == "assistant":
            uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if uses:
                assert i + 1 < len(messages), "an unanswered tool_use at the end"
                nxt = messages[i + 1]["content"]
                answered = {b["tool_use_id"] for b in nxt if b.get("type") == "tool_result"}
                assert answered == set(uses), f"tool_use at {i} unanswered"


def test_a_long_tool_session_is_spilled_and_compressed_with_native_blocks_intact(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    fake.state.by_model[AGENT] = {"tool_name": "Read"}
    files = []
    for n in range(24):  # 20–40 KB of real text each
        path = tmp_path / f"src_{n:02d}.py"
        path.write_text("".join(f"line {i} of file {n}: " + "x" * 60 + "\n"
                                for i in range((20_000 + 800 * n) // 80)))
        files.append(path)
    sent: list[bytes] = []  # the bytes the client sent, to compare with what was forwarded
    hook = httpx2.Client(event_hooks={"request": [lambda r: sent.append(r.read())]})
    history: list[dict[str, Any]] = [{"role": "user", "content": "read every file"}]
    emitted: list[dict[str, Any]] = []  # thinking and compaction blocks the fake sent
    rounds = 0
    with client(daemon, http_client=hook, default_headers={"X-Session-Id": "long"}) as c:
        while True:
            extra_body = {"fake": {"compaction": True}} if rounds == COMPACT_AT else None
            # After ROUNDS tool rounds the last call offers no tool, so the answer is text
            # (the fake counts rounds in what it receives, which compression shortens).
            tools = [READ] if rounds < ROUNDS else anthropic.omit
            raw = c.messages.with_raw_response.create(
                model=AGENT, max_tokens=2048, tools=tools,
                thinking={"type": "enabled", "budget_tokens": 1024},
                messages=history, extra_body=extra_body)
            reply = raw.parse()
            # the blocks as the answer's JSON has them (the SDK's models add null fields)
            content = raw.http_response.json()["content"]
            emitted += [dict(b) for b in content if b["type"] in ("thinking", "compaction")]
            history.append({"role": "assistant", "content": content})
            if reply.stop_reason != "tool_use":
                break
            results = []
            for block in reply.content:
                if block.type == "tool_use":
                    # A real tool: read the next file from disk (the fake's input is scripted).
                    text = files[rounds % len(files)].read_text()
                    results.append({"type": "tool_result", "tool_use_id": block.id,
                                    "content": text})
            history.append({"role": "user", "content": results})
            rounds += 1
    assert rounds == 24 and reply.content[-1].type == "text"  # the SDK session finished
    assert any(b["type"] == "compaction" for b in emitted)
    assert all(b.get("signature") for b in emitted if b["type"] == "thinking")
    calls = forwarded(fake)
    assert len(calls) == 25 == len(sent)
    compaction = next(b for b in emitted if b["type"] == "compaction")
    spilled = compressed = 0
    for req, mine in zip(calls, sent, strict=True):
        body = json.loads(req.raw)
        messages = body["messages"]
        _pairing_ok(messages)
        # the window holds (the fake counts about 4 characters a token, like the daemon)
        assert len(req.raw) // 4 <= WINDOW * 1.1, len(req.raw)
        spilled += mine.count(b'"tool_result"') > 0 and len(req.raw) < len(mine)
        # every thinking block forwarded is one the fake sent, byte for byte (the client's
        # serialisation of it appears in the forwarded bytes as it is)
        for msg in messages:
            if msg["role"] != "assistant":
                continue
            for block in msg["content"]:
                if block["type"] in ("thinking", "compaction"):
                    assert block in emitted
                    text = json.dumps(block, separators=(",", ":")).encode()
                    assert (text in req.raw) == (text in mine), block["type"]
        # the newest assistant turn's thinking is there, untouched
        last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
        if last is not None:
            theirs = json.loads(mine)["messages"]
            newest = next(m for m in reversed(theirs) if m["role"] == "assistant")
            assert [b for b in last["content"] if b["type"] == "thinking"] == [
                b for b in newest["content"] if b["type"] == "thinking"]
        # once the history carries the native compaction, it is forwarded byte for byte and
        # nothing before it is cut by us (Anthropic already drops what precedes it)
        where = [i for i, m in enumerate(json.loads(mine)["messages"])
                 if m["role"] == "assistant" and compaction in m["content"]]
        if where:
            fwd = [i for i, m in enumerate(messages)
                   if m["role"] == "assistant" and compaction in m["content"]]
            assert fwd == where, "messages before the compaction block were cut"
            compressed += len(messages) < len(json.loads(mine)["messages"])
    assert spilled > 0, "no tool result was spilled"
    assert "context.compressed.v2" in daemon.types("session-long")
    assert compressed > 0, "the history was never compressed"


def test_a_call_asking_for_native_compaction_is_not_compacted_by_us(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake, window=8000))
    history: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for n in range(12):
        history += [{"role": "assistant", "content": [{"type": "text", "text": f"a{n} " * 300}]},
                    {"role": "user", "content": f"u{n} " * 300}]
    edits = {"edits": [{"type": "compact_20260112"}]}
    with client(daemon) as c:
        c.messages.create(model=AGENT, max_tokens=64, messages=history,
                          extra_body={"context_management": edits},
                          extra_headers={"X-Session-Id": "native"})
    body = json.loads(fake.state.last.raw)
    assert body["context_management"] == edits
    assert body["messages"] == history  # every message as the client sent it


def test_what_precedes_a_native_compaction_is_not_counted_against_the_window(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    # Anthropic drops every block before a compaction block: a history whose part before
    # it is alone over the window fits, and is forwarded as sent — neither refused nor
    # compressed by us (the old estimate counted it all and refused this call).
    daemon = start_made(made, tmp_path, fake, extra(fake, window=8000))
    history: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for n in range(20):  # ~12,000 tokens: over the 8,000 window on their own
        history += [{"role": "assistant", "content": [{"type": "text", "text": f"a{n} " * 400}]},
                    {"role": "user", "content": f"u{n} " * 400}]
    compaction = {"type": "compaction", "content": "The user asked for a tidy repo; done."}
    history += [{"role": "assistant", "content": [compaction]},
                {"role": "user", "content": "What next?"}]
    with client(daemon) as c:
        reply = c.messages.create(model=AGENT, max_tokens=64, messages=history,
                                  extra_headers={"X-Session-Id": "after-native"})
    assert reply.content
    body = json.loads(fake.state.last.raw)
    assert body["messages"] == history
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream("session-after-native")]
    assert not [e for e in events if isinstance(e, ContextCompressed)]
    [admitted] = [e for e in events if isinstance(e, CallAdmitted)]
    # the compaction, the question, the fields: not the 12,000 before them
    assert admitted.estimated_tokens < 2000


# -- 2. streaming --------------------------------------------------------------------------

def test_streaming_events_arrive_in_order_and_the_final_message_parses(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    with client(daemon) as c, c.messages.stream(
            model=PLAIN, max_tokens=64, messages=[{"role": "user", "content": "stream me"}],
            extra_headers={"X-Session-Id": "st"}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    raw_kinds = [k for k in kinds if k not in ("text",)]  # the SDK adds its own "text"
    assert raw_kinds[0] == "message_start" and raw_kinds[-1] == "message_stop"
    assert raw_kinds[1] == "content_block_start" and "content_block_stop" in raw_kinds
    assert raw_kinds[-2] == "message_delta"
    assert final.content[0].type == "text" and final.content[0].text == "ok: stream me"
    assert final.usage.output_tokens > 0
    [row] = [r for r in ledger_rows(daemon.db).values() if r["session_id"] == "st"]
    assert row["stream"] == 1 and row["output_tokens"] == final.usage.output_tokens


def test_a_streamed_call_whose_client_leaves_still_has_its_ledger_row(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    body = {"model": PLAIN, "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "leave early"}],
            "fake": {"stream_chunks": 40, "chunk_delay_ms": 30}}
    with httpx.stream("POST", f"http://127.0.0.1:{daemon.port}/v1/messages", json=body,
                      headers={"x-api-key": daemon.token, "X-Session-Id": "gone",
                               "anthropic-version": "2023-06-01"}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("event: content_block_delta"):
                break  # the client disconnects mid-stream
    deadline = time.monotonic() + 10
    while not [r for r in ledger_rows(daemon.db).values() if r["session_id"] == "gone"]:
        assert time.monotonic() < deadline, "no ledger row for the abandoned stream"
        time.sleep(0.05)
    [row] = [r for r in ledger_rows(daemon.db).values() if r["session_id"] == "gone"]
    assert row["stream"] == 1 and row["input_tokens"] > 0


# -- 3. usage and cost ---------------------------------------------------------------------

def test_usage_shows_the_calls_with_cache_writes_by_ttl_and_iterations(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    system: Any = [{"type": "text", "text": "rules " * 400,
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    prompt: Any = [{"type": "text", "text": "more " * 400,
                    "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
    iterations = {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 0,
                  "server_tool_use": {"web_search_requests": 2},
                  "iterations": [
                      {"type": "compaction", "input_tokens": 900, "output_tokens": 200},
                      {"type": "message", "input_tokens": 30, "output_tokens": 12}]}
    with client(daemon, default_headers={"X-Session-Id": "bill"}) as c:
        first = c.messages.create(model=PLAIN, max_tokens=64, system=system,
                                  messages=[{"role": "user", "content": prompt}])
        c.messages.create(model=PLAIN, max_tokens=64,
                          messages=[{"role": "user", "content": "iterate"}],
                          extra_body={"fake": {"usage": "custom", "usage_block": iterations}})
    written = first.usage.cache_creation
    assert written is not None and written.ephemeral_1h_input_tokens > 0
    assert written.ephemeral_5m_input_tokens > 0
    done = [c for c in completions(daemon.db) if c["session_id"] == "bill"]
    assert len(done) == 2
    assert done[0]["cache_write_tokens"] == first.usage.cache_creation_input_tokens > 0
    # the iterations are kept as the provider reported them (the split by TTL shows in
    # the cost below: 1-hour writes at twice the input price)
    assert json.loads(done[1]["raw_usage"])["iterations"] == iterations["iterations"]
    # web searches are counted with the call and priced per search (below), not flagged
    assert done[1]["flags"] == ("iterations",)
    assert [c["web_searches"] for c in done] == [0, 2]
    rows = [r for r in ledger_rows(daemon.db).values() if r["session_id"] == "bill"]
    assert [r["cost_status"] for r in rows] == ["actual", "actual"]
    # 5m writes at the cache_write price, 1h writes at twice the input price (Anthropic's)
    h1, m5 = written.ephemeral_1h_input_tokens, written.ephemeral_5m_input_tokens
    expected = (Decimal(first.usage.input_tokens) * Decimal("3.00")
                + Decimal(m5) * Decimal("3.75") + Decimal(h1) * Decimal("6.00")
                + Decimal(first.usage.output_tokens) * Decimal("15.00")) / 1_000_000
    assert Decimal(str(rows[0]["cost"])) == expected
    iterated = (Decimal(930) * Decimal("3.00") + Decimal(212) * Decimal("15.00")) / 1_000_000
    iterated += 2 * Decimal("0.025")  # the web searches, once per call
    assert Decimal(str(rows[1]["cost"])) == iterated
    capsys.readouterr()
    assert main(["usage", "--db", str(daemon.db), "--session", "bill", "--json"]) == 0
    [group] = json.loads(capsys.readouterr().out)
    assert group["requests"] == 2
    assert Decimal(str(group["cost"])) == expected + iterated


# -- 4. key failover -----------------------------------------------------------------------

def test_an_anthropic_429_fails_over_to_the_second_key(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    first = daemon.keys["FAKE_KEY_A"]
    # Anthropic's 429: its own rate-limit headers say the request bucket is out until 14:00
    fake.state.by_key[first] = {"status": 429, "headers": {
        "retry-after": "7200", "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-02T14:00:00Z"}}
    with client(daemon, default_headers={"X-Session-Id": "fo"}) as c:
        reply = c.messages.create(model=PLAIN, max_tokens=64,
                                  messages=[{"role": "user", "content": "fail over"}])
    assert reply.content[0].type == "text"
    used = [api_key(r.headers) for r in forwarded(fake)]
    assert used == [first, daemon.keys["FAKE_KEY_B"]]
    a, b = fingerprint(first), fingerprint(daemon.keys["FAKE_KEY_B"])
    [done] = [c for c in completions(daemon.db) if c["session_id"] == "fo"]
    assert done["credential"] == b and done["status"] == 200
    assert [(t.credential, t.status, t.error_class) for t in done["attempts"]] == [
        (a, 429, "rate_limit")]
    states = [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream(
        "credentials-ant")]
    benched = [s for s in states if isinstance(s, KeyStateChanged)]
    assert [(s.fingerprint, s.state) for s in benched] == [(a, "exhausted")]


# -- 5. replay -----------------------------------------------------------------------------

def test_replay_gives_the_bytes_the_upstream_received(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    with client(daemon, default_headers={"X-Session-Id": "rp"}) as c:
        c.messages.create(model=PLAIN, max_tokens=64, system="Be exact.",
                          thinking={"type": "enabled", "budget_tokens": 1024},
                          messages=[{"role": "user", "content": "replay me"}])
    raw = fake.state.last.raw
    capsys.readouterr()
    assert main(["replay", "--db", str(daemon.db), "--session", "rp", "--call", "1",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["request"] == json.loads(raw)
    assert raw.decode() in out  # spliced in as it was sent


# -- 6. wire mismatch and errors in Anthropic's shape --------------------------------------

def _anthropic_error(resp: httpx.Response, kind: str) -> str:
    """The message of an Anthropic-shaped error body of type ``kind``."""
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    return str(body["error"]["message"])


def test_a_chat_completions_model_is_a_wire_mismatch_naming_both(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    resp = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/messages",
                      headers={"x-api-key": daemon.token, "anthropic-version": "2023-06-01"},
                      json={"model": MODEL, "max_tokens": 8,
                            "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 400
    message = _anthropic_error(resp, "invalid_request_error")
    assert "wire_mismatch" in resp.text
    assert "anthropic_messages" in message and "chat_completions" in message
    assert forwarded(fake) == []


def test_refusals_and_upstream_errors_reach_the_sdk_in_anthropic_shape(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    hi: Any = [{"role": "user", "content": "hi"}]
    with client(daemon) as c:
        # a model no anthropic_messages provider serves: the daemon refuses it itself
        with pytest.raises(anthropic.BadRequestError) as refused:
            c.messages.create(model=MODEL, max_tokens=8, messages=hi)
        assert refused.value.body["type"] == "error"  # type: ignore[index]
        assert "wire_mismatch" in str(refused.value.body)
        with pytest.raises(anthropic.BadRequestError) as upstream:
            c.messages.create(model=PLAIN, max_tokens=8, messages=hi, extra_body={
                "fake": {"status": 400, "error_message": "prompt is too long: 1 > 0"}})
        assert "prompt is too long" in str(upstream.value)
        assert upstream.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with anthropic.Anthropic(base_url=f"http://127.0.0.1:{daemon.port}", api_key="wrong",
                             max_retries=0) as bad, pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=PLAIN, max_tokens=8, messages=hi)
    resp = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/messages",
                      json={"model": PLAIN, "max_tokens": 8, "messages": hi})
    assert resp.status_code == 401
    _anthropic_error(resp, "authentication_error")


def test_an_upstream_error_mid_stream_reaches_the_client_as_an_error_event(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    body = {"model": PLAIN, "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "break"}],
            "fake": {"stream_error_at": 3}}
    resp = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/messages", json=body,
                      headers={"x-api-key": daemon.token})
    assert resp.status_code == 200
    events = [e for e in resp.text.split("\n\n") if e.strip()]
    assert events[0].startswith("event: message_start")
    assert events[-1].startswith("event: error\ndata: ")
    error = json.loads(events[-1].split("data: ", 1)[1])
    assert error["type"] == "error" and error["error"]["type"]
    with client(daemon) as c, pytest.raises(anthropic.APIStatusError), c.messages.stream(
            model=PLAIN, max_tokens=64, messages=body["messages"],
            extra_body={"fake": {"stream_error_at": 3}}) as stream:
        for _ in stream:
            pass


# -- 7. auth -------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["x-api-key", "bearer"])
def test_the_daemon_token_is_taken_as_x_api_key_or_bearer(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer, how: str
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    token = {"api_key": daemon.token} if how == "x-api-key" else {"auth_token": daemon.token}
    with anthropic.Anthropic(base_url=f"http://127.0.0.1:{daemon.port}", max_retries=0,
                             **token) as c:  # type: ignore[arg-type]
        reply = c.messages.create(model=PLAIN, max_tokens=8,
                                  messages=[{"role": "user", "content": "auth"}])
    assert reply.content[0].type == "text"
    # the provider's key reaches the upstream as x-api-key, never the client's token
    rec = fake.state.last
    assert rec.headers["x-api-key"] == daemon.keys["FAKE_KEY_A"]
    assert "authorization" not in rec.headers
    assert daemon.token.encode() not in rec.raw


# -- 8. headers and the query pass through --------------------------------------------------

def test_version_beta_and_identity_headers_and_the_query_reach_the_upstream(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    mine = {"anthropic-version": "2023-06-01",
            "anthropic-beta": "interleaved-thinking-2025-05-14,context-management-2025-06-27",
            "user-agent": "claude-cli/2.1.197 (external, cli)",
            "x-stainless-lang": "js", "x-stainless-package-version": "0.70.0",
            "anthropic-dangerous-direct-browser-access": "true",
            "x-app": "cli"}
    resp = httpx.post(f"http://127.0.0.1:{daemon.port}/v1/messages?beta=true",
                      headers={**mine, "x-api-key": daemon.token},
                      json={"model": PLAIN, "max_tokens": 8,
                            "messages": [{"role": "user", "content": "headers"}]})
    assert resp.status_code == 200
    rec = fake.state.last
    assert {k: rec.headers.get(k) for k in mine} == mine
    assert rec.query == "beta=true"
    assert rec.headers["x-api-key"] == daemon.keys["FAKE_KEY_A"]
    assert daemon.token not in json.dumps(rec.headers)


# -- 9. count_tokens -----------------------------------------------------------------------

def test_count_tokens_is_forwarded_and_metered_free(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    with client(daemon, default_headers={"X-Session-Id": "ct"}) as c:
        counted = c.messages.count_tokens(model=PLAIN,
                                          messages=[{"role": "user", "content": "count"}])
    assert counted.input_tokens > 0
    [rec] = forwarded(fake, "/v1/messages/count_tokens")
    assert json.loads(rec.raw)["messages"] == [{"role": "user", "content": "count"}]
    rows = [r for r in ledger_rows(daemon.db).values() if r["session_id"] == "ct"]
    assert len(rows) == 1
    # free: zero tokens and an exact zero cost (not unknown), marked as a token count
    assert (rows[0]["input_tokens"], rows[0]["output_tokens"]) == (0, 0)
    assert (Decimal(rows[0]["cost"]), rows[0]["cost_status"]) == (0, "actual")
    [admitted] = [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream(
        "session-ct") if e.type.startswith("session.call_admitted")]
    assert admitted.purpose == "count_tokens"  # type: ignore[attr-defined]


# -- 10. session naming --------------------------------------------------------------------

UUID = "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"


@pytest.mark.parametrize(("headers", "metadata", "expected"), [
    ({"X-Session-Id": "mine", "X-Claude-Code-Session-Id": UUID}, {"user_id": "x"}, "mine"),
    ({"X-Claude-Code-Session-Id": UUID}, {"user_id": json.dumps({"session_id": "other"})},
     UUID),
    ({}, {"user_id": json.dumps({"device_id": "d", "account_uuid": "a",
                                 "session_id": UUID})}, UUID),
    ({}, {"user_id": f"user_abc123_account_{UUID[::-1]}_session_{UUID}"}, UUID),
    ({}, None, "auto-"),
])
def test_the_session_is_named_by_header_then_claude_code_s_identity_then_derived(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    headers: dict[str, str], metadata: Any, expected: str
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    with client(daemon) as c:
        raw = c.messages.with_raw_response.create(
            model=PLAIN, max_tokens=8, messages=[{"role": "user", "content": "name me"}],
            metadata=metadata if metadata is not None else anthropic.omit,
            extra_headers=headers)
    named = raw.headers["x-sessionwarden-session-id"]
    assert named.startswith("auto-") if expected == "auto-" else named == expected
    assert [r["session_id"] for r in ledger_rows(daemon.db).values()] == [named]


# -- 11. a system message in the middle ----------------------------------------------------

def test_a_system_message_among_the_messages_is_forwarded_unchanged(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake))
    history: Any = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "system", "content": "<system-reminder>files changed</system-reminder>"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]}]
    with client(daemon, default_headers={"X-Session-Id": "sys"}) as c:
        reply = c.messages.create(model=PLAIN, max_tokens=8, system="top", messages=history)
    assert reply.content[0].type == "text"
    body = json.loads(fake.state.last.raw)
    assert body["messages"] == history and body["system"] == "top"
    assert [r["outcome"] for r in ledger_rows(daemon.db).values()] == ["ok"]
