"""The cache-aware moment (issue 23): a compression where the prompt cache is cold anyway.

A session past the prepare mark (``[compression] prepare_ratio`` of its trigger) whose
previous call is older than its provider's prompt-cache lifetime is compressed at its
next call (``ContextCompressed.trigger = "cold_cache"``); a warm one waits for its
trigger. The daemon runs on the tests' fake clock, so "idle for five minutes" takes none.
"""

import time
from typing import Any

from sessionwarden.events import CODEC, CallAdmitted, CompressionPrepared, ContextCompressed

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.key_fixtures import Daemons

#: A 300 s cache on the provider, and a small trigger (2,500 tokens; prepare mark 2,000).
COLD = "prompt_cache_ttl_s = 300\n[compression]\nthreshold_tokens = 2500\n"


def conversation(turns: int) -> list[dict[str, Any]]:
    """A plain chat of ``turns`` questions and answers, each about 75 tokens."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(turns):
        out.append({"role": "user", "content": f"question {i}: " + "why " * 70})
        out.append({"role": "assistant", "content": f"answer {i}: " + "because " * 35})
    return out


def compressions(daemon: InProcessDaemon, session: str) -> list[ContextCompressed]:
    events = [CODEC.decode(e.type, e.data)
              for e in daemon.runtime.log.read_stream(f"session-{session}")]
    return [e for e in events if isinstance(e, ContextCompressed)]


def two_calls(daemons: Daemons, session: str, idle_s: float) -> list[ContextCompressed]:
    daemon = daemons.start(provider_extra=COLD)
    messages = conversation(14)
    with daemon.openai(session=session) as client:
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        assert compressions(daemon, session) == []  # under the trigger: nothing yet
        daemons.clock.advance(idle_s)
        messages += [{"role": "assistant", "content": "done"},
                     {"role": "user", "content": "and now?"}]
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    return compressions(daemon, session)


def test_a_session_past_the_prepare_mark_is_compressed_once_its_cache_is_cold(
    daemons: Daemons,
) -> None:
    [compressed] = two_calls(daemons, "idle", idle_s=301)
    assert compressed.trigger == "cold_cache"
    assert 2000 <= compressed.tokens_before < compressed.threshold == 2500
    assert compressed.tokens_after < compressed.tokens_before


def test_a_warm_session_waits_for_its_trigger(daemons: Daemons) -> None:
    assert two_calls(daemons, "busy", idle_s=60) == []


def test_a_cold_session_gets_its_prepared_compression_applied(daemons: Daemons) -> None:
    """The model summariser: the compression prepared past the mark is what the cold
    cache's moment applies (no summary call at that call)."""
    daemons.fake.state.by_model["sum-model"] = {"reply": "## Goal\n- answer the questions"}
    # No usage: the first call's reading does not recalibrate the figure under the mark.
    daemons.fake.state.by_model[MODEL] = {"usage": "missing"}
    daemon = daemons.start(provider_extra=COLD + 'summariser = "model"\n'
                           'summary_model = "fake/sum-model"\n')
    messages = conversation(16)  # ~2,150 tokens: past the mark (2,000)
    with daemon.openai(session="ahead") as client:
        client.chat.completions.create(model=MODEL, messages=messages[:2])  # type: ignore[arg-type]
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        events = wait_for_prepared(daemon, "ahead")
        daemons.clock.advance(301)
        messages += [{"role": "assistant", "content": "done"},
                     {"role": "user", "content": "and now?"}]
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    [compressed] = compressions(daemon, "ahead")
    assert (compressed.trigger, compressed.prepared) == ("cold_cache", True)
    sides = [e for e in read(daemon, "ahead") if isinstance(e, CallAdmitted) and e.purpose]
    assert len(sides) == 1 and sides[0].parent_call == events[-1].call_id


def read(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def wait_for_prepared(daemon: InProcessDaemon, session: str) -> list[CompressionPrepared]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [e for e in read(daemon, session) if isinstance(e, CompressionPrepared)]
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no compression was prepared: {read(daemon, session)}")
