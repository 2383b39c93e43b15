"""Shared by the actor tests: no actor or store thread left behind; calls to admit."""

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pykka
from sessionwarden.domain.calls import CallRequest, RequestShape

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


def call_request(call_id: str, session_id: str, *, messages: int = 4, stream: bool = True,
                 problems: tuple[str, ...] = (), client: str = "agent/1.0") -> CallRequest:
    """A chat-completions call as the proxy hands it to admission."""
    body = {"model": "model-x", "messages": [{"role": "user", "content": "hi"}] * messages}
    shape = RequestShape(model="prov/model-x", stream=stream, message_count=messages,
                         prompt_chars=1284, problems=problems)
    return CallRequest(call_id=call_id, session_id=session_id, provider="prov",
                       model="model-x", api_mode="chat_completions", shape=shape, body=body,
                       client=client)
