"""The client's side of a proxied call: noticing, while the upstream works, that it left.

Once the request body is read, the only thing an ASGI app hears from its client is
``http.disconnect``, and only when it asks. Without someone asking, a client that gives
up on a slow upstream leaves the call waiting for the upstream's answer — for as long
as the read timeout — holding one of the provider's connections: enough of them and a
hung provider has its whole pool held by calls nobody waits for.

:class:`ClientWatch`
asks for the whole call, and :meth:`ClientWatch.race` ends any upstream step the moment
the client leaves, which closes that upstream connection.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sessionwarden.cmd.daemon.http import ASGIReceive

__all__ = ["ClientGone", "ClientWatch"]

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected while the awaited upstream step was still running."""


class ClientWatch:
    """Listens for the client's disconnect; started per call, closed when it ends."""

    def __init__(self, receive: ASGIReceive) -> None:
        """Start listening on ``receive`` (the request body must have been read)."""
        loop = asyncio.get_running_loop()
        self.gone = loop.create_future()  # resolved (None) when the client leaves
        self._task = loop.create_task(self._listen(receive))

    async def _listen(self, receive: ASGIReceive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone.set_result(None)

    @property
    def left(self) -> bool:
        """Whether the client has disconnected."""
        return self.gone.done()

    def on_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the loop) when the client leaves, or soon if it has."""
        self.gone.add_done_callback(lambda _: callback())

    async def race(self, step: Awaitable[T]) -> T:
        """``step``'s result, unless the client leaves first: then ``step`` is cancelled.

        Raises:
            ClientGone: the client disconnected before ``step`` finished.
        """
        if self.left:
            if asyncio.iscoroutine(step):
                step.close()
            raise ClientGone
        task = asyncio.ensure_future(step)
        # A callback, not asyncio.wait: this runs twice per call, and wait() builds a
        # set, a future and callbacks on both sides each time.
        stop = _Canceller(task)
        self.gone.add_done_callback(stop)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if stop.fired and current is not None and not current.cancelling():
                raise ClientGone from None  # the step was cancelled by us, not the call
            raise
        finally:
            self.gone.remove_done_callback(stop)

    def close(self) -> None:
        """Stop listening (the call is over)."""
        self._task.cancel()


class _Canceller:
    """Cancels a step when the client leaves, and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: "asyncio.Future[Any]") -> None:
        self.task = task
        self.fired = False

    def __call__(self, _: "asyncio.Future[None]") -> None:
        if not self.task.done():
            self.fired = True
            self.task.cancel()
