"""Appending from asyncio: many tasks wait, one loop wake-up per committed group.

A task that appends must not block its event loop, so it submits the request and awaits
a future the writer thread completes.

Completing each future with its own
``call_soon_threadsafe`` would cost one self-pipe write and one loop wake-up per append,
paid inside the writer thread between two commits. Instead each request's callback only
queues its result on the loop's :class:`LoopDelivery`; once the whole group is
acknowledged the writer's group hook flushes every delivery that has something queued,
with one ``call_soon_threadsafe`` each. The loop then resolves the group's futures in
one pass.

Cancelling the awaiting task does not cancel the append: it may still commit.
"""

import asyncio
import threading
import weakref
from collections.abc import Sequence

from sessionwarden.store.contents import ContentRow
from sessionwarden.store.errors import StoreClosed
from sessionwarden.store.records import AppendResult, StreamAppend, Tracking
from sessionwarden.store.writer import AppendRequest, GroupCommitWriter

__all__ = ["LoopDelivery", "append_batch_async"]

_Waiter = tuple["asyncio.Future[AppendRequest]", AppendRequest]


class LoopDelivery:
    """Queues finished requests for one event loop and wakes it once per flush."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver to ``loop`` (held weakly: a log must not keep dead loops alive)."""
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._pending: list[_Waiter] = []
        self._scheduled = False

    def deliver(self, future: "asyncio.Future[AppendRequest]", request: AppendRequest) -> None:
        """Queue ``request`` for ``future`` (writer thread); the loop sees it at the flush."""
        with self._lock:
            self._pending.append((future, request))

    def flush(self) -> None:
        """Wake the loop once if anything is queued (writer thread, after a group)."""
        with self._lock:
            if not self._pending or self._scheduled:
                return
            self._scheduled = True
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is left to wait
            with self._lock:
                self._pending.clear()
                self._scheduled = False

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._scheduled = False
        for future, request in pending:
            if not future.done():
                future.set_result(request)


class _Deliveries:
    """One writer's deliveries, one per event loop, flushed by a single group hook."""

    def __init__(self) -> None:
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopDelivery] = (
            weakref.WeakKeyDictionary()
        )

    def flush(self) -> None:
        for delivery in list(self.by_loop.values()):
            delivery.flush()


_registry: "weakref.WeakKeyDictionary[GroupCommitWriter, _Deliveries]" = (
    weakref.WeakKeyDictionary()
)
_registry_lock = threading.Lock()


def _delivery(writer: GroupCommitWriter, loop: asyncio.AbstractEventLoop) -> LoopDelivery:
    deliveries = _registry.get(writer)
    delivery = None if deliveries is None else deliveries.by_loop.get(loop)
    if delivery is not None:  # the common case needs no lock: dict reads are atomic
        return delivery
    with _registry_lock:
        deliveries = _registry.get(writer)
        if deliveries is None:
            deliveries = _registry[writer] = _Deliveries()
            writer.add_group_hook(deliveries.flush)
        delivery = deliveries.by_loop.get(loop)
        if delivery is None:
            delivery = deliveries.by_loop[loop] = LoopDelivery(loop)
        return delivery


async def append_batch_async(
    writer: GroupCommitWriter,
    appends: Sequence[StreamAppend],
    tracking: Tracking | None = None,
    contents: Sequence[ContentRow] | None = None,
) -> list[AppendResult]:
    """Submit an atomic append to ``writer`` and wait for it without blocking the loop.

    ``contents`` are the appends' encoded contents (see ``GroupCommitWriter.submit``).
    """
    loop = asyncio.get_running_loop()
    delivery = _delivery(writer, loop)
    future: asyncio.Future[AppendRequest] = loop.create_future()
    submitted = False

    def callback(done: AppendRequest) -> None:
        # A request refused inside submit() (the log is closed) is finished in this
        # very call, and no group hook will ever flush it: answer it directly below
        # instead of leaving it queued. finish() sets ``finished`` before calling us, so
        # a request we skip here is always seen as finished after submit() returns.
        if submitted:
            delivery.deliver(future, done)

    request = writer.submit(appends, tracking, callback, contents=contents)
    submitted = True
    if not request.finished:
        request = await future
    if request.error is not None:
        raise request.error
    if request.results is None:  # pragma: no cover - finish() always sets one of the two
        raise StoreClosed("the event log is closed")
    return request.results
