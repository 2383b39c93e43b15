"""The writer's inbox: appenders drop requests in, the writer takes them out in groups.

A plain queue wakes its consumer on every put. With many appenders that is one futex
wake-up, one context switch and one GIL hand-off to the writer per append, and those
hand-offs, not SQLite, were what bounded group commit (they cost more than the fsync
they were meant to share). The writer instead says how many requests it is waiting
for, and only the put that reaches that number wakes it; every other put is an append
to a list under an uncontended lock, which never enters the kernel.
"""

import threading
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """A many-producer, one-consumer queue that wakes its consumer once per group."""

    def __init__(self) -> None:
        """Create an empty inbox."""
        self._mutex = threading.Lock()
        self._items: list[T] = []
        # Released by the put that satisfies the consumer, acquired by the consumer to
        # wait: a pre-acquired lock is the cheapest one-shot signal in CPython.
        self._signal = threading.Lock()
        self._signal.acquire()
        self._want = 0  # how many queued items end the consumer's wait; 0: not waiting
        self._closed = False

    def put(self, item: T, *, urgent: bool = False) -> bool:
        """Queue ``item``; wake the consumer if this makes its group (or ``urgent``).

        Returns False, queueing nothing, once the inbox is closed.
        """
        with self._mutex:
            if self._closed:
                return False
            self._items.append(item)
            if self._want and (urgent or len(self._items) >= self._want):
                self._want = 0
                self._signal.release()
        return True

    def close(self) -> list[T]:
        """Refuse every later put; return what is still queued.

        Closing under the same mutex as ``put`` is what makes "refused or taken" exact: a
        producer racing with the close either got its item in before (and it is
        returned here) or is told it was refused.
        """
        with self._mutex:
            self._closed = True
            items, self._items = self._items, []
        return items

    def take(self, want: int, limit: int, timeout: float | None = None) -> list[T]:
        """Wait until ``want`` items are queued or ``timeout`` passes; take up to ``limit``.

        Returns at once with whatever is queued when ``want`` is already met, and may
        return fewer than ``want`` (even none) when the timeout passes first.
        """
        with self._mutex:
            waiting = len(self._items) < want
            if waiting:
                self._want = want
        if waiting:
            woken = self._signal.acquire(timeout=-1 if timeout is None else max(timeout, 0))
            if not woken:
                with self._mutex:
                    if self._want:
                        self._want = 0
                    else:
                        # A put satisfied us between the timeout and taking the mutex:
                        # its release is pending, so this acquire returns at once and
                        # leaves the signal armed for the next wait.
                        self._signal.acquire()
        with self._mutex:
            if len(self._items) <= limit:
                items, self._items = self._items, []
            else:
                items, self._items = self._items[:limit], self._items[limit:]
        return items

    def __len__(self) -> int:
        """How many items are queued now."""
        return len(self._items)
