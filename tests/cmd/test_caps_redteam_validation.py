"""Caps a deep parent chain, a lenient number or a pile of images could escape (issue 21 §4, §7).

What the red team saw: an ``X-Session-Parent`` chain past the ancestry bound (64) had its
parent silently dropped, so a session 64-1,000 deep became a new root and got 200 with
the root's cap used up; ``n: "100"`` or ``n: 100.0`` reserved one answer (a lenient
server bills 100); 200 ``image_url`` parts reserved $0 of input. Now such a parent (or
one making a cycle) is refused with a 400 naming the bound and the chain, the session
and its descendants stay refused, across a restart too; a non-integer ``n`` or token
limit is refused with a 400 naming the field; each media part reserves a bounded figure.

In-process daemons on a fake clock against the fake upstream; the ``priced`` model
costs $2 / $8 per million input / output tokens.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.domain.cost.lineage import MAX_ANCESTRY
from sessionwarden.events import CODEC, CallRefused, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.budget_status import read_budget

from tests.cmd.inprocess import InProcessDaemon, nothing_open, start_made
from tests.support.fake_provider import FakeProviderServer

MODEL = """
[[models]]
name = "priced"
provider = "fake"
context_length = 128000
price = { input = "2.00", output = "8.00" }
"""
CAPPED = '[budgets]\nsession_usd = "0.015"\n' + MODEL
HI = [{"role": "user", "content": "hi"}]
#: The fake's usage for a call of $0.01: 1,000 tokens in ($0.002), 1,000 out ($0.008).
CENT = {"fake": {"usage": "custom", "usage_block": {
    "prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000}}}


def post(client: httpx.Client, session: str, parent: str = "", **body: Any) -> httpx.Response:
    headers = {"X-Session-Id": session}
    if parent:
        headers["X-Session-Parent"] = parent
    return client.post("/v1/chat/completions", headers=headers, json={
        "model": "priced", "messages": HI, "max_tokens": 100, **body})


def client_of(daemon: InProcessDaemon) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30,
                        headers={"Authorization": f"Bearer {daemon.token}"})


def refusals(daemon: InProcessDaemon, session: str) -> list[CallRefused]:
    return [event for e in daemon.runtime.log.read_stream(f"session-{session}")
            if isinstance(event := CODEC.decode(e.type, e.data), CallRefused)]


def error_of(reply: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = reply.json()["error"]
    return error


# -- item 4: X-Session-Parent chains ------------------------------------------------------


def test_a_subagent_loop_past_the_ancestry_bound_is_refused_not_a_new_root(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    depth = MAX_ANCESTRY + 6
    with client_of(daemon) as client:
        # The root spends its $0.015 cap up: $0.02 in two calls.
        assert [post(client, "root", **CENT).status_code for _ in range(2)] == [200, 200]
        sent = len(fake.state.snapshot())
        statuses, messages = {}, {}
        for i in range(1, depth + 1):
            reply = post(client, f"c{i}", "root" if i == 1 else f"c{i - 1}")
            statuses[i] = (reply.status_code, error_of(reply)["code"])
            messages[i] = error_of(reply)["message"]
        # Every session down the chain draws from the root's used-up cap, and past the
        # bound (a chain of 64: root and c1 … c63) the parent is refused, not dropped.
        assert {statuses[i] for i in range(1, MAX_ANCESTRY)} == {(402, "cap_exhausted")}
        assert {statuses[i] for i in range(MAX_ANCESTRY, depth + 1)} == {
            (400, "session_parent_too_deep")}
        message = messages[MAX_ANCESTRY]  # the bound and the chain named
        assert f"a chain of parents may be at most {MAX_ANCESTRY} long" in message
        assert f"c{MAX_ANCESTRY} -> c{MAX_ANCESTRY - 1} -> " in message
        assert message.endswith("not sent")
        # A retry, with the header or without, and a child of a refused session, are
        # refused too: none of them is a new root.
        retried = post(client, f"c{MAX_ANCESTRY}", f"c{MAX_ANCESTRY - 1}")
        again = post(client, f"c{MAX_ANCESTRY}")
        below = post(client, "under-the-cut", f"c{depth}")
        assert error_of(retried)["type"] == "invalid_request_error"
        assert (retried.status_code, again.status_code, below.status_code) == (400, 400, 400)
        assert f"descends from session c{MAX_ANCESTRY}" in error_of(below)["message"]
        assert len(fake.state.snapshot()) == sent  # none of them reached the upstream
        # The daemon keeps serving everyone else.
        assert post(client, "bystander").status_code == 200
    refused = refusals(daemon, f"c{MAX_ANCESTRY}")[0]
    assert (refused.stage, refused.status, refused.code) == (
        "budgets", 400, "session_parent_too_deep")
    first = next(iter(daemon.runtime.log.read_stream(f"session-c{MAX_ANCESTRY}")))
    started = CODEC.decode(first.type, first.data)
    assert isinstance(started, SessionStarted)  # the parent it named, as named
    assert started.parent_session_id == f"c{MAX_ANCESTRY - 1}"
    nothing_open(daemon)
    daemon.stop()
    again_daemon = start_made(made, tmp_path, fake, CAPPED)  # a restart cuts the same link
    with client_of(again_daemon) as client:
        assert post(client, f"c{MAX_ANCESTRY + 1}").status_code == 400
        assert post(client, f"c{MAX_ANCESTRY - 1}").status_code == 402  # root's cap
        assert post(client, "bystander").status_code == 200
    nothing_open(again_daemon)


def test_a_parent_that_makes_a_cycle_is_refused(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    with client_of(daemon) as client:
        assert post(client, "a", "b").status_code == 200  # b is not known yet
        loop = post(client, "b", "a")  # b would be a's parent and its child
        assert loop.status_code == 400 and error_of(loop)["code"] == "session_parent_cycle"
        assert "a -> b" in error_of(loop)["message"]
        assert post(client, "b").status_code == 400  # b stays refused
        # The loop is refused whole: a session below b is under a too, as b claimed, and
        # a's cap cannot hold what is spent under b (a descends from b: its cap holds a's).
        below = post(client, "a")
        assert below.status_code == 400 and "a -> b" in error_of(below)["message"]
        assert "cycle" in error_of(below)["message"]
        assert post(client, "c", "b").status_code == 400
        assert post(client, "elsewhere").status_code == 200
        budget = client.get("/v1/sessions/a/budget").json()
    assert budget["parent"] == "b"
    assert len(fake.state.snapshot()) == 2
    nothing_open(daemon)
    daemon.stop()
    again = start_made(made, tmp_path, fake, CAPPED)  # a restart cuts the same link
    with client_of(again) as client:
        assert [post(client, s).status_code for s in ("a", "b", "c")] == [400, 400, 400]
        assert client.get("/v1/sessions/a/budget").json()["parent"] == "b"
    nothing_open(again)


def test_a_parent_named_late_holds_the_subtree_that_called_first(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    with client_of(daemon) as client:
        assert [post(client, "boss", **CENT).status_code for _ in range(2)] == [200, 200]
        # A subagent's subagent calls first, naming a parent that never called yet.
        assert post(client, "grandkid", "kid").status_code == 200
        # Then the subagent names the used-up boss: it is no root free of boss's cap.
        late = post(client, "kid", "boss")
        assert late.status_code == 402 and "session boss" in error_of(late)["message"]
        assert post(client, "grandkid").status_code == 402
        budget = client.get("/v1/sessions/kid/budget").json()
    assert budget["parent"] == "boss"
    nothing_open(daemon)


def test_a_deep_chain_run_before_any_cap_is_held_once_a_cap_is_set(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, MODEL)  # no cap: the ledger is not on the path
    depth = MAX_ANCESTRY + 6
    with client_of(daemon) as client:
        for i in range(1, depth + 1):  # each session spends $0.01
            parent = "top" if i == 1 else f"d{i - 1}"
            assert post(client, f"d{i}", parent, **CENT).status_code == 200
        assert post(client, "top", **CENT).status_code == 200
        # A cap on the loop's top session: everything below spent it already.
        capped = client.put("/v1/sessions/top/budget", json={"session_usd": "0.5"})
        assert capped.status_code == 200, capped.text
        # Every session's spend counts, the ones past the bound too: $0.71 (folded with
        # the chain cut at the bound, $0.64, which left room under a cap of $0.65).
        assert capped.json()["spent"] == "0.71"
        # Within the bound the top's cap refuses; past it, the link is cut: refused too.
        shallow = post(client, "d3")
        assert shallow.status_code == 402 and error_of(shallow)["code"] == "cap_exhausted"
        deep = post(client, f"d{depth}")
        assert deep.status_code == 400, deep.text
        assert error_of(deep)["code"] == "session_parent_too_deep"
        assert post(client, "elsewhere").status_code == 200
    nothing_open(daemon)
    # With the daemon stopped, `status --session` reads the same spend from the log: the
    # whole chain, as the ledger counts it (it stopped at depth 64: $0.64).
    with EventLog(daemon.db, readonly=True) as log:
        assert read_budget(log, daemon.config, "top").spent == "0.71"


# -- item 7: what a lenient server bills --------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("n", "100"), ("n", 100.0), ("n", True), ("n", [100]),
    ("max_tokens", "100"), ("max_tokens", 100.0), ("max_tokens", False), ("max_tokens", 1e300),
    ("max_completion_tokens", "100"), ("max_completion_tokens", 2.5),
    ("max_output_tokens", "100000"),
])
def test_a_non_integer_count_or_limit_is_refused_naming_the_field(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    field: str, value: Any,
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    with client_of(daemon) as client:
        reply = post(client, "lenient", **{field: value})
        assert reply.status_code == 400, reply.text
        error = error_of(reply)
        assert error["code"] == "invalid_request" and error["type"] == "invalid_request_error"
        assert error["message"].startswith(f"'{field}' must be an integer")
        assert fake.state.snapshot() == []  # never sent
        assert client.get("/v1/sessions/lenient/budget").json()["reserved"] == "0"
        # Integers, and null ("not given"), still go through.
        ok = post(client, "lenient", n=2, max_completion_tokens=None)
        assert ok.status_code == 200, ok.text
    [refused] = refusals(daemon, "lenient")
    assert (refused.stage, refused.status) == ("validation", 400)
    nothing_open(daemon)


def test_two_hundred_images_reserve_their_input_and_are_refused_under_a_small_cap(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start_made(made, tmp_path, fake, CAPPED)
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    many = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                         *[image] * 200]}]
    with client_of(daemon) as client:
        reply = post(client, "album", messages=many)
        assert reply.status_code == 402, reply.text
        error = error_of(reply)
        assert error["code"] == "request_exceeds_cap"
        assert "may cost up to ~$1.60" in error["message"]  # 200 x 4,000 tokens at $2/M
        assert fake.state.snapshot() == []
        # One image fits the $0.015 cap (4,000 tokens: $0.008), two do not.
        one = [{"role": "user", "content": [image]}]
        assert post(client, "album", messages=one).status_code == 200
        two = post(client, "album", messages=[{"role": "user", "content": [image, image]}])
        assert two.status_code == 402
        assert client.get("/v1/sessions/album/budget").json()["reserved"] == "0"
    assert len(fake.state.snapshot()) == 1
    nothing_open(daemon)
