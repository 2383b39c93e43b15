"""Appending from asyncio: EventLog.append_async and append_batch_async.

Every await on the store is wrapped in ``asyncio.wait_for`` so a lost wake-up fails the
test instead of hanging it.
"""

import asyncio
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from sessionwarden.store import (
    NO_STREAM,
    AppendResult,
    EventLog,
    NewEvent,
    StreamAppend,
)
from sessionwarden.store.errors import (
    ConflictError,
    StoreClosed,
    StoreProgrammingError,
    WrongExpectedVersion,
)

from tests.store.store_support import ev, write_lock

WAIT_S = 30.0







def check_results(log: EventLog, results: list[AppendResult]) -> None:
    """The results cover seq 1..head exactly once and agree with what is stored."""
    events = {e.seq: e for e in log.read_all()}
    head = log.head()[0]
    assert sorted(events) == list(range(1, head + 1))
    covered = [seq for r in results if not r.duplicate for seq in r.seqs]
    assert sorted(covered) == list(range(1, head + 1)), "a seq is missing or claimed twice"
    for r in results:
        stored = [events[s] for s in r.seqs]
        assert {e.stream for e in stored} <= {r.stream}
        if stored:
            assert stored[-1].version == r.version
            versions = [e.version for e in stored]
            assert versions == list(range(r.version - len(stored) + 1, r.version + 1))


def check_versions_per_stream(log: EventLog) -> dict[str, int]:
    """Every stream's versions are 1..n in seq order; returns each stream's head."""
    per_stream: dict[str, list[int]] = defaultdict(list)
    for e in log.read_all():
        per_stream[e.stream].append(e.version)
    for stream, versions in per_stream.items():
        assert versions == list(range(1, len(versions) + 1)), stream
        assert log.stream_version(stream) == len(versions)
    return {stream: len(versions) for stream, versions in per_stream.items()}


# -- correctness under concurrency -----------------------------------------------------------


