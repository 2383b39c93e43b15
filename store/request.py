"""An append waiting for the writer: what it asks, and how its outcome reaches the caller.

A blocking appender waits on a pre-acquired lock the writer releases; an asyncio appender
(``sessionwarden.store.aio``) or an actor passes a callback, which the writer runs in its
own thread once the group is committed.
"""

import threading
from collections.abc import Callable, Sequence

from loguru import logger
from sessionwarden.store.errors import StoreError
from sessionwarden.store.records import AppendResult, StreamAppend, Tracking

__all__ = ["AppendRequest"]


class AppendRequest:
    """One atomic append waiting in the writer's queue, and its outcome."""

    __slots__ = ("_callback", "_done", "appends", "error", "finished", "results", "tracking")

    def __init__(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None,
        callback: Callable[["AppendRequest"], None] | None,
    ) -> None:
        """Create a pending request; ``callback`` runs in the writer thread when done."""
        self.appends = appends
        self.tracking = tracking
        self.results: list[AppendResult] | None = None
        self.error: StoreError | None = None
        self.finished = False
        self._callback = callback
        # A pre-acquired lock is the cheapest one-shot signal CPython offers.
        self._done = threading.Lock()
        self._done.acquire()

    def finish(self, results: list[AppendResult] | None, error: StoreError | None) -> None:
        """Record the outcome and wake the waiter (called by the writer thread)."""
        self.results, self.error = results, error
        self.finished = True
        self._done.release()
        callback, self._callback = self._callback, None  # what it holds need not outlive it
        if callback is not None:
            try:
                callback(self)
            except Exception as exc:  # a callback's failure must never stop the writer
                logger.warning("append callback failed: {}: {}", type(exc).__name__, exc)

    def wait(self, timeout: float | None = None) -> list[AppendResult]:
        """Block until the request is committed; raise its error if it failed."""
        if not self._done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the append was not acknowledged in time")
        self._done.release()
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results
