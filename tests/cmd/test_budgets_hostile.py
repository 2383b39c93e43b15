"""Spend caps attacked like a hostile client would: odd caps, odd parents, odd limits, races.

The promise under attack: bad input gets a clear short error and changes nothing; a
reservation is always settled or released (``reserved`` back to "0" once every call
ended); every call that may have cost money has its ledger row; a cap never overshoots
but by a model writing past the reserved output bound. The `openai` SDK and httpx
against an in-process daemon (``tests/cmd/test_budgets_e2e.py``'s ``priced`` model:
$2 / $8 per million input / output tokens) and the fake upstream.
"""

import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest
from sessionwarden.actors.messages import Settle
from sessionwarden.store import EventLog
from sessionwarden.views.budget_status import read_budget
from sessionwarden.views.budgets import BUDGET_COST

from tests.cmd import test_budgets_e2e
from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_budgets_e2e import PRICED, call, start, usage
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

#: The spend-cap tests' daemon: priced models, a $0.015 session cap (stopped after each).
daemon = test_budgets_e2e.daemon


def control(daemon: InProcessDaemon) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",
                        headers={"Authorization": f"Bearer {daemon.token}"}, timeout=10)


def status_of(fn: Any) -> int:
    try:
        fn()
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def test_hostile_cap_bodies_get_a_short_400_and_change_nothing(
    daemon: InProcessDaemon
) -> None:
    with control(daemon) as api:
        bad: list[Any] = [
            {"session_usd": "-1"}, {"session_usd": "-0"}, {"session_usd": "2,50"},
            {"session_usd": "NaN"}, {"session_usd": "Infinity"}, {"session_usd": "-Infinity"},
            {"session_usd": "sNaN"}, {"session_usd": "9" * 5000}, {"session_usd": ""},
            {"session_usd": "1e-1000000"}, {"session_usd": "1e-999999999999"},
            {"session_usd": "0." + "0" * 3000 + "1"}, {"session_usd": "0.00000000001"},
            {"session_usd": {"usd": "1"}}, {"session_usd": ["1"]}, {"session_usd": 1},
            {"session_usd": True}, {"session_usd": "1", "extra": 1}, {}, "1", None,
        ]
        for body in bad:
            began = time.monotonic()
            reply = api.put("/v1/sessions/victim/budget", json=body)
            assert reply.status_code == 400, body
            assert time.monotonic() - began < 2, body
            error = reply.json()["error"]
            assert len(error["message"]) < 400 and "Traceback" not in reply.text, body
        huge = api.put("/v1/sessions/victim/budget", content=b'{"session_usd": "' + b"1" * (
            1 << 20) + b'"}')
        assert huge.status_code == 413
        assert api.put("/v1/sessions/victim/budget", content=b"\xff\xfe").status_code == 400
        # Nothing of that changed the cap: the configured one stands.
        assert api.get("/v1/sessions/victim/budget").json()["cap"] == "0.015"
        good = {"1e3": "1000", " 2.5 ": "2.5", "0.0000000001": "0.0000000001",
                "2.50": "2.5"}
        for text, shown in good.items():
            reply = api.put("/v1/sessions/victim/budget", json={"session_usd": text},
                            headers={"content-type": "text/plain"})
            assert reply.status_code == 200, text
            assert reply.json()["cap"] == shown
        # Duplicate keys: the last one wins, as in every JSON decoder of ours.
        reply = api.put("/v1/sessions/victim/budget",
                        content=b'{"session_usd": "1", "session_usd": "3"}')
        assert reply.status_code == 200 and reply.json()["cap"] == "3"
        edge = "a" * 128
        assert api.put(f"/v1/sessions/{edge}/budget",
                       json={"session_usd": "1"}).json()["session_id"] == edge
        assert api.put(f"/v1/sessions/{edge}b/budget",
                       json={"session_usd": "1"}).status_code == 400
        assert api.get("/v1/sessions/a%2Fb/budget").status_code in (400, 404)


