"""Compression prepared ahead (issue 23): the call that crosses the trigger does not wait.

The real daemon with the model summariser, whose fake answer takes 2 s. A session past
the prepare mark has its compression prepared in the background (CompressionPreparing, a
summary side call whose parent is that call, CompressionPrepared); the later call that
crosses the trigger applies it (ContextCompressed ``prepared``) and is forwarded without
a summary call of its own. What it waited is logged, not asserted (timings are for bench/).
"""

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from sessionwarden.cmd.cli.main import main
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
    HistoryReset,
    SummariserFailed,
)
from sessionwarden.views.session_status import read_status, status_text

from tests.cmd.daemon_fixtures import MODEL as MODEL_NAME
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import SMALL, agent_session
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

MODEL = ('[compression]\nsummariser = "model"\nsummary_model = "fake/sum-model"\n'
         "prepare_wait_s = 10\n" + SMALL
         + 'price = { input = "3.00", output = "15.00", cache_read = "0.30", '
           'cache_write = "3.75" }\n')
SUMMARY = "## Goal\n- fix the failing test suite"


def events(daemon: InProcessDaemon, session: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data)
            for e in daemon.runtime.log.read_stream(f"session-{session}")]


def wait_for(daemon: InProcessDaemon, session: str, kind: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in events(daemon, session) if isinstance(e, kind)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no {kind} in {timeout} s")


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Any:
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": 2000}
    d = InProcessDaemon(tmp_path / "events.db", fake, extra_config=MODEL, clock=FakeClock())
    try:
        yield d.start()
    finally:
        d.stop()


def play_until(daemon: InProcessDaemon, session: str, stop: type,
               settle: type | None = None) -> int:
    """Play the agent until an event of type ``stop``; after an event of type ``settle``
    appears, wait for the preparation to land before the next call. Calls made."""
    made = 0
    with daemon.openai(session=session, timeout=30) as client:
        for messages in agent_session(60):
            started = time.monotonic()
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
            made += 1
            logger.info("call {} answered in {:.0f} ms", made, (time.monotonic() - started) * 1000)
            found = events(daemon, session)
            if any(isinstance(e, stop) for e in found):
                return made
            if settle is not None and any(isinstance(e, settle) for e in found):
                wait_for(daemon, session, CompressionPrepared | CompressionDropped)
                settle = None
    raise AssertionError(f"the session never recorded a {stop.__name__}")


def test_the_call_that_crosses_the_trigger_applies_the_prepared_compression(
    daemon: InProcessDaemon, fake: FakeProviderServer, capsys: pytest.CaptureFixture[str],
) -> None:
    """The preparation is let land before the next call: no race to keep open, so its
    summary answers in 200 ms, not 2 s (the wait for it would be dead time)."""
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": 200}
    play_until(daemon, "ahead", ContextCompressed, settle=CompressionPreparing)
    found = events(daemon, "ahead")
    [preparing] = [e for e in found if isinstance(e, CompressionPreparing)]
    [prepared] = [e for e in found if isinstance(e, CompressionPrepared)]
    [compressed] = [e for e in found if isinstance(e, ContextCompressed)]
    assert prepared.call_id == preparing.call_id != compressed.call_id
    assert compressed.prepared and compressed.summariser == "model"
    assert compressed.waited_ms == 0 and compressed.tokens_after < compressed.tokens_before
    # What the compression costs in cache, priced at the model's rates ($3.75 / $0.30 per M).
    assert compressed.cache_write_usd == str(
        (Decimal("3.75") * compressed.tokens_after / 1_000_000).quantize(Decimal("0.000001")))
    saved = compressed.tokens_before - compressed.tokens_after
    assert compressed.saved_usd_per_call == str(
        (Decimal("0.30") * saved / 1_000_000).quantize(Decimal("0.000001")))
    status = read_status(daemon.runtime.log, daemon.config, "ahead", daemon.runtime.clock.now())
    assert status is not None
    text = status_text(status, daemon.runtime.clock.now())
    assert ("prepared ahead (waited 0 ms)" in text
            and f"cache write ~${compressed.cache_write_usd}" in text), text
    # replay names every step at its call, and the log holds every content they name.
    assert main(["replay", "--verify", "--db", str(daemon.db)]) == 0
    for call, step in ((preparing.call_id, "is prepared ahead"),
                       (prepared.call_id, "compression prepared ahead:"),
                       (compressed.call_id, "prepared ahead (waited 0 ms)")):
        capsys.readouterr()
        assert main(["replay", "--db", str(daemon.db), "--session", "ahead",
                     "--call", call]) == 0
        assert step in capsys.readouterr().out
    # The one summary side call was the preparation's, made before the crossing call.
    [side] = [e for e in found if isinstance(e, CallAdmitted) and e.purpose]
    assert side.parent_call == preparing.call_id
    assert [e for e in found if isinstance(e, CompressionDropped | HistoryReset)] == []


def test_a_call_that_crosses_the_trigger_waits_for_a_running_preparation(
    daemon: InProcessDaemon,
) -> None:
    """No settling: the crossing call comes while the 2 s summary is still running."""
    play_until(daemon, "racing", ContextCompressed)
    found = events(daemon, "racing")
    [compressed] = [e for e in found if isinstance(e, ContextCompressed)]
    sides = [e for e in found if isinstance(e, CallAdmitted) and e.purpose]
    logger.info("the crossing call waited {} ms for the preparation", compressed.waited_ms)
    assert compressed.prepared and len(sides) == 1


def test_one_session_s_2000_message_compression_never_holds_up_another_s_calls(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    """Both sessions on one shard: the big one's compression runs in the CompressorActor and
    its summary on the loop; the small one's calls are answered meanwhile."""
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": 2000}
    # No usage: our estimate stands uncalibrated, so the history sits past the prepare mark.
    fake.state.by_model[MODEL_NAME] = {"usage": "missing"}
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=MODEL,
                             clock=FakeClock(), runtime={"session_shards": 1}).start()
    big: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(1000):  # ~50,000 tokens: past the prepare mark of a 128K window
        big.append({"role": "user", "content": f"step {i}: " + "check the module " * 8})
        big.append({"role": "assistant", "content": f"done {i}: " + "it passes " * 8})
    try:
        with daemon.openai(session="big", timeout=30) as client:
            # A session's first call never makes a side call: it starts the session.
            client.chat.completions.create(model=MODEL_NAME, messages=big[:2])  # type: ignore[arg-type]
            client.chat.completions.create(model=MODEL_NAME, messages=big)  # type: ignore[arg-type]
        wait_for(daemon, "big", CompressionPreparing)
        started = time.monotonic()
        with daemon.openai(session="small", timeout=30) as client:
            for i in range(5):
                client.chat.completions.create(  # type: ignore[call-overload]
                    model=MODEL_NAME, messages=[{"role": "user", "content": f"hi {i}"}])
        logger.info("5 small calls answered in {:.0f} ms while the big session's compression "
                    "was prepared", (time.monotonic() - started) * 1000)
        assert [e for e in events(daemon, "big") if isinstance(e, CompressionPrepared)] == []
        prepared = wait_for(daemon, "big", CompressionPrepared)
        assert prepared.messages_before == 2000
    finally:
        daemon.stop()


def test_a_reset_drops_the_prepared_compression(
    daemon: InProcessDaemon, fake: FakeProviderServer,
) -> None:
    fake.state.by_model["sum-model"] = {"reply": SUMMARY, "delay_ms": 200}
    play_until(daemon, "reset", CompressionPrepared, settle=CompressionPreparing)
    prepared = wait_for(daemon, "reset", CompressionPrepared)
    with daemon.openai(session="reset") as client:  # the client starts over
        client.chat.completions.create(  # type: ignore[call-overload]
            model="small", messages=[{"role": "user", "content": "a new task"}])
    found = events(daemon, "reset")
    [dropped] = [e for e in found if isinstance(e, CompressionDropped)]
    assert dropped.call_id == prepared.call_id and "stale" in dropped.reason
    assert [e for e in found if isinstance(e, HistoryReset)]


def test_a_failing_summary_model_drops_the_preparation_and_cools(
    daemon: InProcessDaemon, fake: FakeProviderServer,
) -> None:
    """The preparation's summary fails (503): recorded as a summary failure with its
    cooldown, so the crossing call does not ask the model again (the builtin stands in)."""
    fake.state.by_model["sum-model"] = {"status": 503}
    play_until(daemon, "failing", ContextCompressed, settle=CompressionPreparing)
    found = events(daemon, "failing")
    failed, cooling = [e for e in found if isinstance(e, SummariserFailed)]
    [dropped] = [e for e in found if isinstance(e, CompressionDropped)]
    [compressed] = [e for e in found if isinstance(e, ContextCompressed)]
    assert failed.action == "dropped" and failed.cooldown_s > 0
    assert failed.call_id == dropped.call_id and "the summary failed" in dropped.reason
    assert (compressed.prepared, compressed.summariser) == (False, "builtin-fallback")
    assert cooling.call_id == compressed.call_id and cooling.cooldown_s == 0  # not asked
    assert len([e for e in found if isinstance(e, CallAdmitted) and e.purpose]) == 1
