"""The control API through a real daemon: a session's status, and a compaction requested.

A session is made by the official ``openai`` SDK against the fake provider; the control
API is then called with raw HTTP, and its effects read back from the log.
"""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sessionwarden.actors.messages import new_event
from sessionwarden.cmd.daemon.control import SESSION_ID
from sessionwarden.cmd.daemon.proxy.relay import _SESSION_ID
from sessionwarden.events import CompactionRequested, ContextCompressed, ToolResultSpilled

from tests.cmd.daemon_fixtures import MODEL, Daemon, DaemonMaker
from tests.cmd.inprocess import InProcessDaemon

MESSAGES: Any = [{"role": "user", "content": "list the files, then fix the failing test"}]


@pytest.fixture
def http(inprocess: InProcessDaemon) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{inprocess.port}", timeout=30.0,
                      headers={"Authorization": f"Bearer {inprocess.token}"}) as client:
        yield client


def two_calls(inprocess: InProcessDaemon, session: str) -> int:
    """Two calls of ``session`` through the SDK; the last one's prompt tokens."""
    with inprocess.openai(session=session) as client:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
        answer = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert answer.usage is not None
    return answer.usage.prompt_tokens


def test_status_of_a_session_after_its_calls(inprocess: InProcessDaemon,
                                             http: httpx.Client) -> None:
    prompt = two_calls(inprocess, "agent-1")
    response = http.get("/v1/sessions/agent-1")
    assert response.status_code == 200, response.text
    data = response.json()
    assert (data["session_id"], data["calls"], data["summariser_calls"]) == ("agent-1", 2, 0)
    assert (data["provider"], data["model"]) == ("fake", MODEL)
    assert data["context"]["source"] == "real" and data["context"]["tokens"] == prompt
    # gpt-test: a 128K window at the default 0.5 → the 64K floor.
    assert data["threshold_tokens"] == 64_000 and data["compression_enabled"] is True
    assert (data["compressions"], data["spills"], data["pending_compaction"]) == (0, 0, None)


def test_compact_is_recorded_and_shown_as_pending(inprocess: InProcessDaemon,
                                                  http: httpx.Client) -> None:
    two_calls(inprocess, "agent-2")
    response = http.post("/v1/sessions/agent-2/compact", json={"focus": "the auth module"})
    assert response.status_code == 202, response.text
    assert response.json() == {"session_id": "agent-2", "scheduled": True,
                               "focus": "the auth module"}
    assert inprocess.types("session-agent-2")[-1] == CompactionRequested.type_tag()
    pending = http.get("/v1/sessions/agent-2").json()["pending_compaction"]
    assert pending["focus"] == "the auth module" and pending["requested_at"]
    # Without a body: no focus.
    response = http.post("/v1/sessions/agent-2/compact")
    assert response.status_code == 202 and response.json()["focus"] == ""
    assert http.get("/v1/sessions/agent-2").json()["pending_compaction"]["focus"] == ""


def test_status_shows_what_governance_recorded(inprocess: InProcessDaemon,
                                              http: httpx.Client) -> None:
    # The compression itself is wired elsewhere: its events are appended here directly.
    two_calls(inprocess, "agent-6")
    assert http.post("/v1/sessions/agent-6/compact", json={"focus": "tests"}).status_code == 202
    inprocess.runtime.log.append("session-agent-6", [
        new_event(ToolResultSpilled(call_id="c3", message=4, tool="shell", file="f" * 32,
                                    chars=150_000, bytes=150_000)),
        new_event(ContextCompressed(call_id="c3", trigger="requested", focus="tests",
                                    tokens_before=70_000, tokens_after=21_000,
                                    summarised=30)),
    ])
    data = http.get("/v1/sessions/agent-6").json()
    assert (data["spills"], data["spilled_bytes"], data["compressions"]) == (1, 150_000, 1)
    assert data["last_compression"]["saved_tokens"] == 49_000
    assert data["last_compression"]["saved_percent"] == 70.0
    assert data["pending_compaction"] is None  # the compression served the request


