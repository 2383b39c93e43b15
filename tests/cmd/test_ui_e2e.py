"""The live page through a real daemon: sign-in, the board, the timeline, replay, the stream.

The browser's own test (headless Chromium, screenshots) is ``test_ui_browser.py`` (slow).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.daemon.ui.signin import CODE_TTL

from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

#: A priced model, and a cap: the board shows spend against it.
PRICED = """
[budgets]
session_usd = "5"
[[models]]
name = "priced"
provider = "fake"
context_length = 128000
price = { input = "2.00", output = "8.00" }
"""
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@pytest.fixture
def page(made: list[InProcessDaemon], tmp_path: Path,
         fake: FakeProviderServer) -> Iterator[tuple[InProcessDaemon, httpx.Client]]:
    daemon = start_made(made, tmp_path, fake, PRICED)
    daemon.app.page.tick_s = 0.05  # the streams' pace; what they send is the same
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=10) as client:
        yield daemon, client


def sign_in(daemon: InProcessDaemon, client: httpx.Client) -> str:
    """The cookie a one-time code buys, as ``sessionwarden ui`` and a browser get it."""
    issued = client.post("/v1/ui/codes", headers={"authorization": f"Bearer {daemon.token}"})
    assert issued.status_code == 200
    answer = client.get(issued.json()["path"])
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    name, _, rest = answer.headers["set-cookie"].partition("=")
    assert name == f"sessionwarden_ui_{daemon.port}"
    attributes = {a.strip() for a in rest.split(";")[1:]}
    assert {"HttpOnly", "SameSite=Strict", "Path=/ui"} <= attributes
    client.cookies.clear()  # the test sends it by hand, as the browser would
    return f"{name}={rest.split(';')[0]}"


def board(client: httpx.Client, cookie: str) -> dict[str, Any]:
    answer = client.get("/ui/api/board", headers={"cookie": cookie})
    assert answer.status_code == 200
    return dict(answer.json())


def test_a_one_time_code_signs_in_once_and_the_token_never_enters_a_url(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    assert client.post("/v1/ui/codes").status_code == 401  # only with the daemon's token
    refused = client.get("/ui")
    assert refused.status_code == 401 and "sessionwarden ui" in refused.text
    assert refused.headers["content-security-policy"] == CSP
    issued = client.post("/v1/ui/codes", headers={"authorization": f"Bearer {daemon.token}"})
    path = issued.json()["path"]
    assert daemon.token not in path
    assert client.get(path).status_code == 303
    spent = client.get(path)
    assert spent.status_code == 403 and "set-cookie" not in spent.headers
    assert client.get("/ui/signin?code=made-up-code").status_code == 403
    assert client.get("/ui/signin").status_code == 403
    assert client.get("/ui", headers={"cookie": "sessionwarden_ui_1=1.2.3"}).status_code == 401


def test_an_expired_code_is_refused(page: tuple[InProcessDaemon, httpx.Client]) -> None:
    daemon, client = page
    issued = client.post("/v1/ui/codes", headers={"authorization": f"Bearer {daemon.token}"})
    clock = daemon.clock
    assert isinstance(clock, FakeClock)
    clock.advance(CODE_TTL.total_seconds())
    assert client.get(issued.json()["path"]).status_code == 403


def test_the_page_reads_only_and_loads_nothing_from_elsewhere(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    html = client.get("/ui", headers={"cookie": cookie})
    assert html.status_code == 200 and html.headers["content-security-policy"] == CSP
    assert html.headers["x-content-type-options"] == "nosniff"
    assert html.headers["referrer-policy"] == "no-referrer"
    for asset, kind in (("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css"),
                        ("/ui/favicon.svg", "image/svg+xml")):
        answer = client.get(asset)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind)
        text = answer.text.replace("http://www.w3.org/2000/svg", "")  # a name, not fetched
        assert "http://" not in text and "https://" not in text and "//" not in text.replace(
            "// ", "").replace("//\n", "")
    assert "http" not in html.text.replace("http-equiv", "")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        answer = client.request(method, "/ui/api/board", headers={"cookie": cookie})
        assert answer.status_code == 405
    head = client.head("/ui", headers={"cookie": cookie})
    assert head.status_code == 200 and head.content == b""
    foreign = client.get("/ui", headers={"cookie": cookie, "host": "evil.example"})
    assert foreign.status_code == 403


def test_the_board_the_timeline_and_a_replay_follow_real_calls(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    assert board(client, cookie)["sessions"] == []
    sdk = daemon.openai(session="ui-session-1")
    messages: list[Any] = [{"role": "user", "content": "list the files"}]
    sdk.chat.completions.create(model="priced", messages=messages)
    first = board(client, cookie)["sessions"][0]
    messages += [{"role": "assistant", "content": "done " * 50},
                 {"role": "user", "content": "now read them all " * 100}]
    sdk.chat.completions.create(model="priced", messages=messages)
    found = board(client, cookie)
    row = found["sessions"][0]
    assert row["id"] == "ui-session-1" and row["calls"] == 2 and row["live"]
    assert row["model"] == "fake/priced" and row["last_status"] == 200
    assert row["context"]["source"] == "real"
    assert row["context"]["tokens"] > first["context"]["tokens"]  # the bar moves
    assert row["context"]["window"] == 128000 and row["context"]["threshold"]
    spent = daemon.rows("SELECT cost FROM view_ledger WHERE session_id = 'ui-session-1'")
    assert Decimal(row["spent"]) == sum(Decimal(c) for (c,) in spent) > 0
    assert row["cap"] == "5" and row["unknown_cost_calls"] == 0
    today = found["days"][-1]
    assert today["day"] == "2026-12-02" and today["calls"] == 2 and len(found["days"]) == 14
    assert today["spent"] == row["spent"]
    keys = found["providers"]["fake"]["keys"]
    assert sum(k["calls"] for k in keys) == 2 and {k["state"] for k in keys} == {"ok"}
    timeline = client.get("/ui/api/sessions/ui-session-1", headers={"cookie": cookie}).json()
    kinds = [e["kind"] for e in timeline["entries"]]
    assert kinds == ["call", "done", "call", "done"]
    second = timeline["entries"][2]
    assert second["replay"] and "admitted for fake/" in second["text"]
    replay = client.get(f"/ui/api/replay/ui-session-1/{second['call_id']}",
                        headers={"cookie": cookie})
    assert replay.status_code == 200
    assert json.loads(replay.text)["request"]["messages"] == messages
    for missing in ("/ui/api/sessions/nobody", "/ui/api/sessions/bad%20id",
                    "/ui/api/replay/ui-session-1/no-such-call", "/ui/api/replay/x/1",
                    "/ui/nothing-here"):
        assert client.get(missing, headers={"cookie": cookie}).status_code == 404, missing


def test_the_stream_pushes_the_board_as_calls_flow(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    boards: list[dict[str, Any]] = []
    got = threading.Condition()

    def read() -> None:
        # Reads until the board shows the call completed, then hangs up, as a page
        # closed does: the daemon's stream ends with it.
        with client.stream("GET", "/ui/events", headers={"cookie": cookie}) as answer:
            assert answer.headers["content-type"] == "text/event-stream"
            assert answer.headers["content-security-policy"] == CSP
            for line in answer.iter_lines():
                if not line.startswith("data: "):
                    continue
                found = json.loads(line[6:])
                with got:
                    boards.append(found)
                    got.notify_all()
                rows = found["sessions"]
                if rows and rows[0]["last_status"] is not None:
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with got:
        assert got.wait_for(lambda: len(boards) >= 1, timeout=10)
    assert boards[0]["sessions"] == []
    daemon.openai(session="streamed").chat.completions.create(
        model="priced", messages=[{"role": "user", "content": "hi"}])
    reader.join(10)
    assert not reader.is_alive()
    row = boards[-1]["sessions"][0]
    assert row["id"] == "streamed" and row["calls"] == 1 and row["last_status"] == 200


def test_a_stopping_daemon_ends_its_open_streams(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    ended = threading.Event()

    def read() -> None:
        with client.stream("GET", "/ui/events", headers={"cookie": cookie}) as answer:
            for _ in answer.iter_lines():
                pass
        ended.set()  # the body ended whole: no cut connection

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert not ended.wait(0.3)  # an open stream stays open
    daemon.stop()
    assert ended.wait(10)


def test_a_key_a_client_put_in_its_user_agent_never_reaches_the_page(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    leaked = "sk-proj-" + "A1b2C3d4" * 6
    sent = client.post("/v1/chat/completions", json={
        "model": "priced", "messages": [{"role": "user", "content": "hi"}]}, headers={
        "authorization": f"Bearer {daemon.token}", "x-session-id": "leaky",
        "user-agent": f"agent {leaked}"})
    assert sent.status_code == 200
    for path in ("/ui/api/board", "/ui/api/sessions/leaky"):
        shown = client.get(path, headers={"cookie": cookie})
        assert shown.status_code == 200 and leaked not in shown.text
    assert "REDACTED" in client.get("/ui/api/board", headers={"cookie": cookie}).text
    assert daemon.rows("SELECT count(*) FROM events WHERE instr(data, ?)",
                       (leaked.encode(),)) == [(0,)]  # nor the log


def test_a_timeline_is_read_again_only_from_where_the_page_left_it(
    page: tuple[InProcessDaemon, httpx.Client],
) -> None:
    daemon, client = page
    cookie = sign_in(daemon, client)
    sdk = daemon.openai(session="growing")
    sdk.chat.completions.create(model="priced", messages=[{"role": "user", "content": "a"}])
    first = client.get("/ui/api/sessions/growing", headers={"cookie": cookie}).json()
    assert [e["kind"] for e in first["entries"]] == ["call", "done"]
    sdk.chat.completions.create(model="priced", messages=[
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "b"}])
    since = client.get(f"/ui/api/sessions/growing?after={first['version']}",
                       headers={"cookie": cookie}).json()
    assert [e["kind"] for e in since["entries"]] == ["call", "done"]
    assert since["entries"][0]["replay"] and since["version"] > first["version"]
    nothing = client.get(f"/ui/api/sessions/growing?after={since['version']}",
                         headers={"cookie": cookie}).json()
    assert nothing["entries"] == [] and nothing["version"] == since["version"]
    for junk in ("-1", "x", "9" * 40):  # read from the start
        again = client.get(f"/ui/api/sessions/growing?after={junk}", headers={"cookie": cookie})
        assert len(again.json()["entries"]) == 4
