"""An append waiting for the writer: what it asks, and how its outcome reaches the caller.

A blocking appender waits on a pre-acquired lock the writer releases; an asyncio appender
(``sessionwarden.store.aio``) or an actor passes a callback, which the writer runs in its
own thread once the group is committed.

When many threads wait on one group, the writer does not wake them all: each wake-up is a
futex call made while the writer holds the GIL, and the threads it wakes only queue up
for that same GIL (64 waiters: 0.3 ms of acknowledgements, then a convoy). Instead it wakes
the first, and each waiter, once it runs, wakes the next: a :class:`Relay`. Only requests
whose submitter promised to wait (``EventLog.append``) take part; a waiter that gives up
(a timeout, an exception raised in its thread) drops out under the relay's lock, so the
wake-up is never handed to a thread that is no longer there to pass it on.
"""

import itertools
import threading
from collections.abc import Callable, Sequence

from loguru import logger
from sessionwarden.store.contents import ContentRow
from sessionwarden.store.errors import StoreError
from sessionwarden.store.records import AppendResult, StreamAppend, Tracking

__all__ = ["AppendRequest", "Relay"]


class Relay:
    """Wakes the waiters of one writer's groups one after another."""

    def __init__(self) -> None:
        """Create a relay; its lock orders hand-overs against waiters giving up."""
        self.lock = threading.Lock()

    def start(self, requests: Sequence["AppendRequest"]) -> None:
        """Link the finished ``requests`` in order and wake the first still waiting."""
        with self.lock:
            waiting = []
            for request in requests:
                if request._gave_up:
                    request._done.release()  # nobody waits; a later wait() returns at once
                else:
                    waiting.append(request)
            for before, after in itertools.pairwise(waiting):
                before._next = after
            if waiting:
                waiting[0]._done.release()

    def pass_on(self, request: "AppendRequest") -> None:
        """Wake the request after ``request`` that is still waiting (its waiter runs)."""
        with self.lock:
            after, request._next = request._next, None
            while after is not None and after._gave_up:
                after._done.release()  # as in start(): nobody waits on it now
                skipped, after = after, after._next
                skipped._next = None
            if after is not None:
                after._done.release()


class AppendRequest:
    """One atomic append waiting in the writer's queue, and its outcome."""

    __slots__ = (
        "_callback", "_done", "_gave_up", "_next", "appends", "contents", "error", "finished",
        "relay", "results", "tracking",
    )

    def __init__(
        self,
        appends: Sequence[StreamAppend],
        tracking: Tracking | None,
        callback: Callable[["AppendRequest"], None] | None,
        relay: Relay | None = None,
        contents: Sequence[ContentRow] = (),
    ) -> None:
        """Create a pending request; ``callback`` runs in the writer thread when done.

        ``relay`` is the writer's, given only when the submitter will call :meth:`wait`:
        the writer may then leave the wake-up to the waiter before it. ``contents`` are
        the rows of the appends' contents, already checked and encoded by the submitter.
        """
        self.appends = appends
        self.contents = contents
        self.tracking = tracking
        self.results: list[AppendResult] | None = None
        self.error: StoreError | None = None
        self.finished = False
        self.relay = relay
        self._callback = callback
        self._next: AppendRequest | None = None
        self._gave_up = False
        # A pre-acquired lock is the cheapest one-shot signal CPython offers.
        self._done = threading.Lock()
        self._done.acquire()

    def finish(
        self, results: list[AppendResult] | None, error: StoreError | None, *, wake: bool = True
    ) -> None:
        """Record the outcome and, unless a relay will, wake the waiter (writer thread)."""
        self.results, self.error = results, error
        self.finished = True
        if wake:
            self._done.release()
        callback, self._callback = self._callback, None  # what it holds need not outlive it
        if callback is not None:
            try:
                callback(self)
            except Exception as exc:  # a callback's failure must never stop the writer
                logger.warning("append callback failed: {}: {}", type(exc).__name__, exc)

    def wait(self, timeout: float | None = None) -> list[AppendResult]:
        """Block until the request is committed; raise its error if it failed."""
        try:
            woken = self._done.acquire(timeout=-1 if timeout is None else timeout)
        except BaseException:
            if self._give_up():  # woken after all: the wake-up is ours to pass on
                self._done.release()
                self._pass_on()
            raise
        if not woken and not self._give_up():
            raise TimeoutError("the append was not acknowledged in time")
        self._done.release()
        self._pass_on()
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results

    def _give_up(self) -> bool:
        """Stop waiting, unless the wake-up came meanwhile (then True: we hold it)."""
        relay = self.relay
        if relay is None:
            return self._done.acquire(blocking=False)
        with relay.lock:  # a hand-over either reached us already or will skip us
            if self._done.acquire(blocking=False):
                return True
            self._gave_up = True
            return False

    def _pass_on(self) -> None:
        if self.relay is not None and self._next is not None:
            self.relay.pass_on(self)
