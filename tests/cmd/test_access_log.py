"""The daemon's access log, through a real daemon: one line per request, flat JSON lines.

Each request gets one line once its response has ended: method, path, status, latency,
and for a proxied call its session, model, provider, call id and the tokens the ledger
recorded. Refusals (401, 403, 413) and 5xx are WARNING lines that say why; a ``/healthz``
that answered is DEBUG. No line holds a key or anything of a request's or response's body.
"""

import json
import re
import secrets
import socket
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import openai
import pytest

from tests.cmd.daemon_fixtures import MODEL, Daemon, DaemonMaker, chat_body

_TEXT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} (?P<level>[A-Z]+) +(?P<text>.*)$")


def _wait_for(daemon: Daemon, found: Callable[[str], bool], what: str) -> str:
    """The daemon's stderr once ``found`` holds for it (the line follows the response)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = daemon.stderr()
        if found(text):
            return text
        time.sleep(0.02)
    pytest.fail(f"no {what} in the daemon's log:\n{daemon.stderr()}")


def _text_lines(daemon: Daemon) -> list[tuple[str, str]]:
    """``(level, text)`` of every access line in a text log."""
    lines = []
    for line in daemon.stderr().splitlines():
        match = _TEXT_LINE.match(line)
        if match and re.match(r"[A-Z]+ /", match["text"]):
            lines.append((match["level"], match["text"]))
    return lines


def _one(lines: list[tuple[str, str]], pattern: str) -> tuple[str, str]:
    found = [line for line in lines if re.search(pattern, line[1])]
    assert len(found) == 1, (pattern, lines)
    return found[0]


def _tokens(daemon: Daemon, call_id: str) -> str:
    done = next(c for c in daemon.completions() if c["call_id"] == call_id)
    prompt = done["input_tokens"] + done["cache_read_tokens"] + done["cache_write_tokens"]
    assert prompt > 0 and done["output_tokens"] > 0
    return f"tokens={prompt}+{done['output_tokens']}"


def test_one_access_line_per_request_saying_why_for_refusals_and_failures(
    daemon_factory: DaemonMaker,
) -> None:
    canary = "canary-body-" + secrets.token_hex(8)
    daemon = daemon_factory(extra_config="[daemon]\nmax_body_mib = 1\n").start()
    messages: Any = [{"role": "user", "content": f"please keep {canary} secret"}]
    with daemon.openai(session="acc-1") as client:
        plain = client.chat.completions.with_raw_response.create(model=MODEL,
                                                                 messages=messages)
        stream = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, stream=True)
        for _ in stream.parse():
            pass
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model=MODEL, messages=messages,
                                           extra_body={"fake": {"status": 500}})
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="no-such-model", messages=messages)
    with openai.OpenAI(base_url=daemon.base_url, api_key="wrong-token", max_retries=0
                       ) as stranger, pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model=MODEL, messages=messages)
    with daemon.http() as http:
        assert http.get("/v1/models", headers={"Host": "evil.example"}).status_code == 403
        big = json.dumps(chat_body(canary + "x" * (1 << 20))).encode()
        assert http.post("/v1/chat/completions", content=big).status_code == 413
        assert http.get("/healthz").status_code == 200
        # A decoded path may hold a line break: it must not forge a second log line.
        assert http.get("/v1/x%0A00:00:00.000 INFO    forged").status_code == 404
    # A client that leaves in the middle of its body gets no answer: status "-".
    with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + daemon.token.encode() +
                     b"\r\nContent-Length: 1000\r\n\r\n{\"model\"")
    _wait_for(daemon, lambda text: "POST /v1/chat/completions - " in text,
              "the access line of the client that left")  # the last request: all are in
    lines = _text_lines(daemon)

    ids = [plain.headers["x-sessionwarden-call-id"], stream.headers["x-sessionwarden-call-id"]]
    for call_id in ids:
        level, text = _one(lines, f"call={call_id}")
        assert level == "INFO"
        assert re.fullmatch(
            rf"POST /v1/chat/completions 200 [0-9.]+ms session=acc-1 model={MODEL} "
            rf"provider=fake call={call_id} " + re.escape(_tokens(daemon, call_id)), text), text
    level, text = _one(lines, r" 500 .*outcome=upstream_error")
    assert level == "WARNING" and "session=acc-1" in text
    level, text = _one(lines, r"^POST /v1/chat/completions 404 ")
    assert level == "INFO" and "unknown model 'no-such-model'" in text
    level, text = _one(lines, r"^POST /v1/chat/completions 401 ")
    assert level == "WARNING" and 'error="missing or wrong bearer token"' in text
    level, text = _one(lines, r"^GET /v1/models 403 ")
    assert level == "WARNING" and 'error="Host header does not name this machine' in text
    level, text = _one(lines, r"^POST /v1/chat/completions 413 ")
    assert level == "WARNING" and "error=\"body exceeds 1048576 bytes\"" in text
    assert not [line for line in lines if "/healthz" in line[1]]  # DEBUG: not at INFO
    level, text = _one(lines, r"^GET /v1/x")
    assert level == "INFO" and text.startswith(r"GET /v1/x\n00:00:00.000 INFO    forged 404 ")
    assert not [line for line in daemon.stderr().splitlines() if "forged" in line[:40]]
    assert _one(lines, r"^POST /v1/chat/completions - ")[0] == "INFO"

    log = daemon.stderr()
    assert canary not in log and "ok: please keep" not in log
    assert not [key for key in daemon.keys.values() if key in log]
    assert daemon.token not in log and "wrong-token" not in log


def test_log_json_writes_one_flat_object_per_line(daemon_factory: DaemonMaker) -> None:
    canary = "canary-body-" + secrets.token_hex(8)
    daemon = daemon_factory(args=["--log-json", "--log-level", "DEBUG"]).start()
    with daemon.openai(session="acc-json") as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": canary}])
    call_id = raw.headers["x-sessionwarden-call-id"]
    assert httpx.get(daemon.url("/v1/models")).status_code == 401
    _wait_for(daemon, lambda text: f'"call_id": "{call_id}"' in text
              and '"status": 401' in text, "the call's access line")

    records = [json.loads(line) for line in daemon.stderr().splitlines() if line.strip()]
    for record in records:
        assert list(record)[:3] == ["time", "level", "message"], record
        assert "record" not in record and "text" not in record
        assert datetime.fromisoformat(record["time"]).utcoffset() is not None
    assert any("sessionwarden listening on" in r["message"] for r in records)
    (call,) = [r for r in records if r.get("call_id") == call_id]
    done = next(c for c in daemon.completions() if c["call_id"] == call_id)
    assert call["level"] == "INFO"
    assert call["message"].startswith("POST /v1/chat/completions 200 ")
    assert {k: call[k] for k in ("method", "path", "status", "session", "model", "provider",
                                 "outcome", "input_tokens", "output_tokens")} == {
        "method": "POST", "path": "/v1/chat/completions", "status": 200,
        "session": "acc-json", "model": MODEL, "provider": "fake", "outcome": "ok",
        "input_tokens": done["input_tokens"], "output_tokens": done["output_tokens"]}
    assert isinstance(call["latency_ms"], float) and call["latency_ms"] > 0
    (refused,) = [r for r in records if r.get("status") == 401]
    assert refused["level"] == "WARNING" and refused["path"] == "/v1/models"
    assert refused["error"] == "missing or wrong bearer token"
    health = [r for r in records if r.get("path") == "/healthz"]
    assert health and {r["level"] for r in health} == {"DEBUG"}
    assert canary not in daemon.stderr()