def test_n_choices_multiply_the_output_a_call_may_cost(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    # n = 10 answers of up to 1,000 tokens each: $0.08 of output, above the $0.015 cap.
    with daemon.openai(session="many") as client, pytest.raises(openai.APIStatusError) as caught:
        call(client, max_tokens=1000, n=10)
    assert caught.value.status_code == 402
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "request_exceeds_cap"
    assert fake.state.snapshot() == []
    with daemon.openai(session="many") as client:  # an odd n counts as one answer
        for n in (1, 0, -3):
            assert status_of(lambda n=n: call(client, max_tokens=100, n=n)) == 200


def test_absurd_output_limits_are_refused_or_reserved_sanely(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    with daemon.openai(session="limits") as client:
        huge = [status_of(lambda v=v: call(client, max_tokens=v))
                for v in (10**12, 10**30, 2**63, 2**64 + 1)]
        assert huge == [402] * 4
        odd = [status_of(lambda b=b: call(client, body=b)) for b in (
            {"max_tokens": -1}, {"max_tokens": "1000"}, {"max_tokens": 1.5},
            {"max_tokens": 1e300}, {"max_tokens": None}, {"max_tokens": True},
            {"max_completion_tokens": 10**12}, {"max_completion_tokens": 1, "max_tokens": 10**9},
        )]
    # A limit that is not an integer is refused as such (issue 21 §7: a lenient server
    # reads "1000" as 1,000); one the daemon cannot use (-1, null): the default bound
    # (32,768 tokens, $0.26) > the cap.
    assert odd == [402, 400, 400, 400, 402, 400, 402, 402]
    assert fake.state.snapshot() == []
    with control(daemon) as api:
        budget = api.get("/v1/sessions/limits/budget").json()
    assert (budget["spent"], budget["reserved"]) == ("0", "0")
    # An enormous input against the cap: refused as too big, never sent.
    with daemon.openai(session="limits") as client, pytest.raises(
            openai.APIStatusError) as caught:
        client.chat.completions.create(model="priced", max_tokens=10, messages=[
            {"role": "user", "content": "word " * 200_000}])
    assert caught.value.status_code in (400, 402, 413)
    assert fake.state.snapshot() == []


def test_a_parent_named_after_a_refused_first_call_is_not_adopted(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake)
    try:
        with daemon.openai(session="kid") as client:
            assert status_of(lambda: call(client, max_tokens=10**6)) == 402  # first call
            call(client, body=usage(1000, 1000), extra_headers={"X-Session-Parent": "mom"})
        with control(daemon) as api:
            live = [api.get(f"/v1/sessions/{s}/budget").json() for s in ("kid", "mom")]
    finally:
        daemon.stop()
    # The parent is fixed by the session's first call, which named none.
    assert live[0]["parent"] == "" and live[1]["spent"] == "0"
    again = start(tmp_path, fake)
    try:
        with control(again) as api:
            assert [api.get(f"/v1/sessions/{s}/budget").json() for s in ("kid", "mom")] == live
    finally:
        again.stop()


def test_parent_cycles_self_parents_and_deep_chains_hold_across_a_restart(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake, extra="")
    names = ["a", "b", "self", "deep-000", "deep-001", "deep-002", "deep-003", "deep-064",
             "deep-065"]
    try:
        with control(daemon) as api:
            for name in ("a", "b", "self"):
                api.put(f"/v1/sessions/{name}/budget", json={"session_usd": "5"})
        lineage = [("a", "b"), ("b", "a"), ("self", "self")]
        # A chain 67 deep (the ledger follows 64), children sorted before their parents.
        lineage += [(f"deep-{i:03d}", f"deep-{i + 1:03d}") for i in range(65, -1, -1)]
        # A parent making a cycle, or a chain past the bound, is refused (issue 21 §4):
        # deep-002 would make it 65 long (deep-066 … deep-002), and deep-001 and
        # deep-000 descend from it.
        refused = {"b", "deep-002", "deep-001", "deep-000"}
        with control(daemon) as raw:  # one plain client: 70 SDK clients are slow to make
            for session, parent in lineage:
                assert raw.post("/v1/chat/completions", json={
                    "model": "priced", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 100, **usage(10, 10)}, headers={
                    "X-Session-Id": session, "X-Session-Parent": parent}
                ).status_code == (400 if session in refused else 200), session
        with daemon.openai(session="odd") as client:
            for parent in ("../x", "a b", "é", "x" * 10_000, "a\tb"):
                try:
                    status = status_of(lambda p=parent: call(
                        client, extra_headers={"X-Session-Parent": p}))
                except (UnicodeEncodeError, httpx.LocalProtocolError):
                    status = 400  # the client itself refuses to send it
                assert status == 400, parent
        with control(daemon) as api:
            live = {s: api.get(f"/v1/sessions/{s}/budget").json() for s in names}
    finally:
        daemon.stop()
    assert live["a"]["parent"] == "b" and live["b"]["parent"] == ""
    assert live["self"]["parent"] == ""
    # b spent nothing (refused): its subtree's money is a's.
    assert Decimal(live["b"]["spent"]) == Decimal(live["self"]["spent"]) > 0
    assert (live["deep-002"]["parent"], live["deep-002"]["spent"]) == ("", "0")
    assert (live["deep-001"]["parent"], live["deep-001"]["spent"]) == ("deep-002", "0")
    again = start(tmp_path, fake)
    try:
        with control(again) as api:
            after = {s: api.get(f"/v1/sessions/{s}/budget").json() for s in names}
    finally:
        again.stop()
    assert after == live


def test_every_reservation_ends_settled_or_released_whatever_the_upstream_does(
    daemon: InProcessDaemon, fake: FakeProviderServer
) -> None:
    api = control(daemon)
    assert api.put("/v1/sessions/race/budget", json={"session_usd": "0.45"}).status_code == 200
    kinds: list[dict[str, Any]] = [
        {"body": {"fake": {"delay_ms": 200}}},
        {"body": {"fake": {"status": 500}}},
        {"body": {"fake": {"status": 429, "headers": {"retry-after": "1"}}}},
        {"body": {"fake": {"break_after_chunks": 1}}, "stream": True},
        {"body": {"fake": {"usage": "missing"}}, "stream": True},
        {"body": {"fake": {"chunk_delay_ms": 300, "stream_chunks": 5}}, "leave": True},
    ]
    statuses: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(25)
    url = f"http://127.0.0.1:{daemon.port}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {daemon.token}", "X-Session-Id": "race"}

    def one(kind: dict[str, Any]) -> None:
        gate.wait()
        body = {"model": "priced", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 10_000, **kind["body"]}
        if kind.get("leave"):  # a client that leaves mid-stream
            with httpx.stream("POST", url, headers=headers, timeout=10,
                              json={**body, "stream": True}) as reply:
                status = reply.status_code
                for _ in reply.iter_bytes():
                    break
        else:
            reply = httpx.post(url, headers=headers, timeout=10,
                               json={**body, "stream": bool(kind.get("stream"))})
            status = reply.status_code
            assert "Traceback" not in reply.text
        with lock:
            statuses.append(status)

    def caps() -> None:
        gate.wait()
        for usd in ("0.1", None, "0.45", "0.2", None, "0.45"):
            assert api.put("/v1/sessions/race/budget",
                           json={"session_usd": usd}).status_code == 200
            time.sleep(0.03)

    threads = [threading.Thread(target=one, args=(kinds[i % len(kinds)],))
               for i in range(24)] + [threading.Thread(target=caps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(statuses) == 24 and set(statuses) <= {200, 402, 429, 500, 502}
    deadline = time.monotonic() + 10
    while (budget := api.get("/v1/sessions/race/budget").json())["reserved"] != "0":
        assert time.monotonic() < deadline, budget
        time.sleep(0.05)
    api.close()
    admitted = [e for e in daemon.types("session-race") if e.startswith("session.call_admitted")]
    rows = daemon.rows(f"SELECT call_id, {BUDGET_COST} FROM view_ledger"
                       " WHERE session_id = 'race'")
    assert len(rows) == len(admitted) == len({r[0] for r in rows})
    # An error answer (429, 500) costs nothing: $0 for the cap, as for the ledger's sum;
    # a call sent and never answered (a stream broken before its first event, under
    # load) is held at its worst case, an unknown cost.
    known = sum(Decimal(c) for _, c in rows if c is not None)
    unknown = sum(1 for _, c in rows if c is None)
    assert budget["unknown_calls"] == unknown, (rows, budget, statuses)
    assert (Decimal(budget["spent"]) == known if not unknown
            else Decimal(budget["spent"]) > known), (rows, budget, statuses)


def test_a_client_that_leaves_before_the_answer_is_charged_the_worst_case(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    # The upstream has the request and bills it whether or not anyone reads the answer.
    daemon = start(tmp_path, fake)
    url = f"http://127.0.0.1:{daemon.port}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {daemon.token}", "X-Session-Id": "leaver"}
    try:
        for stream in (False, True):
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(url, headers=headers, timeout=httpx.Timeout(5, read=0.3), json={
                    "model": "priced", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 800, "stream": stream, "fake": {"delay_ms": 800}})
        deadline = time.monotonic() + 10
        with control(daemon) as api:
            while (budget := api.get("/v1/sessions/leaver/budget").json())[
                    "unknown_calls"] < 2 or budget["reserved"] != "0":
                assert time.monotonic() < deadline, budget
                time.sleep(0.05)
            # Two worst cases of $0.0064 each: a third such call no longer fits $0.015.
            assert Decimal(budget["spent"]) > Decimal("0.0128")
        with daemon.openai(session="leaver") as client, pytest.raises(
                openai.APIStatusError) as caught:
            call(client, max_tokens=800)
        assert caught.value.status_code == 402
    finally:
        daemon.stop()
    assert len(fake.state.snapshot()) == 2  # both were sent
    # After a restart the ledger's rows say "unknown": counted as such, at $0.
    again = start(tmp_path, fake)
    try:
        with control(again) as api:
            assert api.get("/v1/sessions/leaver/budget").json()["unknown_calls"] == 2
    finally:
        again.stop()


def test_error_answers_count_the_same_before_and_after_a_restart(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake)
    try:
        with daemon.openai(session="errs") as client:
            for status in (422, 400):
                assert status_of(lambda s=status: call(
                    client, body={"fake": {"status": s}})) == status
            call(client, body=usage(1000, 1000))
        time.sleep(0.2)  # the ledger is told its Settle/Release after the reply
        with control(daemon) as api:
            live = api.get("/v1/sessions/errs/budget").json()
    finally:
        daemon.stop()
    assert (live["spent"], live["unknown_calls"]) == ("0.01", 0)
    again = start(tmp_path, fake)
    try:
        with control(again) as api:
            assert api.get("/v1/sessions/errs/budget").json() == live
    finally:
        again.stop()
    with EventLog(tmp_path / "events.db", readonly=True) as log:  # the daemon stopped
        stopped = msgspec.to_builtins(read_budget(log, again.config, "errs"))
    assert (stopped["spent"], stopped["unknown_calls"]) == ("0.01", 0)


def test_a_provider_day_cap_across_utc_midnight_and_an_allowed_unpriced_model(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    clock = FakeClock(datetime(2026, 12, 2, 23, 59, 59, 500_000, tzinfo=UTC))
    extra = f"""allow_unpriced = true
[[providers]]
name = "capped"
base_url = "{fake.base_url}"
keys = ["env:FAKE_KEY_A"]
daily_usd = "0.01"
[[models]]
name = "capped-model"
provider = "capped"
price = {{ input = "0", output = "8.00" }}
"""
    daemon = InProcessDaemon(tmp_path / "events.db", fake, clock=clock,
                             extra_config=PRICED.format(extra=extra)).start()
    try:
        statuses: list[int] = []

        def spend(session: str, delay_ms: int = 0) -> None:
            with daemon.openai(session=session) as client:
                statuses.append(status_of(lambda: call(
                    client, model="capped-model", max_tokens=1000,
                    body={**usage(0, 1000), "fake": {**usage(0, 1000)["fake"],
                                                     "delay_ms": delay_ms}})))

        # Reserved at 23:59:59.5, answered after midnight: spent on the day it was sent.
        late = threading.Thread(target=spend, args=("night", 600))
        late.start()
        time.sleep(0.3)
        clock.set(datetime(2026, 12, 3, 0, 0, 1, tzinfo=UTC))
        late.join(10)
        spend("morning")  # the new day's $0.01 holds its $0.008
        with daemon.openai(session="morning-2") as client, pytest.raises(
                openai.APIStatusError) as caught:
            call(client, model="capped-model", max_tokens=1000)
        with daemon.openai(session="free") as client:  # no price, allowed: reserves $0
            call(client, model=MODEL)
        time.sleep(0.2)  # its Settle follows the reply
        with control(daemon) as api:
            free = api.get("/v1/sessions/free/budget").json()
    finally:
        daemon.stop()
    assert statuses == [200, 200]
    assert caught.value.status_code == 402
    assert int(caught.value.response.headers["retry-after"]) == 86_399
    assert "daily cap of provider capped for 2026-12-03" in str(caught.value.body)
    assert (free["spent"], free["reserved"], free["unknown_calls"]) == ("0", "0", 1)


def test_a_restart_with_a_call_in_flight_holds_nothing_and_counts_it_once(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    daemon = start(tmp_path, fake)
    results: list[object] = []

    def slow() -> None:
        with daemon.openai(session="inflight") as client:
            try:
                results.append(call(client, max_tokens=1000, body={"fake": {"delay_ms": 4000}}))
            except openai.APIError as exc:
                results.append(exc)

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not fake.state.snapshot():  # the upstream has it
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with control(daemon) as api:
            assert api.get("/v1/sessions/inflight/budget").json()["reserved"] == "0.008002"
    finally:
        daemon.stop()
        thread.join(10)
    again = start(tmp_path, fake)
    try:
        with control(again) as api:
            budget = api.get("/v1/sessions/inflight/budget").json()
        rows = again.rows("SELECT outcome FROM view_ledger WHERE session_id = 'inflight'")
    finally:
        again.stop()
    assert len(rows) == 1 and results and not isinstance(results[0], str)
    # Its cost is unknown (it was sent): counted once, at $0, and marked so.
    assert (budget["reserved"], budget["unknown_calls"], budget["spent"]) == ("0", 1, "0")


def test_a_cap_lifted_and_set_again_keeps_the_calls_in_flight_reserved(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    unbudgeted = PRICED.format(extra="").replace('session_usd = "0.015"', "")
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=unbudgeted).start()
    api = control(daemon)
    statuses: list[int] = []

    def slow() -> None:
        with daemon.openai(session="swing") as client:
            statuses.append(status_of(lambda: call(
                client, max_tokens=10_000, body={"fake": {"delay_ms": 1000}})))

    threads = [threading.Thread(target=slow) for _ in range(5)]
    try:
        assert api.put("/v1/sessions/swing/budget", json={"session_usd": "0.45"}).is_success
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while api.get("/v1/sessions/swing/budget").json()["reserved"] != "0.40001":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert api.put("/v1/sessions/swing/budget", json={"session_usd": None}).is_success
        again = api.put("/v1/sessions/swing/budget", json={"session_usd": "0.45"}).json()
        # The five calls in flight still hold their worst cases: a sixth does not fit.
        assert again["reserved"] == "0.40001"
        with daemon.openai(session="swing") as client:
            assert status_of(lambda: call(client, max_tokens=10_000)) == 402
        for thread in threads:
            thread.join(10)
        deadline = time.monotonic() + 5
        while (budget := api.get("/v1/sessions/swing/budget").json())["reserved"] != "0":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        api.close()
        daemon.stop()
    assert statuses == [200] * 5
    # Each call counted once: the log's five costs, no more.
    with EventLog(tmp_path / "events.db", readonly=True) as log:
        costs = [Decimal(c) for (c,) in log.read_connection().execute(
            "SELECT cost FROM view_ledger WHERE session_id = 'swing'")]
    assert len(costs) == 5 and Decimal(budget["spent"]) == sum(costs)


def test_a_deep_chain_named_while_no_cap_applied_is_cut_where_it_would_have_been_live(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    unbudgeted = PRICED.format(extra="").replace('session_usd = "0.015"', "")
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=unbudgeted).start()
    try:
        with control(daemon) as raw:
            # deep-065 starts first, under deep-066; each next one under the last. The
            # ledger follows 64 ancestors: deep-002's parent would be the 65th, so it has
            # none, and deep-001 starts a new chain under it (ids sort the other way).
            for i in range(65, -1, -1):
                assert raw.post("/v1/chat/completions", json={
                    "model": "priced", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 100, **usage(10, 10)}, headers={
                    "X-Session-Id": f"deep-{i:03d}",
                    "X-Session-Parent": f"deep-{i + 1:03d}"}).status_code == 200
            raw.put("/v1/sessions/deep-066/budget", json={"session_usd": "5"})
            parents = {i: raw.get(f"/v1/sessions/deep-{i:03d}/budget").json()["parent"]
                       for i in (0, 2, 3)}
    finally:
        daemon.stop()
    assert parents == {0: "deep-001", 2: "", 3: "deep-004"}


def test_a_call_ending_as_the_first_cap_is_set_is_counted_once(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    unbudgeted = PRICED.format(extra="").replace('session_usd = "0.015"', "")
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=unbudgeted).start()
    try:
        with daemon.openai(session="edge") as client:
            reply = client.chat.completions.with_raw_response.create(
                model="priced", messages=[{"role": "user", "content": "hi"}],
                max_tokens=100, extra_body=usage(1000, 1000))
        call_id = reply.headers["x-sessionwarden-call-id"]
        with control(daemon) as api:
            assert api.put("/v1/sessions/edge/budget",
                           json={"session_usd": "1"}).json()["spent"] == "0.01"
            # The interleaving of a call whose completion was recorded before the cap's
            # fold of the log, and whose Settle reaches the ledger after it.
            daemon.runtime.ledger.tell(Settle(call_id, "edge", "fake", "0.01"))
            time.sleep(0.1)
            assert api.get("/v1/sessions/edge/budget").json()["spent"] == "0.01"
    finally:
        daemon.stop()
