"""The asyncio <-> pykka bridge (actors/bridge.py), with real threading actors.

The async tests run their coroutine with ``asyncio.run`` (no pytest-asyncio plugin).
"""

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pykka
import pytest
from sessionwarden.actors.bridge import (
    PENDING,
    ActorCrash,
    Call,
    GovernedActor,
    Ping,
    Reply,
    ask,
    ask_blocking,
    request,
    tell,
    wait,
)
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.actors.shells import CompressorActor

from tests.actors.actor_support import no_leaked_actors


@pytest.fixture(autouse=True)
def _no_leaked_actors() -> Iterator[None]:
    with no_leaked_actors():
        yield


class Boom(Exception):
    pass


class WorkerActor(GovernedActor):
    """A test actor: each message is a tuple naming what ``handle`` should do."""

    def __init__(self) -> None:
        super().__init__()
        self.helpers: list[threading.Thread] = []

    def handle(self, message: object, reply: Reply) -> object:
        assert isinstance(message, tuple)
        kind, *args = message
        if kind == "echo":
            return args[0]
        if kind == "sleep":
            time.sleep(args[0])
            return "slept"
        if kind == "boom":
            raise Boom("boom in handle")
        if kind == "crash":
            raise ActorCrash("state is corrupt")
        if kind in ("later", "later-error"):
            delay = args[0]

            def answer() -> None:
                time.sleep(delay)
                if kind == "later":
                    reply(("late", threading.current_thread().name), None)
                else:
                    reply(None, Boom("late failure"))

            helper = threading.Thread(target=answer, name="test-late-reply")
            self.helpers.append(helper)
            helper.start()
            return PENDING
        raise TypeError(f"unknown {kind!r}")


@pytest.fixture
def worker() -> "pykka.ActorRef[Any]":
    return WorkerActor.start()


# ------------------------------------------------------------------- ask from asyncio


def test_ask_returns_the_result_without_blocking_the_loop(worker: Any) -> None:
    async def main() -> tuple[Any, list[float], float, float]:
        ticks: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.001)

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.005)  # let the heartbeat settle
        start = time.perf_counter()
        result = await ask(worker, ("sleep", 0.05))
        end = time.perf_counter()
        stop.set()
        await beat
        return result, ticks, start, end

    result, ticks, start, end = asyncio.run(main())
    assert result == "slept"
    assert end - start >= 0.05
    during = [t for t in ticks if start <= t <= end]
    # ~1 ms ticks for 50 ms: a blocked loop would show at most one or two.
    assert len(during) >= 5, len(during)
    gaps = [b - a for a, b in itertools.pairwise(ticks) if start <= a <= end]
    assert max(gaps) < 0.04, max(gaps)


def test_many_concurrent_asks_each_get_their_own_result(worker: Any) -> None:
    async def main() -> list[Any]:
        return await asyncio.gather(*(ask(worker, ("echo", i)) for i in range(300)))

    assert asyncio.run(main()) == list(range(300))


def test_exception_in_handle_reaches_the_caller_and_the_actor_keeps_serving(
    worker: Any,
) -> None:
    async def main() -> Any:
        with pytest.raises(Boom, match="boom in handle"):
            await ask(worker, ("boom",))
        with pytest.raises(TypeError, match="unknown"):
            await ask(worker, ("nonsense",))
        return await ask(worker, ("echo", "still here"))

    assert asyncio.run(main()) == "still here"
    assert worker.is_alive()


def test_pending_reply_from_another_thread(worker: Any) -> None:
    async def main() -> tuple[Any, list[str]]:
        order: list[str] = []

        async def late() -> Any:
            result = await ask(worker, ("later", 0.1))
            order.append("late")
            return result

        async def quick() -> None:
            await asyncio.sleep(0.01)
            assert await ask(worker, ("echo", 1)) == 1
            order.append("quick")

        result, _ = await asyncio.gather(late(), quick())
        return result, order

    (value, thread_name), order = asyncio.run(main())
    assert value == "late"
    assert thread_name == "test-late-reply"
    # The actor served the quick call while the first one was still pending.
    assert order == ["quick", "late"]


def test_pending_reply_can_carry_an_error(worker: Any) -> None:
    async def main() -> None:
        with pytest.raises(Boom, match="late failure"):
            await ask(worker, ("later-error", 0.01))

    asyncio.run(main())
    assert worker.is_alive()


