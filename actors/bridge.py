"""The bridge between the asyncio event loop and pykka's threading actors.

pykka futures are not asyncio-aware: ``await future`` blocks the loop. So the loop never
waits on a pykka future. Instead :func:`ask` *tells* the actor a :class:`Call` carrying a
reply callback; the actor (or the store's writer thread, when the reply must wait for a
commit) calls it, and the callback hands the result to the loop with
``call_soon_threadsafe``. No worker thread is held per waiting request, and an actor can
reply *later* — after its append is durable — without blocking its own inbox.

Actors derive from :class:`GovernedActor` and implement :meth:`GovernedActor.handle`.
An exception raised by ``handle`` goes back to the caller and the actor keeps serving; an
:class:`ActorCrash` (or anything raised outside a call) stops the actor, and its
supervisor starts a new one that recovers its state from the log.
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Final

import pykka
from sessionwarden.actors.errors import ActorCrash, ActorUnavailable

__all__ = [
    "PENDING",
    "ActorCrash",
    "Call",
    "GovernedActor",
    "Ping",
    "Reply",
    "ask",
    "ask_blocking",
    "request",
    "tell",
    "wait",
]

#: ``reply(result, error)``: exactly one of the two is meaningful.
Reply = Callable[[Any, BaseException | None], None]


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


#: Returned by ``handle`` when it has arranged to call ``reply`` itself, later.
PENDING: Final = _Pending()


class Ping:
    """Answered with ``"pong"`` by every governed actor: proves it started and serves."""


class Call:
    """A message and the callback that receives its outcome."""

    __slots__ = ("message", "reply")

    def __init__(self, message: object, reply: Reply) -> None:
        """Wrap ``message``; ``reply`` is called once with its outcome."""
        self.message = message
        self.reply = reply


class GovernedActor(pykka.ThreadingActor):
    """Base of sessionwarden's actors: typed messages in, replies through callbacks."""

    #: Daemon threads: a crashed daemon never hangs at exit on an actor's thread.
    use_daemon_thread = True

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """``on_failure`` is told (in the dying actor's thread) why the actor stopped."""
        super().__init__()
        self._report_failure = on_failure

    def handle(self, message: object, reply: Reply) -> object:
        """Process one message; return its result, or :data:`PENDING` to reply later."""
        raise NotImplementedError

    def on_receive(self, message: Any) -> Any:
        """Dispatch a :class:`Call`; other messages (plain ``ask``/``tell``) go to handle."""
        if isinstance(message, Ping):
            return "pong"
        if not isinstance(message, Call):
            return self.handle(message, _ignore)
        if isinstance(message.message, Ping):
            message.reply("pong", None)
            return None
        try:
            result = self.handle(message.message, message.reply)
        except ActorCrash as exc:
            message.reply(None, ActorUnavailable(f"{type(self).__name__} failed: {exc}"))
            raise
        except Exception as exc:
            message.reply(None, exc)
            return None
        if result is not PENDING:
            message.reply(result, None)
        return None

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        """Tell the supervisor (once); pykka has already logged the failure."""
        self._tell_supervisor(exception_value)

    def _handle_failure(self, exception_type: Any, exception_value: Any, traceback: Any
                        ) -> None:
        # pykka sends a failure of on_start here and never to on_failure: without this
        # the supervisor would learn only that the actor is dead, not that the disk is
        # full. (A failed tell comes here and then to on_failure: it is reported once.)
        self._tell_supervisor(exception_value)
        super()._handle_failure(exception_type, exception_value, traceback)

    def _tell_supervisor(self, exception: object) -> None:
        if self._report_failure is not None and isinstance(exception, BaseException):
            report, self._report_failure = self._report_failure, None  # the actor stops
            report(exception)


def tell(ref: "pykka.ActorRef[Any]", message: object) -> None:
    """Send ``message`` without waiting; a dead actor is :class:`ActorUnavailable`.

    pykka raises its own ``ActorDeadError``; no caller of ours ever sees it raw.
    """
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        raise ActorUnavailable("the actor is not running") from None


def _ignore(result: Any, error: BaseException | None) -> None:
    if error is not None:
        raise error


def _settle(future: "asyncio.Future[Any]", result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller timed out or was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def request(ref: "pykka.ActorRef[Any]", message: object) -> "asyncio.Future[Any]":
    """Send ``message`` now; the returned future (of the running loop) gets the reply.

    No task is created, so a caller can have several requests in flight and await them
    one by one (the proxy asks for admission and a key at once).

    Raises:
        ActorUnavailable: the actor is not running.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def reply(result: Any, error: BaseException | None) -> None:
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            pass

    tell(ref, Call(message, reply))
    return future


async def wait(future: "asyncio.Future[Any]", timeout: float = 10.0) -> Any:
    """The reply of a :func:`request`, or :class:`ActorUnavailable` after ``timeout``.

    A timer on the loop rather than ``asyncio.wait_for``: it is the proxy's hot path, and
    a timer handle costs a fraction of what wait_for's wrapping does.
    """
    loop = asyncio.get_running_loop()
    timer = loop.call_later(timeout, _expire, future, timeout)
    try:
        return await future
    finally:
        timer.cancel()


def _expire(future: "asyncio.Future[Any]", timeout: float) -> None:
    if not future.done():
        future.set_exception(ActorUnavailable(f"no reply within {timeout:g} s"))


async def ask(ref: "pykka.ActorRef[Any]", message: object, timeout: float = 10.0) -> Any:
    """Send ``message`` to the actor and await its reply without blocking the loop.

    Raises:
        ActorUnavailable: the actor is dead or did not reply within ``timeout``.
    """
    return await wait(request(ref, message), timeout)


def ask_blocking(ref: pykka.ActorRef[Any], message: object, timeout: float = 10.0) -> Any:
    """Send ``message`` and wait for the reply in this (non-loop) thread."""
    done = threading.Event()
    box: list[Any] = [None, None]

    def reply(result: Any, error: BaseException | None) -> None:
        box[0], box[1] = result, error
        done.set()

    try:
        ref.tell(Call(message, reply))
    except pykka.ActorDeadError:
        raise ActorUnavailable("the actor is not running") from None
    if not done.wait(timeout):
        raise ActorUnavailable(f"no reply within {timeout:g} s")
    if box[1] is not None:
        raise box[1]
    return box[0]