def test_fifty_tasks_on_distinct_and_shared_streams(log: EventLog) -> None:
    tasks_n, shared_n = 50, 5

    async def worker(i: int) -> list[AppendResult]:
        own = await log.append_async(f"own-{i}", [ev(f"own-{i}")])
        shared = await log.append_async(f"shared-{i % shared_n}", [ev(f"{i}a"), ev(f"{i}b")])
        both = await log.append_batch_async(
            [
                StreamAppend(f"own-{i}", (ev(f"own-{i}-2"),), expected_version=1),
                StreamAppend("everyone", (ev(f"e-{i}"),)),
            ]
        )
        return [own, shared, *both]

    async def main() -> tuple[list[list[AppendResult]], int, float]:
        ticks, worst_gap = 0, 0.0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks, worst_gap
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.001)
                now = time.monotonic()
                worst_gap = max(worst_gap, now - last)
                last = now
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        results = await asyncio.wait_for(
            asyncio.gather(*(worker(i) for i in range(tasks_n))), WAIT_S
        )
        stop.set()
        await asyncio.wait_for(tick_task, WAIT_S)
        return list(results), ticks, worst_gap

    per_task, ticks, worst_gap = asyncio.run(main())
    assert ticks > 0
    assert worst_gap < 2.0, f"the loop stalled for {worst_gap:.3f} s"

    flat = [r for results in per_task for r in results]
    assert log.head()[0] == tasks_n * 5  # own: 1 + 1, shared: 2, everyone: 1
    check_results(log, flat)
    for i, (own, shared, own2, everyone) in enumerate(per_task):
        assert (own.stream, own.version) == (f"own-{i}", 1)
        assert (own2.stream, own2.version) == (f"own-{i}", 2)
        assert shared.stream == f"shared-{i % shared_n}"
        assert shared.last_seq - shared.first_seq == 1
        assert everyone.stream == "everyone"
    heads = check_versions_per_stream(log)
    assert heads["everyone"] == tasks_n
    assert sorted(r[3].version for r in per_task) == list(range(1, tasks_n + 1))
    for k in range(shared_n):
        assert heads[f"shared-{k}"] == 2 * (tasks_n // shared_n)
        mine = sorted(r[1].version for i, r in enumerate(per_task) if i % shared_n == k)
        assert mine == list(range(2, 2 * (tasks_n // shared_n) + 1, 2))


def test_the_loop_keeps_running_while_appends_wait_for_the_write_lock(
    log: EventLog, db: Path
) -> None:
    log.append("warm-up", [ev()])

    async def main() -> tuple[int, list[AppendResult]]:
        with write_lock(db) as blocker:
            tasks = [
                asyncio.create_task(log.append_async(f"s-{i % 3}", [ev(str(i))]))
                for i in range(20)
            ]
            ticks = 0
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:  # the loop must stay free to do this
                await asyncio.sleep(0.005)
                ticks += 1
            assert not any(t.done() for t in tasks), "an append finished under the lock"
            blocker.execute("COMMIT")
        results = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
        return ticks, list(results)

    ticks, results = asyncio.run(main())
    assert ticks >= 10
    assert log.head()[0] == 21
    check_results(log, [AppendResult("warm-up", 1, 1, 1), *results])
    check_versions_per_stream(log)


# -- errors reach the awaiting task ----------------------------------------------------------


def test_wrong_expected_version_is_raised_in_the_awaiting_task(log: EventLog) -> None:
    async def main() -> None:
        await asyncio.wait_for(log.append_async("s", [ev()]), WAIT_S)
        with pytest.raises(WrongExpectedVersion) as info:
            await asyncio.wait_for(
                log.append_async("s", [ev()], expected_version=NO_STREAM), WAIT_S
            )
        assert info.value.stream == "s"
        assert info.value.actual == 1
        with pytest.raises(WrongExpectedVersion):
            await asyncio.wait_for(
                log.append_batch_async(
                    [StreamAppend("new", (ev(),)), StreamAppend("s", (ev(),), expected_version=5)]
                ),
                WAIT_S,
            )

    asyncio.run(main())
    assert [e.stream for e in log.read_all()] == ["s"]  # the failed batch wrote nothing


def test_racing_tasks_exactly_one_wins_the_expected_version(log: EventLog) -> None:
    async def main() -> list[object]:
        return await asyncio.wait_for(
            asyncio.gather(
                *(log.append_async("race", [ev(str(i))], expected_version=0) for i in range(10)),
                *(log.append_async(f"free-{i}", [ev(str(i))]) for i in range(10)),
                return_exceptions=True,
            ),
            WAIT_S,
        )

    outcomes = asyncio.run(main())
    race, free = outcomes[:10], outcomes[10:]
    winners = [o for o in race if isinstance(o, AppendResult)]
    losers = [o for o in race if not isinstance(o, AppendResult)]
    assert len(winners) == 1 and winners[0].version == 1
    assert len(losers) == 9
    assert all(isinstance(o, WrongExpectedVersion) for o in losers)
    assert all(isinstance(o, ConflictError) for o in losers)
    assert all(isinstance(o, AppendResult) and o.version == 1 for o in free)
    assert log.stream_version("race") == 1
    check_results(log, [winners[0], *free])  # type: ignore[list-item]


def test_idempotent_retry_from_asyncio_returns_the_original(log: EventLog) -> None:
    async def main() -> tuple[AppendResult, AppendResult]:
        first = await asyncio.wait_for(log.append_async("s", [ev(key="k1")]), WAIT_S)
        again = await asyncio.wait_for(log.append_async("s", [ev(key="k1")]), WAIT_S)
        return first, again

    first, again = asyncio.run(main())
    assert not first.duplicate and again.duplicate
    assert (again.first_seq, again.last_seq, again.version) == (1, 1, 1)
    assert log.head()[0] == 1


def test_invalid_requests_fail_before_reaching_the_writer(log: EventLog) -> None:
    async def main() -> None:
        with pytest.raises(StoreProgrammingError):
            await asyncio.wait_for(log.append_batch_async([]), WAIT_S)
        with pytest.raises(StoreProgrammingError):
            await asyncio.wait_for(log.append_async("", [ev()]), WAIT_S)
        with pytest.raises(StoreProgrammingError):
            await asyncio.wait_for(
                log.append_async("s", [NewEvent("t", "text")]),  # type: ignore[arg-type]
                WAIT_S,
            )

    asyncio.run(main())
    assert log.head()[0] == 0


# -- lifecycle -------------------------------------------------------------------------------


def test_append_after_close_raises_store_closed_promptly(db: Path) -> None:
    log = EventLog(db)

    async def main() -> None:
        await asyncio.wait_for(log.append_async("s", [ev()]), WAIT_S)
        log.close()
        started = time.monotonic()
        with pytest.raises(StoreClosed):
            await asyncio.wait_for(log.append_async("s", [ev()]), 5)
        with pytest.raises(StoreClosed):
            await asyncio.wait_for(log.append_batch_async([StreamAppend("t", (ev(),))]), 5)
        assert time.monotonic() - started < 5

    try:
        asyncio.run(main())
    finally:
        log.close()
    with EventLog(db, readonly=True) as reader:
        assert reader.head()[0] == 1


def test_close_while_appends_are_in_flight_settles_every_task(db: Path) -> None:
    log = EventLog(db)

    async def main() -> list[object]:
        tasks = [
            asyncio.create_task(log.append_async(f"s-{i % 4}", [ev(str(i))])) for i in range(40)
        ]
        await asyncio.sleep(0)  # let some of them submit before close() begins
        closing = asyncio.create_task(asyncio.to_thread(log.close))
        more = [
            asyncio.create_task(log.append_async(f"s-{i % 4}", [ev(str(i))]))
            for i in range(40, 60)
        ]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*tasks, *more, return_exceptions=True), 10
        )
        await asyncio.wait_for(closing, WAIT_S)
        return outcomes

    try:
        outcomes = asyncio.run(main())
    finally:
        log.close()
    committed = [o for o in outcomes if isinstance(o, AppendResult)]
    refused = [o for o in outcomes if not isinstance(o, AppendResult)]
    assert all(isinstance(o, StoreClosed) for o in refused), refused
    with EventLog(db, readonly=True) as reader:
        assert reader.head()[0] == len(committed)
        check_results(reader, committed)
        check_versions_per_stream(reader)


def test_two_event_loops_in_turn_on_one_log(log: EventLog) -> None:
    async def batch(tag: str) -> list[AppendResult]:
        return list(
            await asyncio.wait_for(
                asyncio.gather(*(log.append_async(f"{tag}-{i % 3}", [ev()]) for i in range(10))),
                WAIT_S,
            )
        )

    first = asyncio.run(batch("one"))
    second = asyncio.run(batch("two"))
    # ... and a third loop, running while a thread appends synchronously
    synced: list[AppendResult] = []
    writer = threading.Thread(target=lambda: synced.append(log.append("sync", [ev()])))
    writer.start()
    third = asyncio.run(batch("three"))
    writer.join(WAIT_S)
    assert not writer.is_alive()
    assert log.head()[0] == 31
    check_results(log, [*first, *second, *third, *synced])
    check_versions_per_stream(log)


def test_an_append_abandoned_by_a_closed_loop_does_not_break_the_next_loop(
    log: EventLog, db: Path
) -> None:
    """The first loop gives up (and closes) while its append is still waiting to commit."""

    async def abandon() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(log.append_async("abandoned", [ev()]), 0.1)

    with write_lock(db):
        asyncio.run(abandon())  # the loop is closed when this returns

    async def carry_on() -> AppendResult:
        return await asyncio.wait_for(log.append_async("next", [ev()]), WAIT_S)

    result = asyncio.run(carry_on())
    # Cancelling the awaiting task did not cancel the append: it committed first.
    assert [e.stream for e in log.read_all()] == ["abandoned", "next"]
    assert result.first_seq == 2


def test_cancelled_task_does_not_cancel_its_append(log: EventLog, db: Path) -> None:
    async def main() -> None:
        with write_lock(db) as blocker:
            task = asyncio.create_task(log.append_async("s", [ev()]))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            blocker.execute("COMMIT")
        # a later append on the same loop still works, and lands after the cancelled one
        later = await asyncio.wait_for(log.append_async("s", [ev()]), WAIT_S)
        assert later.version == 2

    asyncio.run(main())
    assert log.stream_version("s") == 2


def test_read_only_log_refuses_async_appends(log: EventLog, db: Path) -> None:
    log.append("s", [ev()])

    async def main(reader: EventLog) -> None:
        with pytest.raises(StoreProgrammingError, match="read-only"):
            await asyncio.wait_for(reader.append_async("s", [ev()]), 5)
        with pytest.raises(StoreProgrammingError, match="read-only"):
            await asyncio.wait_for(reader.append_batch_async([StreamAppend("s", (ev(),))]), 5)

    with EventLog(db, readonly=True) as reader:
        asyncio.run(main(reader))
    assert log.head()[0] == 1


def test_event_loops_are_not_kept_alive_and_one_hook_serves_them_all(log: EventLog) -> None:
    import gc
    import weakref

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def once() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await log.append_async("loops", [ev()])

    for _ in range(3):
        asyncio.run(once())
    asyncio.run(asyncio.sleep(0))  # asyncio itself may keep the most recent loop around
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
    assert len(log._writer._group_hooks) == 1  # type: ignore[union-attr]


def test_appends_refused_after_close_leave_nothing_queued(db: Path) -> None:
    from sessionwarden.store import aio

    log = EventLog(db)

    async def run() -> None:
        await log.append_async("s", [ev()])
        log.close()
        for _ in range(5):
            with pytest.raises(StoreClosed):
                await asyncio.wait_for(log.append_async("s", [ev()]), 5)
        deliveries = aio._registry[log._writer]  # type: ignore[index]
        assert all(not d._pending for d in deliveries.by_loop.values())

    asyncio.run(run())


def test_append_async_on_uvloop_the_daemons_loop(log: EventLog) -> None:
    import uvloop  # a dependency of uvicorn[standard], which the daemon runs on

    async def run() -> list[AppendResult]:
        return list(await asyncio.gather(
            *(log.append_async(f"uv-{i % 3}", [ev()]) for i in range(30))
        ))

    results = uvloop.run(run())
    assert sorted(r.first_seq for r in results) == list(range(1, 31))
    assert {log.stream_version(f"uv-{i}") for i in range(3)} == {10}
