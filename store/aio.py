"""Appending from asyncio: many tasks wait, one loop wake-up per committed group.

A task that appends must not block its event loop, so it submits the request and awaits
a future the writer thread completes. Completing each future with its own
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

from sessionwarden.store.errors import StoreClosed
from sessionwarden.store.records import AppendResult, StreamAppend, Tracking
from sessionwarden.store.writer import AppendRequest, GroupCommitWriter

__all__ = ["LoopDelivery", "append_batch_async"]

_Waiter = tuple["asyncio.Future[AppendRequest]", AppendRequest]


class LoopDelivery:
    """Queues finished requests for one event loop and wakes it once per flush."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver to ``loop``."""
        self._loop = loop
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
        try:
            self._loop.call_soon_threadsafe(self._drain)
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


_deliveries: "weakref.WeakKeyDictionary[GroupCommitWriter, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopDelivery]]" = weakref.WeakKeyDictionary()  # noqa: E501
_deliveries_lock = threading.Lock()


def _delivery(writer: GroupCommitWriter, loop: asyncio.AbstractEventLoop) -> LoopDelivery:
    per_loop = _deliveries.get(writer)
    delivery = None if per_loop is None else per_loop.get(loop)
    if delivery is not None:  # the common case needs no lock: dict reads are atomic
        return delivery
    with _deliveries_lock:
        per_loop = _deliveries.get(writer)
        if per_loop is None:
            per_loop = _deliveries[writer] = weakref.WeakKeyDictionary()
        delivery = per_loop.get(loop)
        if delivery is None:
            delivery = per_loop[loop] = LoopDelivery(loop)
            # The hook holds the delivery only weakly: a closed, collected loop must not
            # be kept alive (or flushed) by a log that outlives it.
            ref = weakref.ref(delivery)

            def hook() -> None:
                target = ref()
                if target is not None:
                    target.flush()

            writer.add_group_hook(hook)
        return delivery


async def append_batch_async(
    writer: GroupCommitWriter,
    appends: Sequence[StreamAppend],
    tracking: Tracking | None = None,
) -> list[AppendResult]:
    """Submit an atomic append to ``writer`` and wait for it without blocking the loop."""
    loop = asyncio.get_running_loop()
    delivery = _delivery(writer, loop)
    future: asyncio.Future[AppendRequest] = loop.create_future()
    request = writer.submit(appends, tracking, lambda done: delivery.deliver(future, done))
    if not request.finished:
        request = await future
    if request.error is not None:
        raise request.error
    if request.results is None:  # pragma: no cover - finish() always sets one of the two
        raise StoreClosed("the event log is closed")
    return request.results
