"""The governed history rebuilt from the log (issue 23): a restart changes nothing upstream.

The same tool-heavy agent session (spills, a compression, calls after it) is played twice
against the real daemon, the fake upstream recording every body it receives: once
without interruption, once with restarts (or with a one-session LRU that passivates the
session at every call). Every body the upstream received must be the same bytes: no
reset, no second summary, the prompt cache's prefix intact.
"""

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sessionwarden.events import (
    CODEC,
    CallAdmitted,
    ContextCompressed,
    HistoryReset,
    ToolResultSpilled,
)

from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import SMALL, agent_session
from tests.support.clock import FakeClock
from tests.support.fake_provider import FakeProviderServer

#: Terminal results over 2,500 characters are spilled (one in a few of the session's).
TOOLS = "[tools]\noverrides = { terminal = 2500 }\n"
MODEL_SUMMARY = (TOOLS + '[compression]\nsummariser = "model"\n'
                 'summary_model = "fake/sum-model"\n' + SMALL)
BUILTIN = TOOLS + '[compression]\nsummariser = "builtin"\n' + SMALL
TURNS = 20


class Run:
    """One play of the sessions on a fresh log in ``workdir``; restartable mid-way."""

    def __init__(self, workdir: Path, fake: FakeProviderServer, config: str,
                 runtime: dict[str, Any] | None = None) -> None:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        fake.state.clear()
        fake.state.by_model["sum-model"] = {"reply": "## Goal\n- fix the failing test suite"}
        self.workdir, self.fake, self.config, self.runtime = workdir, fake, config, runtime
        self.clock = FakeClock()
        self.daemon = self._start()

    def _start(self) -> InProcessDaemon:
        return InProcessDaemon(self.workdir / "events.db", self.fake, extra_config=self.config,
                               clock=self.clock, runtime=self.runtime).start()

    def restart(self) -> None:
        self.daemon.stop()
        self.daemon = self._start()

    def call(self, session: str, messages: list[dict[str, Any]]) -> None:
        with self.daemon.openai(session=session) as client:
            client.chat.completions.create(model="small", messages=messages)  # type: ignore[arg-type]
        self.clock.advance(20)  # a busy agent: the prompt cache stays warm

    def received(self) -> list[tuple[str, bytes]]:
        """(model, body bytes) of every chat request the upstream received, in order."""
        return [(r.body.get("model", ""), r.raw) for r in self.fake.state.snapshot()
                if r.path.endswith("/chat/completions")]

    def events(self, session: str) -> list[Any]:
        return [CODEC.decode(e.type, e.data)
                for e in self.daemon.runtime.log.read_stream(f"session-{session}")]

    def stop(self) -> None:
        self.daemon.stop()


def play(run: Run, between: Callable[[int], None] = lambda k: None
         ) -> list[tuple[str, bytes]]:
    try:
        for k, messages in enumerate(agent_session(TURNS)):
            between(k)
            run.call("agent", messages)
        return run.received()
    finally:
        run.stop()


@pytest.mark.parametrize("config", [BUILTIN, MODEL_SUMMARY], ids=["builtin", "model"])
def test_a_restart_between_calls_changes_no_byte_sent_upstream(
    tmp_path: Path, fake: FakeProviderServer, config: str
) -> None:
    straight = play(Run(tmp_path / "run", fake, config))
    run = Run(tmp_path / "run", fake, config)
    restarts = []

    def restart(k: int) -> None:
        if k and k % 4 == 0:  # before, between and after the spills and the compression
            run.restart()
            restarts.append(k)

    interrupted = play(run, restart)
    assert len(restarts) >= 5
    assert [model for model, _ in interrupted] == [model for model, _ in straight]
    for index, ((_, ours), (_, theirs)) in enumerate(zip(interrupted, straight, strict=True)):
        assert ours == theirs, f"request {index} differs after a restart"
    run.daemon.start()
    try:
        events = run.events("agent")
    finally:
        run.stop()
    compressions = [e for e in events if isinstance(e, ContextCompressed)]
    assert compressions and [e for e in events if isinstance(e, ToolResultSpilled)]
    assert [e for e in events if isinstance(e, HistoryReset)] == []
    # The model's summary was asked for once per compression, never again after a restart.
    summaries = [e for e in events if isinstance(e, CallAdmitted) and e.purpose]
    assert len(summaries) == (len(compressions) if config is MODEL_SUMMARY else 0)


def test_a_passivated_session_resumes_its_governed_history(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    """Two sessions on one shard that keeps one session: each call passivates the other."""
    histories = agent_session(TURNS)

    def both(run: Run) -> list[tuple[str, bytes]]:
        try:
            for messages in histories:
                run.call("one", messages)
                run.call("two", [*messages[:1], {"role": "user", "content": "(two) "
                                                 + messages[1]["content"]}, *messages[2:]])
            return run.received()
        finally:
            run.stop()

    straight = both(Run(tmp_path / "run", fake, BUILTIN))
    tiny = Run(tmp_path / "run", fake, BUILTIN,
               runtime={"session_shards": 1, "max_sessions_per_shard": 1})
    passivated = both(tiny)
    assert passivated == straight
    tiny.daemon.start()
    try:
        assert [e for e in tiny.events("one") if isinstance(e, HistoryReset)] == []
        assert [e for e in tiny.events("one") if isinstance(e, ContextCompressed)]
    finally:
        tiny.stop()


def test_without_recorded_messages_a_restart_resets_and_says_why(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    run = Run(tmp_path / "run", fake, "[daemon]\nrecord_messages = false\n" + BUILTIN)
    histories = agent_session(TURNS)
    try:
        for messages in histories[:12]:
            run.call("agent", messages)
        run.restart()
        run.call("agent", histories[12])
        [reset] = [e for e in run.events("agent") if isinstance(e, HistoryReset)]
        assert "record_messages was off" in reset.reason
    finally:
        run.stop()
