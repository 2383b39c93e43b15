"""Cache markers moved each round, as Claude Code does: the history is still recognised.

The official ``anthropic`` SDK through the in-process daemon to an ``anthropic_messages``
provider on the fake. Each round the client puts ``cache_control`` on the newest message's
last block (and on its system prompt) and drops it from the message that had it, with
20–30 KB tool results the daemon spills and a window small enough to compress. Asserted
on what reached the fake: no history reset, the compression carried over to the next
call, exactly the client's markers forwarded (never more than 4), and the same after a
restart of the daemon on the same log.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.context.markers import count_markers

from tests.cmd.inprocess import InProcessDaemon, start_made
from tests.cmd.test_doors_messages_e2e import AGENT, READ, _pairing_ok, extra, forwarded
from tests.support.fake_provider import FakeProviderServer

MARKER = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are a careful agent.", "cache_control": MARKER}]
ROUNDS = 22
RESTART_AT = 15


def marked(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` as sent: a marker on the newest message's last block only."""
    sent = copy.deepcopy(history)
    sent[-1]["content"][-1]["cache_control"] = MARKER
    return sent


def test_moving_cache_markers_keep_the_history_recognised_spilled_and_compressed(
    made: list[InProcessDaemon], tmp_path: Path, fake: FakeProviderServer,
    capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = start_made(made, tmp_path, fake, extra(fake, window=8000))
    fake.state.by_model[AGENT] = {"tool_name": "Read"}
    sent: list[bytes] = []  # the bytes the client sent, beside what was forwarded
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "read every file"}]}]
    rounds = 0

    def run_until(stop: int) -> None:
        nonlocal rounds
        hook = httpx2.Client(event_hooks={"request": [lambda r: sent.append(r.read())]})
        with anthropic.Anthropic(base_url=f"http://127.0.0.1:{daemon.port}",
                                 api_key=daemon.token, max_retries=0, http_client=hook,
                                 default_headers={"X-Session-Id": "markers"}) as c:
            while rounds < stop:
                reply = c.messages.with_raw_response.create(
                    model=AGENT, max_tokens=1024, tools=[READ], system=SYSTEM,
                    messages=marked(history))
                content = reply.http_response.json()["content"]
                history.append({"role": "assistant", "content": content})
                results = [{"type": "tool_result", "tool_use_id": b["id"],
                            "content": f"output {rounds}: " + "y" * (20_000 + 500 * rounds)}
                           for b in content if b["type"] == "tool_use"]
                assert results, content
                history.append({"role": "user", "content": results})
                rounds += 1

    run_until(RESTART_AT)
    daemon.stop()
    daemon.start()  # the same log: the governed history is rebuilt from it
    run_until(ROUNDS)

    types = daemon.types("session-markers")
    assert not [t for t in types if t.startswith("context.history_reset")], types
    assert any(t.startswith("context.tool_result_spilled") for t in types), types
    assert any(t.startswith("context.compressed") for t in types), types
    calls = forwarded(fake)
    assert len(calls) == ROUNDS == len(sent)
    shorter: list[int] = []  # the calls that forwarded fewer messages than the client sent
    previous: list[dict[str, Any]] | None = None
    for n, (req, mine) in enumerate(zip(calls, sent, strict=True)):
        body = json.loads(req.raw)
        messages = body["messages"]
        _pairing_ok(messages)
        # exactly the client's markers, where the client put them (on the newest message)
        assert count_markers(req.raw) == count_markers(mine) == 2 <= 4
        assert count_markers(json.dumps(messages[-1]).encode()) == 1
        if len(messages) < len(json.loads(mine)["messages"]):
            shorter.append(n)
        if previous is not None and len(previous) < len(messages):
            # Between compressions, the call forwards the last one's messages again (but
            # for the marker the client moved), then the new ones: a compression carries
            # over instead of being made anew from the client's whole history.
            unmarked = [_without_marker(m) for m in messages[:len(previous)]]
            assert unmarked == [_without_marker(m) for m in previous]
        previous = messages
    # compressed calls, and not only the one that compressed: it carried over, and across
    # the restart (rebuilt from the log, summary and marked items included)
    assert len(shorter) >= 2 and shorter[0] < RESTART_AT - 1, shorter
    assert set(range(shorter[0], ROUNDS)) == set(shorter), shorter
    # Replay gives every call's bytes as sent: a message whose marker moved was recorded
    # again with its new bytes, not named by the base call's.
    for n, req in enumerate(calls, start=1):
        capsys.readouterr()
        assert main(["replay", "--db", str(daemon.db), "--session", "markers",
                     "--call", str(n), "--json"]) == 0
        assert req.raw.decode() in capsys.readouterr().out, n


def _without_marker(message: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(message)
    if isinstance(out["content"], list):
        for block in out["content"]:
            block.pop("cache_control", None)
    return out
