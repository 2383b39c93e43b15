"""Spend caps through the daemon: reserved before sending, refused unsent, settled after.

The `openai` SDK against an in-process daemon and the fake upstream, whose usage block a
test sets (``usage: custom``) so a call costs what the test needs. The model ``priced``
costs $2 / $8 per million input / output tokens, so a call's worst case is dominated by
its ``max_tokens`` at $8 per million.
"""

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest
from sessionwarden.clock import SystemClock
from sessionwarden.events import CODEC, CallRefused, SessionStarted
from sessionwarden.store import EventLog
from sessionwarden.views.budget_status import read_budget

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.support.fake_provider import FakeProviderServer

PRICED = """
[budgets]
session_usd = "0.015"
{extra}
[[models]]
name = "priced"
provider = "fake"
context_length = 128000
price = {{ input = "2.00", output = "8.00" }}
"""

HI = [{"role": "user", "content": "hi"}]


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """Steer the fake to report this usage: the call costs 2 * prompt + 8 * completion µ$."""
    return {"fake": {"usage": "custom", "usage_block": {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion}}}


def start(tmp_path: Path, fake: FakeProviderServer, extra: str = "") -> InProcessDaemon:
    return InProcessDaemon(tmp_path / "events.db", fake,
                           extra_config=PRICED.format(extra=extra)).start()


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    d = start(tmp_path, fake)
    try:
        yield d
    finally:
        d.stop()


def refused(daemon: InProcessDaemon, session: str) -> list[CallRefused]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, CallRefused)]


def call(client: openai.OpenAI, max_tokens: int = 100, model: str = "priced",
         body: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model=model, messages=HI, max_tokens=max_tokens,  # type: ignore[arg-type]
        extra_body=body, **kwargs)


