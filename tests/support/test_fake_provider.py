"""Tests for the fake LLM provider used as upstream in integration tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.fake_provider import FakeProviderServer, FakeProviderState

SCRIPT = Path(__file__).with_name("fake_provider.py")
MSGS: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there, please summarise the plan."},
]


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as srv:
        yield srv


@pytest.fixture
def client(server: FakeProviderServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="sk-test-123", max_retries=0) as c:
        yield c


def test_plain_call_with_usage(server: FakeProviderServer, client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="gpt-x", messages=MSGS)
    assert resp.model == "gpt-x"
    assert resp.choices[0].message.content == "ok: Hello there, please summarise the plan."[:44]
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert resp.usage.prompt_tokens_details is not None
    assert resp.usage.prompt_tokens_details.cached_tokens == len("You are terse.") // 4
    rec = server.state.last
    assert rec.path == "/v1/chat/completions"
    assert rec.headers["authorization"] == "Bearer sk-test-123"
    assert rec.body["model"] == "gpt-x"
    assert server.state.counters["total"] == 1


def test_success_has_ratelimit_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSGS)
    for kind in ("requests", "tokens"):
        for part in ("limit", "remaining", "reset"):
            assert f"x-ratelimit-{part}-{kind}" in raw.headers


def test_stream_with_include_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m", messages=MSGS, stream=True,
        stream_options={"include_usage": True}, extra_body={"fake": {"stream_chunks": 4}},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("ok: Hello")
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 4
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(text) // 4 + 1


def test_stream_without_include_usage(server: FakeProviderServer, client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="m", messages=MSGS, stream=True))
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "stream_options" not in server.state.last.body


def test_usage_missing(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model="m", messages=MSGS, extra_headers={"x-fake-usage": "missing"},
    )
    assert resp.usage is None


def test_429_is_rate_limit_error_with_echoed_key(client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="m", messages=MSGS,
            extra_headers={"x-fake-status": "429"}, extra_body={"fake": {"echo_key": True}},
        )
    err = info.value
    assert err.response.headers["retry-after"] == "1"
    assert err.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert "sk-test-123" in err.message


def test_header_overrides_body(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model="m", messages=MSGS,
            extra_headers={"x-fake-status": "503"}, extra_body={"fake": {"status": 429}},
        )


def test_delay(client: openai.OpenAI) -> None:
    t0 = time.monotonic()
    client.chat.completions.create(
        model="m", messages=MSGS, extra_body={"fake": {"delay_ms": 200}},
    )
    assert time.monotonic() - t0 >= 0.2


def test_hang_after_chunks_then_stop(server: FakeProviderServer) -> None:
    body = {"model": "m", "messages": MSGS, "stream": True, "fake": {"hang_after_chunks": 2}}
    with pytest.raises(httpx.ReadTimeout), httpx.stream(
        "POST", server.base_url + "/chat/completions", json=body, timeout=0.3
    ) as resp:
        assert resp.status_code == 200
        for _ in resp.iter_lines():
            pass
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 3


def test_models_and_anthropic_messages(server: FakeProviderServer) -> None:
    base = server.base_url
    assert httpx.get(base + "/models").json()["object"] == "list"
    body = {"model": "claude", "max_tokens": 10, "messages": MSGS[1:]}
    msg = httpx.post(base + "/messages", json=body).json()
    assert msg["type"] == "message" and msg["content"][0]["text"].startswith("ok: ")
    assert set(msg["usage"]) >= {
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
        "cache_creation",
    }
    streamed = httpx.post(base + "/messages", json={**body, "stream": True}).text
    kinds = [ln[7:] for ln in streamed.splitlines() if ln.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    err = httpx.post(base + "/messages", json=body, headers={"x-fake-status": "429"})
    assert err.status_code == 429 and err.json()["error"]["type"] == "rate_limit_error"


def test_shared_state_and_clear() -> None:
    state = FakeProviderState()
    with FakeProviderServer(state) as srv:
        httpx.get(srv.base_url + "/models")
    assert [r.path for r in state.snapshot()] == ["/v1/models"]
    state.clear()
    assert state.requests == [] and state.counters["total"] == 0


def test_script_mode_starts_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening http://127.0.0.1:") and line.endswith("/v1")
        base = line.split(" ", 1)[1]
        assert httpx.get(base + "/models", timeout=5).status_code == 200
        msg = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(base + "/messages", json=msg, timeout=5).json()["type"] == "message"
        resp = httpx.post(base + "/responses", json={"model": "m", "input": "hi"}, timeout=5)
        assert resp.json()["object"] == "response"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stop_releases_a_hung_stream_with_client_attached() -> None:
    srv = FakeProviderServer().start()
    lines: list[str] = []
    body = {"model": "m", "messages": MSGS, "stream": True, "fake": {"hang_after_chunks": 1}}

    def consume() -> None:
        with httpx.stream("POST", srv.base_url + "/chat/completions", json=body, timeout=10) as r:
            lines.extend(ln for ln in r.iter_lines() if ln)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.2)
    srv.stop()
    t.join(3)
    assert not t.is_alive()
    assert len(lines) == 1 and lines[0].startswith("data: {")


def test_options_by_model_reply_and_raw_body() -> None:
    state = FakeProviderState()
    state.by_model["gone"] = {"status": 404}
    state.by_model["wordy"] = {"reply": "## Goal\n- g", "delay_ms": 1}
    state.by_model["broken"] = {"raw_body": "not json"}
    with FakeProviderServer(state) as srv:
        url = srv.base_url + "/chat/completions"

        def post(model: str, **extra: object) -> httpx.Response:
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
            return httpx.post(url, json=body)

        gone = post("gone")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
        assert post("gone", fake={"status": None}).status_code == 200  # the body wins
        answer = post("wordy").json()
        assert answer["choices"][0]["message"]["content"] == "## Goal\n- g"
        assert answer["usage"]["completion_tokens"] == len("## Goal\n- g") // 4 + 1
        broken = post("broken")
        assert broken.status_code == 200 and broken.text == "not json"
        assert post("other").json()["choices"][0]["message"]["content"] == "ok: hi"
    state.clear()
    assert state.by_model == {}
