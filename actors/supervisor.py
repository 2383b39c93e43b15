"""Starts the actors in dependency order, restarts the one that fails, stops them in reverse.

pykka has no supervision, so this is a small Erlang-style one-for-one supervisor. Each
child is described by an :class:`ActorSpec` whose ``start`` builds a fresh actor that
recovers its state from the log in ``on_start``. A failed child is restarted on a
background thread (never in the dying actor's own thread) after a short backoff; callers
that look the child up through :meth:`Supervisor.ref` reach the new instance, and calls
that were queued on the dead one time out into ``ActorUnavailable`` rather than hang.

A child that fails more than ``max_restarts`` times within ``window_s`` is given up on and
reported: the daemon then answers 503 for what needs it, instead of flapping forever.
Except when the cause is the event log being unwritable (a full disk, a lock held too
long): that is the machine's state, not a bug, and giving up would keep the daemon down
after space returns; such a child is restarted for as long as it takes, at most every
``max_backoff_s``. :meth:`Supervisor.why_down` says why a child is not running.

A child whose first start fails raises that failure from :meth:`Supervisor.start` (a
``StoreUnavailable`` for a full disk, say), never pykka's bare ``ActorDeadError``.
"""

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import pykka
from loguru import logger
from sessionwarden.actors.bridge import Ping
from sessionwarden.actors.errors import ActorUnavailable
from sessionwarden.store.errors import StoreBusy, StoreUnavailable

__all__ = ["ActorSpec", "Supervisor"]

OnFailure = Callable[[BaseException], None]


class ActorSpec(NamedTuple):
    """A supervised child: its name and how to start a fresh instance."""

    name: str
    start: Callable[[OnFailure], "pykka.ActorRef[Any]"]


class Supervisor:
    """One-for-one supervision of a fixed list of actors."""

    def __init__(
        self,
        specs: list[ActorSpec],
        *,
        max_restarts: int = 5,
        window_s: float = 60.0,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        start_timeout_s: float = 30.0,
    ) -> None:
        """Describe the children; nothing starts before :meth:`start`."""
        self._specs = {spec.name: spec for spec in specs}
        self._order = [spec.name for spec in specs]
        self._refs: dict[str, pykka.ActorRef[Any]] = {}
        self._failures: dict[str, deque[float]] = {name: deque() for name in self._order}
        self._lock = threading.Lock()
        # An Event, not a flag: a restart waiting out its backoff wakes at once on stop().
        self._stopping = threading.Event()
        self._restarting: list[threading.Thread] = []
        self._max_restarts = max_restarts
        self._window_s = window_s
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._start_timeout_s = start_timeout_s
        self._unwritable: dict[str, int] = dict.fromkeys(self._order, 0)
        self._down: dict[str, str] = {}
        self.restarts: dict[str, int] = dict.fromkeys(self._order, 0)
        self.given_up: set[str] = set()

    def start(self) -> None:
        """Start every child in order, each answering a ping before the next starts."""
        for name in self._order:
            self._start(name)

    def _start(self, name: str) -> None:
        spec = self._specs[name]
        starting = True
        start_failure: list[BaseException] = []

        def on_failure(exc: BaseException) -> None:
            # A failure of on_start is this start's to raise, not one to restart from.
            if starting:
                start_failure.append(exc)
            else:
                self._failed(name, exc)

        ref = spec.start(on_failure)
        # pykka runs on_start in the actor's thread and reports its failure before it
        # stops the actor, so when this ping fails the cause is already known.
        try:
            ref.ask(Ping(), timeout=self._start_timeout_s)
        except (pykka.ActorDeadError, pykka.Timeout):
            cause = start_failure[0] if start_failure else None
            if isinstance(cause, Exception):
                raise cause from None
            raise ActorUnavailable(f"actor {name} did not start") from None
        finally:
            starting = False
        with self._lock:
            if not self._stopping.is_set():
                self._refs[name] = ref
                return
        # stop() ran while this (re)start was under way: it must not outlive stop().
        ref.stop(block=True, timeout=self._start_timeout_s)

    def ref(self, name: str) -> "pykka.ActorRef[Any]":
        """The current instance of child ``name``."""
        return self._refs[name]

    def names(self) -> list[str]:
        """The children, in start order."""
        return list(self._order)

    def why_down(self, name: str) -> str | None:
        """Why child ``name`` is not running (its last failure), or None if it is."""
        return self._down.get(name)

    def _failed(self, name: str, exc: BaseException) -> None:
        if self._stopping.is_set():
            return
        self._down[name] = str(exc)
        self._unwritable[name] = self._unwritable[name] + 1 if _unwritable(exc) else 0
        logger.error("actor {} failed: {}: {}; restarting", name, type(exc).__name__, exc)
        thread = threading.Thread(
            target=self._restart, args=(name,), name=f"sw-restart-{name}", daemon=True
        )
        # Started under the lock: stop() joins every thread in the list, and joining one
        # that is listed but not yet started raises (seen under load).
        with self._lock:
            if self._stopping.is_set():
                return
            self._restarting.append(thread)
            thread.start()

    def _restart(self, name: str) -> None:
        now = time.monotonic()
        unwritable = self._unwritable[name]
        with self._lock:
            failures = self._failures[name]
            if not unwritable:
                failures.append(now)
            while failures and now - failures[0] > self._window_s:
                failures.popleft()
            attempts = len(failures)
        if unwritable:
            delay = min(self._backoff_s * 2 ** min(unwritable - 1, 16), self._max_backoff_s)
            if self._stopping.wait(delay):
                return
        elif attempts > self._max_restarts:
            self.given_up.add(name)
            logger.critical(
                "actor {} failed {} times in {:.0f} s; not restarting it", name, attempts,
                self._window_s,
            )
            return
        elif self._stopping.wait(self._backoff_s * 2 ** (attempts - 1)):
            return  # stop() came during the backoff
        try:
            self._start(name)
        except Exception as exc:
            self._failed(name, exc)
            return
        self._unwritable[name] = 0
        self._down.pop(name, None)
        self.restarts[name] += 1
        logger.info("actor {} restarted (state recovered from the log)", name)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the children in reverse start order, each after its queued messages.

        ``timeout`` bounds the wait for each restart under way and for each child's stop.
        A restart still starting its child when that wait gives up stops the child itself
        once it is up, so no child outlives the supervisor.
        """
        with self._lock:
            self._stopping.set()
            restarting = list(self._restarting)
        for thread in restarting:
            thread.join(timeout)
        for name in reversed(self._order):
            ref = self._refs.get(name)
            if ref is None:
                continue
            try:
                ref.stop(block=True, timeout=timeout)
            except pykka.ActorDeadError:
                pass
            except pykka.Timeout:
                logger.warning("actor {} did not stop within {:.0f} s", name, timeout)


def _unwritable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is the log being unwritable, not a bug."""
    while exc is not None:
        if isinstance(exc, StoreUnavailable | StoreBusy):
            return True
        exc = exc.__cause__
    return False