def test_actor_crash_is_reported_as_unavailable_and_stops_the_actor(worker: Any) -> None:
    async def main() -> None:
        with pytest.raises(ActorUnavailable, match="WorkerActor failed: state is corrupt"):
            await ask(worker, ("crash",))

    asyncio.run(main())
    deadline = time.monotonic() + 2
    while worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not worker.is_alive()


def test_ask_to_a_dead_actor_raises_actor_unavailable(worker: Any) -> None:
    worker.stop()

    async def main() -> None:
        with pytest.raises(ActorUnavailable, match="not running"):
            await ask(worker, ("echo", 1))

    asyncio.run(main())


def test_ask_timeout_raises_actor_unavailable_and_a_late_reply_is_harmless(
    worker: Any,
) -> None:
    async def main() -> tuple[float, Any, list[dict[str, Any]]]:
        loop_errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
        start = time.perf_counter()
        with pytest.raises(ActorUnavailable, match=r"no reply within 0\.05 s"):
            await ask(worker, ("sleep", 0.5), timeout=0.05)
        waited = time.perf_counter() - start
        # Queued behind the sleep: by the time it answers, the timed-out call's late
        # reply has been handed to the loop too (and must be dropped quietly).
        after = await ask(worker, ("echo", "next"))
        await asyncio.sleep(0.01)
        return waited, after, loop_errors

    waited, after, loop_errors = asyncio.run(main())
    assert 0.05 <= waited < 0.45
    assert after == "next"
    assert loop_errors == []


def test_reply_after_the_loop_closed_is_ignored(worker: Any) -> None:
    async def main() -> None:
        with pytest.raises(ActorUnavailable):
            await ask(worker, ("later", 0.1), timeout=0.01)

    asyncio.run(main())  # the loop is closed when this returns
    actor = worker.proxy()
    helpers = actor.helpers.get()
    for helper in helpers:
        helper.join(2)
    assert worker.is_alive()
    assert ask_blocking(worker, ("echo", 5)) == 5


def test_ping_through_the_bridge_is_answered_by_a_product_actor() -> None:
    ref = CompressorActor.start()
    assert ref.ask(Ping(), timeout=2) == "pong"  # the supervisor's way works
    assert ask_blocking(ref, Ping(), timeout=2) == "pong"


# ------------------------------------------------------------------- ask_blocking


def test_ask_blocking_from_a_plain_thread(worker: Any) -> None:
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["echo"] = ask_blocking(worker, ("echo", 42))
        outcome["late"] = ask_blocking(worker, ("later", 0.01))[0]
        try:
            ask_blocking(worker, ("boom",))
        except Boom as exc:
            outcome["error"] = exc
        try:
            ask_blocking(worker, ("sleep", 0.2), timeout=0.02)
        except ActorUnavailable as exc:
            outcome["timeout"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert outcome["echo"] == 42
    assert outcome["late"] == "late"
    assert isinstance(outcome["error"], Boom)
    assert "no reply within 0.02 s" in str(outcome["timeout"])


def test_ask_blocking_to_a_dead_actor_raises_actor_unavailable(worker: Any) -> None:
    worker.stop()
    with pytest.raises(ActorUnavailable, match="not running"):
        ask_blocking(worker, ("echo", 1))


def test_plain_pykka_messages_still_reach_handle(worker: Any) -> None:
    # A bare tell/ask (no Call) goes to handle(); its result is pykka's answer.
    assert worker.ask(("echo", "plain"), timeout=2) == "plain"
    assert worker.ask(Ping(), timeout=2) == "pong"
    reply_box: list[Any] = []
    worker.tell(Call(("echo", "called"), lambda r, e: reply_box.append((r, e))))
    assert worker.ask(("echo", "sync"), timeout=2) == "sync"
    assert reply_box == [("called", None)]


# ------------------------------------------------------------------- tell, request


def test_tell_to_a_dead_actor_raises_actor_unavailable_never_pykka_raw(worker: Any) -> None:
    worker.stop()
    with pytest.raises(ActorUnavailable, match="not running"):
        tell(worker, ("echo", 1))

    async def main() -> None:
        with pytest.raises(ActorUnavailable, match="not running"):
            request(worker, ("echo", 1))
        with pytest.raises(ActorUnavailable, match="not running"):
            await ask(worker, ("echo", 1))

    asyncio.run(main())


def test_several_requests_in_flight_are_awaited_one_by_one(worker: Any) -> None:
    async def main() -> list[Any]:
        slow = request(worker, ("later", 0.05))
        fast = request(worker, ("echo", 7))
        return [await wait(fast), (await wait(slow))[0]]

    assert asyncio.run(main()) == [7, "late"]
