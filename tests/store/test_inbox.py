"""The writer's inbox: a many-producer, one-consumer queue woken once per group.

Every test that starts a thread joins it (with a timeout, and asserts it ended), so a
lost wake-up shows up as a failure, not as a hung test run.
"""

import random
import threading
import time
from collections.abc import Callable

import pytest
from sessionwarden.store.inbox import Inbox

JOIN_S = 10.0


def start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def join(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(JOIN_S)
        assert not thread.is_alive(), "a thread did not finish (lost wake-up?)"


def timed_take(
    inbox: Inbox[int], want: int, limit: int, timeout: float | None
) -> tuple[list[int], float]:
    started = time.monotonic()
    items = inbox.take(want, limit, timeout)
    return items, time.monotonic() - started


def assert_waits_out(inbox: Inbox[int], timeout: float = 0.05) -> None:
    """An empty inbox makes take() wait the whole timeout: the signal is not left armed."""
    items, elapsed = timed_take(inbox, 1, 10, timeout)
    assert items == []
    assert elapsed >= timeout * 0.5, f"take() returned after {elapsed:.4f} s, signal was armed"


# -- single-threaded behaviour ---------------------------------------------------------------


def test_new_inbox_is_empty() -> None:
    inbox: Inbox[int] = Inbox()
    assert len(inbox) == 0
    assert inbox.take(0, 10) == []


def test_take_returns_at_once_when_want_is_already_met() -> None:
    inbox: Inbox[int] = Inbox()
    for i in range(3):
        inbox.put(i)
    assert len(inbox) == 3
    items, elapsed = timed_take(inbox, 3, 10, 10.0)
    assert items == [0, 1, 2]
    assert elapsed < 5.0
    assert len(inbox) == 0


def test_take_with_more_than_wanted_queued_returns_them_all_up_to_limit() -> None:
    inbox: Inbox[int] = Inbox()
    for i in range(5):
        inbox.put(i)
    items, elapsed = timed_take(inbox, 2, 10, None)  # no timeout: must not block
    assert items == [0, 1, 2, 3, 4]
    assert elapsed < 5.0


def test_take_returns_fewer_after_the_timeout() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put(1)
    inbox.put(2)
    items, elapsed = timed_take(inbox, 5, 10, 0.05)
    assert items == [1, 2]
    assert elapsed >= 0.025
    assert len(inbox) == 0


def test_take_returns_none_after_the_timeout_on_an_empty_inbox() -> None:
    inbox: Inbox[int] = Inbox()
    items, elapsed = timed_take(inbox, 1, 10, 0.05)
    assert items == []
    assert elapsed >= 0.025


@pytest.mark.parametrize("timeout", [0, 0.0, -1.0])
def test_zero_or_negative_timeout_does_not_block(timeout: float) -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put(7)
    items, elapsed = timed_take(inbox, 5, 10, timeout)
    assert items == [7]
    assert elapsed < 5.0
    # and the inbox still works afterwards
    inbox.put(8)
    assert inbox.take(1, 10, 1.0) == [8]
    assert_waits_out(inbox)


def test_limit_leaves_the_rest_queued_in_fifo_order() -> None:
    inbox: Inbox[int] = Inbox()
    for i in range(10):
        inbox.put(i)
    assert inbox.take(1, 3) == [0, 1, 2]
    assert len(inbox) == 7
    assert inbox.take(1, 3) == [3, 4, 5]
    inbox.put(10)
    assert inbox.take(0, 100) == [6, 7, 8, 9, 10]
    assert len(inbox) == 0


def test_limit_applies_to_a_woken_take() -> None:
    inbox: Inbox[int] = Inbox()
    result: list[int] = []

    def consume() -> None:
        result.extend(inbox.take(4, 2, 10.0))

    consumer = start(consume)
    time.sleep(0.05)
    for i in range(4):
        inbox.put(i)
    join(consumer)
    assert result == [0, 1]
    assert inbox.take(0, 10) == [2, 3]


def test_urgent_put_without_a_waiting_consumer_does_not_arm_the_signal() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put(1, urgent=True)
    assert inbox.take(1, 10) == [1]
    assert_waits_out(inbox)


# -- waking the consumer ---------------------------------------------------------------------


def test_put_reaching_want_wakes_a_waiting_consumer_early() -> None:
    inbox: Inbox[int] = Inbox()
    outcome: list[tuple[list[int], float]] = []

    def consume() -> None:
        outcome.append(timed_take(inbox, 2, 10, 10.0))

    consumer = start(consume)

    def produce() -> None:
        time.sleep(0.05)
        inbox.put(1)
        inbox.put(2)

    producer = start(produce)
    join(producer, consumer)
    (items, elapsed), = outcome
    assert items == [1, 2]
    assert elapsed < 5.0  # far below the 10 s timeout: the second put woke it


def test_put_below_want_does_not_wake_the_consumer() -> None:
    inbox: Inbox[int] = Inbox()
    done = threading.Event()
    outcome: list[list[int]] = []

    def consume() -> None:
        outcome.append(inbox.take(3, 10, 10.0))
        done.set()

    consumer = start(consume)
    time.sleep(0.02)
    inbox.put(1)
    inbox.put(2)
    assert not done.wait(0.2), "a put below want woke the consumer"
    inbox.put(3)
    assert done.wait(5.0)
    join(consumer)
    assert outcome == [[1, 2, 3]]


def test_urgent_put_wakes_the_consumer_before_want_is_reached() -> None:
    inbox: Inbox[int] = Inbox()
    done = threading.Event()
    outcome: list[tuple[list[int], float]] = []

    def consume() -> None:
        outcome.append(timed_take(inbox, 100, 1000, 10.0))
        done.set()

    consumer = start(consume)
    time.sleep(0.02)
    inbox.put(1)
    assert not done.wait(0.1)
    inbox.put(2, urgent=True)
    assert done.wait(5.0)
    join(consumer)
    (items, elapsed), = outcome
    assert items == [1, 2]
    assert elapsed < 5.0


def test_take_without_timeout_waits_for_the_put() -> None:
    inbox: Inbox[int] = Inbox()
    outcome: list[list[int]] = []
    consumer = start(lambda: outcome.append(inbox.take(1, 10)))
    time.sleep(0.05)
    assert outcome == []
    inbox.put(42)
    join(consumer)
    assert outcome == [[42]]


def test_a_timed_out_take_leaves_the_inbox_usable() -> None:
    inbox: Inbox[int] = Inbox()
    assert inbox.take(1, 10, 0.02) == []  # timed out, nobody put anything
    # a later put wakes a later wait ...
    outcome: list[tuple[list[int], float]] = []
    consumer = start(lambda: outcome.append(timed_take(inbox, 1, 10, 10.0)))
    time.sleep(0.05)
    inbox.put(5)
    join(consumer)
    (items, elapsed), = outcome
    assert items == [5]
    assert elapsed < 5.0
    # ... and an empty inbox still makes the next take wait
    assert_waits_out(inbox)


def test_put_racing_with_the_timeout_loses_nothing_and_breaks_nothing() -> None:
    """A put that satisfies the consumer just as its wait times out.

    Either the consumer sees the item now, or the next take does; never both, never
    neither, and afterwards the signal must be neither stuck released (a take on an empty
    inbox would return at once) nor stuck acquired (a put would not wake the consumer).
    """
    inbox: Inbox[int] = Inbox()
    rng = random.Random(1234)
    received: list[int] = []
    late = 0
    for i in range(200):
        barrier = threading.Barrier(2)
        delay = rng.uniform(0, 0.0006)

        def produce(i: int = i, delay: float = delay, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            if i % 2:
                # Spinning holds the GIL, so the consumer's wait times out and the put
                # lands before it can take the mutex: the "release is pending" path.
                end = time.perf_counter() + delay
                while time.perf_counter() < end:
                    pass
            else:
                # Sleeping lets the consumer run: the put lands before, during or after
                # the wait (woken, or timed out and the item left for the next take).
                time.sleep(delay * 2)
            inbox.put(i)

        producer = start(produce)
        barrier.wait()
        got = inbox.take(1, 10, rng.uniform(0, 0.0004))
        join(producer)
        if not got:
            late += 1
            got, elapsed = timed_take(inbox, 1, 10, 5.0)
            assert elapsed < 4.0
        assert got == [i]
        received.extend(got)
        assert len(inbox) == 0
        if i % 20 == 0:
            assert_waits_out(inbox, 0.01)
    assert received == list(range(200))
    assert late < 200  # some puts did arrive in time
    assert_waits_out(inbox)
    # the signal still wakes a waiting consumer
    outcome: list[list[int]] = []
    consumer = start(lambda: outcome.append(inbox.take(1, 10, 10.0)))
    time.sleep(0.02)
    inbox.put(-1)
    join(consumer)
    assert outcome == [[-1]]


def test_streaming_producer_against_tiny_timeouts() -> None:
    """One producer puts steadily while the consumer takes with sub-millisecond waits."""
    inbox: Inbox[int] = Inbox()
    total = 3000

    def produce() -> None:
        for i in range(total):
            inbox.put(i, urgent=i % 97 == 0)
            if i % 13 == 0:
                time.sleep(0)

    producer = start(produce)
    received: list[int] = []
    deadline = time.monotonic() + 30
    rng = random.Random(99)
    while len(received) < total:
        assert time.monotonic() < deadline, f"only {len(received)} of {total} items arrived"
        received.extend(inbox.take(rng.randint(1, 8), rng.randint(1, 50), 0.0002))
    join(producer)
    assert received == list(range(total))
    assert len(inbox) == 0
    assert_waits_out(inbox)


def test_many_producers_one_consumer_every_item_exactly_once() -> None:
    inbox: Inbox[tuple[int, int]] = Inbox()
    producers_n, per_producer = 8, 1000
    total = producers_n * per_producer
    go = threading.Barrier(producers_n + 1)

    def produce(p: int) -> None:
        go.wait()
        for i in range(per_producer):
            inbox.put((p, i))

    producers = [start(lambda p=p: produce(p)) for p in range(producers_n)]
    received: list[tuple[int, int]] = []
    go.wait()
    deadline = time.monotonic() + 30
    while len(received) < total:
        assert time.monotonic() < deadline, f"only {len(received)} of {total} items arrived"
        received.extend(inbox.take(64, 100, 0.001))
    join(*producers)
    received.extend(inbox.take(0, total))  # nothing may be left over either
    assert len(received) == total
    assert set(received) == {(p, i) for p in range(producers_n) for i in range(per_producer)}
    for p in range(producers_n):  # each producer's items arrive in the order it put them
        assert [i for q, i in received if q == p] == list(range(per_producer))
    assert len(inbox) == 0


def test_close_returns_what_is_queued_and_refuses_later_puts() -> None:
    inbox: Inbox[int] = Inbox()
    assert inbox.put(1) and inbox.put(2)
    assert inbox.close() == [1, 2]
    assert inbox.put(3) is False
    assert inbox.take(0, 10) == []