def test_a_request_above_the_session_cap_is_refused_without_being_sent(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with daemon.openai(session="big") as client, pytest.raises(openai.APIStatusError) as caught:
        call(client, max_tokens=2000)  # worst case $0.016 > the cap of $0.015
    assert caught.value.status_code == 402
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "request_exceeds_cap" and error["type"] == "insufficient_quota"
    assert "session cap of session big ($0.015)" in error["message"]
    assert "retrying cannot help" in error["message"]
    assert "retry-after" not in caught.value.response.headers
    assert fake.state.snapshot() == []  # the upstream never saw it
    [record] = refused(daemon, "big")
    assert (record.stage, record.status, record.code) == ("budgets", 402, "request_exceeds_cap")


def test_a_used_up_session_cap_refuses_the_next_call_and_settles_real_costs(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with daemon.openai(session="spender") as client:
        # Each call reserves $0.0008 and settles at its real cost, $0.01.
        call(client, body=usage(1000, 1000))
        call(client, body=usage(1000, 1000))
        with pytest.raises(openai.APIStatusError) as caught:
            call(client)
    assert caught.value.status_code == 402
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "cap_exhausted"
    assert "session cap of session spender ($0.015) is used up: spent ~$0.02" in error["message"]
    assert "retry-after" not in caught.value.response.headers  # waiting cannot help
    assert len(fake.state.snapshot()) == 2
    budget = httpx.get(f"http://127.0.0.1:{daemon.port}/v1/sessions/spender/budget",
                       headers={"Authorization": f"Bearer {daemon.token}"}).json()
    assert budget == {"session_id": "spender", "cap": "0.015", "spent": "0.02",
                      "reserved": "0", "left": "0", "unknown_calls": 0, "parent": ""}


def test_twenty_parallel_calls_against_a_cap_that_fits_five_send_at_most_five(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    control = httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                           headers={"Authorization": f"Bearer {daemon.token}"})
    # Each call's worst case is $0.08 plus a few input tokens: 5 fit in $0.45, 6 do not.
    assert control.put("/v1/sessions/crowd/budget",
                       json={"session_usd": "0.45"}).json()["cap"] == "0.45"
    statuses: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(20)

    def one() -> None:
        with daemon.openai(session="crowd") as client:
            gate.wait()
            try:
                call(client, max_tokens=10_000, body={"fake": {"delay_ms": 400}})
                status = 200
            except openai.APIStatusError as exc:
                status = exc.status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    sent = len(fake.state.snapshot())
    assert sorted(set(statuses)) == [200, 402] and len(statuses) == 20
    assert statuses.count(200) == sent and 1 <= sent <= 5
    assert len(refused(daemon, "crowd")) == 20 - sent
    control.close()


def test_a_used_up_daily_cap_says_when_to_retry(tmp_path: Path,
                                                 fake: FakeProviderServer) -> None:
    daemon = start(tmp_path, fake, extra='daily_usd = "0.05"')
    try:
        with daemon.openai(session="day-1") as client:
            call(client, body=usage(0, 5000))  # settles at $0.04
        # Another session, the same day: $0.04 spent + $0.012 worst case > $0.05.
        with daemon.openai(session="day-2") as client, pytest.raises(
                openai.APIStatusError) as caught:
            call(client, max_tokens=1500)
        now = SystemClock().now()  # the daemon's clock (with SESSIONWARDEN_CLOCK_OFFSET)
    finally:
        daemon.stop()
    assert caught.value.status_code == 402
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "cap_exhausted"
    # $0.01 is left, less than the call's worst case: said so, with the cap (not "used up").
    assert (f"more than is left of the daily cap for {now.date().isoformat()} (UTC): ~$0.01 "
            "of $0.05 (spent ~$0.04") in error["message"]
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    retry = int(caught.value.response.headers["retry-after"])
    assert abs(retry - (midnight - now).total_seconds()) < 10
    assert len(fake.state.snapshot()) == 1


def test_a_provider_daily_cap_holds_that_provider_only(tmp_path: Path,
                                                       fake: FakeProviderServer) -> None:
    second = f"""
[[providers]]
name = "capped"
base_url = "{fake.base_url}"
keys = ["env:FAKE_KEY_A"]
daily_usd = "0.001"
[[models]]
name = "capped-model"
provider = "capped"
price = {{ input = "2.00", output = "8.00" }}
"""
    daemon = start(tmp_path, fake, extra=second)
    try:
        with daemon.openai(session="providers") as client:
            with pytest.raises(openai.APIStatusError) as caught:
                call(client, model="capped-model", max_tokens=200)  # worst $0.0016
            call(client, max_tokens=200)  # the other provider has no such cap
    finally:
        daemon.stop()
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "request_exceeds_cap"
    assert "daily cap of provider capped" in error["message"]
    assert len(fake.state.snapshot()) == 1


def test_an_unpriced_model_under_a_cap_is_refused_unless_allowed(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake)
    try:
        with daemon.openai(session="unpriced") as client, pytest.raises(
                openai.APIStatusError) as caught:
            call(client, model=MODEL)
    finally:
        daemon.stop()
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "unpriced_model"
    assert "allow_unpriced = true" in error["message"]
    assert fake.state.snapshot() == []
    daemon = InProcessDaemon(tmp_path / "other.db", fake, extra_config=PRICED.format(
        extra="allow_unpriced = true"))
    daemon.start()
    try:
        with daemon.openai(session="unpriced") as client:
            call(client, model=MODEL)
    finally:
        daemon.stop()
    assert len(fake.state.snapshot()) == 1


def test_children_draw_from_their_parents_cap_and_it_survives_a_restart(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake)
    auth = {"Authorization": f"Bearer {daemon.token}"}
    try:
        with daemon.openai(session="child-1") as client:
            call(client, body=usage(1000, 1000), extra_headers={"X-Session-Parent": "agent"})
        with daemon.openai(session="child-2") as client:
            call(client, body=usage(1000, 1000), extra_headers={"X-Session-Parent": "agent"})
            # The parent's cap ($0.015) is used up by its children: the next child call
            # is refused by it, though child-2's own spend ($0.01) fits its own cap.
            with pytest.raises(openai.APIStatusError) as caught:
                call(client)
        budget = httpx.get(f"http://127.0.0.1:{daemon.port}/v1/sessions/agent/budget",
                           headers=auth).json()
        first = next(iter(daemon.runtime.log.read_stream("session-child-1")))
        started = CODEC.decode(first.type, first.data)
    finally:
        daemon.stop()
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "cap_exhausted"
    assert "session cap of session agent" in error["message"]
    assert Decimal(budget["spent"]) == Decimal("0.02") and budget["left"] == "0"
    assert isinstance(started, SessionStarted) and started.parent_session_id == "agent"
    # A new process folds the spend back from the ledger: the subtree is still used up.
    again = InProcessDaemon(tmp_path / "events.db", fake, extra_config=PRICED.format(extra=""))
    again.start()
    try:
        with again.openai(session="child-3") as client:
            with pytest.raises(openai.APIStatusError) as caught:
                call(client, extra_headers={"X-Session-Parent": "agent"})
            assert caught.value.status_code == 402
            # Lifting the parent's cap through the control API lets its subtree go on.
            lifted = httpx.put(f"http://127.0.0.1:{again.port}/v1/sessions/agent/budget",
                               headers={"Authorization": f"Bearer {again.token}"},
                               json={"session_usd": None})
            assert lifted.status_code == 200 and lifted.json()["cap"] is None
            call(client, extra_headers={"X-Session-Parent": "agent"})
    finally:
        again.stop()
    assert len(fake.state.snapshot()) == 3
    # The log alone (the daemon stopped) knows the subtree's spend and the lifted cap.
    with EventLog(tmp_path / "events.db", readonly=True) as log:
        budget = msgspec.to_builtins(read_budget(log, again.config, "agent"))
        child = read_budget(log, again.config, "child-3")
        costs = {s: Decimal(c) for s, c in log.read_connection().execute(
            "SELECT session_id, cost FROM view_ledger")}
    assert budget["cap"] is None and budget["left"] is None and budget["reserved"] == "0"
    assert Decimal(budget["spent"]) == sum(costs.values()) > Decimal("0.02")
    assert budget["unknown_calls"] == 0
    assert (child.parent, child.cap, Decimal(child.spent)) == ("agent", "0.015",
                                                               costs["child-3"])


def test_the_budget_api_refuses_bad_caps(daemon: InProcessDaemon) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                      headers={"Authorization": f"Bearer {daemon.token}"}) as control:
        for body in ({"session_usd": 2.5}, {"session_usd": "-1"}, {"session_usd": "NaN"},
                     {"session_usd": "0"}, {"session_usd": "1e12"}, {"usd": "1"}, []):
            reply = control.put("/v1/sessions/s/budget", json=body)
            assert reply.status_code == 400, body
            assert "Traceback" not in reply.text
        assert control.post("/v1/sessions/s/budget", json={}).status_code == 405
        assert control.get("/v1/sessions/s/nothing").status_code == 404
        fresh = control.get("/v1/sessions/never-seen/budget").json()
        assert fresh["cap"] == "0.015" and fresh["spent"] == "0" and fresh["left"] == "0.015"
    with daemon.openai(session="s") as client, pytest.raises(openai.BadRequestError):
        call(client, extra_headers={"X-Session-Parent": "../../etc"})


def test_a_cap_set_later_sees_what_was_spent_while_no_cap_applied(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    # No cap in the configuration: calls do not pass the ledger; the first cap set
    # through the control API folds the log's costs and parents (recorded either way).
    unbudgeted = PRICED.format(extra="").replace('session_usd = "0.015"', "")
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=unbudgeted).start()
    try:
        with daemon.openai(session="kid") as client:
            call(client, body=usage(1000, 1000), extra_headers={"X-Session-Parent": "boss"})
        with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                          headers={"Authorization": f"Bearer {daemon.token}"}) as control:
            assert control.get("/v1/sessions/boss/budget").json()["spent"] == "0.01"
            reply = control.put("/v1/sessions/boss/budget", json={"session_usd": "0.0105"})
        assert (reply.json()["spent"], reply.json()["left"]) == ("0.01", "0.0005")
        with daemon.openai(session="kid") as client, pytest.raises(
                openai.APIStatusError) as caught:
            call(client)  # its worst case ($0.0008) no longer fits the parent's cap
    finally:
        daemon.stop()
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "cap_exhausted"
    assert "session cap of session boss" in error["message"]
    assert len(fake.state.snapshot()) == 1
