"""Shared by the actor tests: prove that a test left no actor or store thread behind."""

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pykka

_ACTOR_THREAD = re.compile(r"Actor-\d+$")


def actor_threads(baseline: set[threading.Thread]) -> list[threading.Thread]:
    """Actor and store threads started since ``baseline`` that are still alive."""
    return [
        t for t in threading.enumerate()
        if t not in baseline and t.is_alive()
        and (_ACTOR_THREAD.search(t.name) or t.name.startswith("sw-"))
    ]


@contextmanager
def no_leaked_actors(cleanup: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Run the body; then stop every actor, run ``cleanup``, and assert nothing is left."""
    baseline = set(threading.enumerate())
    try:
        yield
    finally:
        pykka.ActorRegistry.stop_all()
        cleanup()
        deadline = time.monotonic() + 5.0
        while actor_threads(baseline) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert actor_threads(baseline) == []
        assert pykka.ActorRegistry.get_all() == []