def test_the_control_api_needs_the_daemons_token(inprocess: InProcessDaemon) -> None:
    two_calls(inprocess, "agent-3")
    base = f"http://127.0.0.1:{inprocess.port}"
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": inprocess.token}):
        get = httpx.get(f"{base}/v1/sessions/agent-3", headers=headers)
        post = httpx.post(f"{base}/v1/sessions/agent-3/compact", headers=headers)
        for response in (get, post):
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
    assert CompactionRequested.type_tag() not in inprocess.types("session-agent-3")


def test_unknown_sessions_are_404_and_nothing_is_recorded(inprocess: InProcessDaemon,
                                                          http: httpx.Client) -> None:
    for response in (http.get("/v1/sessions/nobody"),
                     http.post("/v1/sessions/nobody/compact", json={"focus": "x"})):
        assert response.status_code == 404
        assert response.json()["error"] == {"message": "no session 'nobody'",
                                            "type": "invalid_request_error",
                                            "code": "session_not_found"}
    assert inprocess.types("session-nobody") == []


BAD_BODIES: list[tuple[object, str]] = [
    ({"focus": "x" * 501}, "invalid_focus"),
    ({"focus": "two\nlines"}, "invalid_focus"),
    ({"focus": "\x1b[2J"}, "invalid_focus"),
    ({"focus": 42}, "invalid_body"),
    ({"focus": "a", "priority": "high"}, "invalid_body"),
    (["focus"], "invalid_body"),
    (b"{not json", "invalid_body"),
]


def test_a_bad_compact_body_is_400(inprocess: InProcessDaemon, http: httpx.Client) -> None:
    two_calls(inprocess, "agent-4")
    for body, code in BAD_BODIES:
        if isinstance(body, bytes):
            response = http.post("/v1/sessions/agent-4/compact", content=body)
        else:
            response = http.post("/v1/sessions/agent-4/compact", json=body)
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == code, body
    assert CompactionRequested.type_tag() not in inprocess.types("session-agent-4")
    # The longest focus allowed is taken.
    ok = http.post("/v1/sessions/agent-4/compact", json={"focus": "é" * 500})
    assert ok.status_code == 202


def test_bad_ids_methods_and_paths(inprocess: InProcessDaemon, http: httpx.Client) -> None:
    assert SESSION_ID.pattern == _SESSION_ID.pattern  # the proxy's X-Session-Id rule
    for path, code in (("/v1/sessions/" + "a" * 129, "invalid_session_id"),
                       ("/v1/sessions/a%20b", "invalid_session_id"),
                       ("/v1/sessions/", "invalid_session_id"),
                       ("/v1/sessions/a%2Fb/compact", "not_found")):  # a/b: no such route
        response = http.get(path)
        assert response.json()["error"]["code"] == code, path
    assert http.post("/v1/sessions/s1").status_code == 405
    response = http.get("/v1/sessions/s1/compact")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert http.post("/v1/sessions/s1/other").status_code == 404
    assert http.post("/v1/sessions/s1/compact", content=b"x" * 20_000).status_code == 413


def test_a_dead_session_actor_is_503(inprocess: InProcessDaemon, http: httpx.Client) -> None:
    two_calls(inprocess, "agent-5")
    inprocess.runtime.session_ref("agent-5").stop()  # for good: not restarted
    response = http.post("/v1/sessions/agent-5/compact", json={"focus": "x"})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "unavailable"
    # The status is read from the log, not from the actor: still served.
    assert http.get("/v1/sessions/agent-5").json()["calls"] == 2


def test_cli_status_while_the_daemon_runs_matches_the_api(daemon_factory: DaemonMaker) -> None:
    daemon: Daemon = daemon_factory().start()
    with daemon.openai(session="live") as client:
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
    with daemon.http() as http:
        assert http.post("/v1/sessions/live/compact",
                         json={"focus": "keep the plan"}).status_code == 202
        api = http.get("/v1/sessions/live").json()
    config = ("--config", str(daemon.config))
    result = daemon.cli("status", "--session", "live", "--json", *config)
    assert json.loads(result.stdout) == api
    text = daemon.cli("status", "--session", "live", *config).stdout
    assert "context: " in text and "tokens (" in text and ", real)" in text
    assert "compaction requested: " in text and "focus 'keep the plan'" in text
    missing = daemon.cli("status", "--session", "nope", *config, check=False)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("sessionwarden: no session 'nope'")
