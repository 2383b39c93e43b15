"""Issue 21, items 9-11, through a real daemon: no secret at rest, a bounded spill directory.

9. A provider key inside a spilled tool result never reaches ``spill/<sha>.txt``: the
   result is scrubbed before it is named and written, and the stand-in says so.
10. A compaction's ``focus`` holding a key is refused (400), so it is neither stored nor
    echoed (the 202, ``GET /v1/sessions/{id}``, the log).
11. The spill directory is bounded by ``[tools] spill_max_mib``: the least recently
    referenced files are evicted, each eviction an event; a stand-in whose file was
    evicted says so at the next call; a file at a hash name is reused only when it holds
    those very bytes.

The daemon is the in-process one (``tests/cmd/inprocess.py``); its key B is plain
(``plain…``), so only its registration finds it, never a pattern.
"""

import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.main import main
from sessionwarden.domain.spill import REDACTED_NOTE
from sessionwarden.events import CODEC, CallAdmitted, ToolResultSpilled

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import history, lines, turn, upstream
from tests.support.fake_provider import FakeProviderServer


def _daemon(tmp_path: Path, fake: FakeProviderServer, extra: str = "") -> InProcessDaemon:
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra)
    # A key no redaction pattern recognises: only the pool's registration can find it.
    daemon.keys["FAKE_KEY_B"] = "plain" + secrets.token_hex(12)
    return daemon


@pytest.fixture
def daemon(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    started = _daemon(tmp_path, fake)
    try:
        yield started.start()
    finally:
        started.stop()


def _events(daemon: InProcessDaemon, stream: str) -> list[Any]:
    return [CODEC.decode(e.type, e.data) for e in daemon.runtime.log.read_stream(stream)]


def _at_rest(tmp_path: Path) -> bytes:
    """Every byte the daemon keeps on disk: the log, its WAL, the spill files."""
    return b"".join(path.read_bytes() for path in sorted(tmp_path.rglob("*"))
                    if path.is_file() and (path.name.startswith("events.db")
                                           or path.parent.name == "spill"))


def _spill_path(stand_in: str) -> Path:
    return Path(stand_in.split("Full output: ", 1)[1].split("\n", 1)[0])


# -- item 9: no key in a spill file --------------------------------------------------------


def test_a_key_in_a_spilled_result_is_scrubbed_from_the_file_and_the_stand_in(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    key, shaped = daemon.keys["FAKE_KEY_B"], "sk-proj-" + secrets.token_hex(16)
    # One key past the preview (the stand-in alone would hold none), one inside it.
    late = lines(600) + f"FAKE_KEY_B={key}\nOPENAI_API_KEY={shaped}\n" + lines(900)
    early = f"$ env\nFAKE_KEY_B={key}\n" + lines(1500)
    with daemon.openai(session="leaky-spill") as client:
        client.chat.completions.create(model=MODEL, messages=history(turn(
            [("call_1", "terminal", late), ("call_2", "terminal", early)])))  # type: ignore[arg-type]
    sent = {m["tool_call_id"]: m["content"] for m in upstream(fake)[0].body["messages"]
            if m["role"] == "tool"}
    for stand_in in sent.values():
        assert REDACTED_NOTE in stand_in and key not in stand_in
        path = _spill_path(stand_in)
        data = path.read_bytes()
        assert key.encode() not in data and shaped.encode() not in data
        assert b"[REDACTED:fp:" in data
        # The name is the hash of what the file holds: the scrubbed text.
        assert path.name == hashlib.sha256(data).hexdigest() + ".txt"
    assert "[REDACTED:fp:" in sent["call_2"]  # the preview is the scrubbed text's
    for path in (tmp_path / "spill").iterdir():
        assert key.encode() not in path.read_bytes()
    spilled = [e for e in _events(daemon, "session-leaky-spill")
               if isinstance(e, ToolResultSpilled)]
    assert len(spilled) == 2 and not any(e.truncated for e in spilled)
    # The stand-ins hold no key, so the log stores them: replay is whole and byte-exact.
    [record] = [e.request for e in _events(daemon, "session-leaky-spill")
                if isinstance(e, CallAdmitted)]
    assert record is not None and record.withheld == ()
    assert key.encode() not in _at_rest(tmp_path)
    assert main(["replay", "--db", str(daemon.db), "--verify"]) == 0
    capsys.readouterr()
    assert main(["replay", "--db", str(daemon.db), "--session", "leaky-spill", "--call", "1",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["request"] == json.loads(upstream(fake)[0].raw)
    assert upstream(fake)[0].raw in out.encode() and key not in out


def test_a_resent_spill_after_a_restart_finds_the_same_scrubbed_file(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    first = _daemon(tmp_path, fake)
    key = first.keys["FAKE_KEY_B"]
    messages = history(turn([("call_1", "terminal", lines(700) + key + "\n" + lines(800))]))
    first.start()
    try:
        with first.openai(session="again") as client:
            client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    finally:
        first.stop()
    second = InProcessDaemon(tmp_path / "events.db", fake)
    second.keys = first.keys  # the same keys, registered again at start
    second.start()
    try:
        with second.openai(session="again") as client:
            client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    finally:
        second.stop()
    one, two = (r.body["messages"][-1]["content"] for r in upstream(fake))
    assert one == two and REDACTED_NOTE in one  # byte-identical: the cache keeps hitting
    assert [p.name for p in (tmp_path / "spill").iterdir()] == [_spill_path(one).name]
    assert key.encode() not in _at_rest(tmp_path)


# -- item 10: no key in a compaction's focus ----------------------------------------------


def test_a_focus_holding_a_key_is_refused_never_stored_nor_echoed(
    daemon: InProcessDaemon, tmp_path: Path
) -> None:
    key = daemon.keys["FAKE_KEY_B"]
    with daemon.openai(session="focused") as client:
        client.chat.completions.create(model=MODEL, messages=history())  # type: ignore[arg-type]
    shaped = "sk-ant-api03-" + secrets.token_hex(20)
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}", timeout=30.0,
                      headers={"Authorization": f"Bearer {daemon.token}"}) as http:
        for focus in (f"the auth module, key {key}", f"rotate {shaped}",
                      f"Bearer {secrets.token_hex(12)}", f"api_key={secrets.token_hex(12)}"):
            reply = http.post("/v1/sessions/focused/compact", json={"focus": focus})
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["code"] == "invalid_focus"
            assert focus not in reply.text and key not in reply.text
        status = http.get("/v1/sessions/focused")
        assert status.status_code == 200 and status.json()["pending_compaction"] is None
        assert key not in status.text and shaped not in status.text
        # A plain focus is still taken, and echoed.
        fine = http.post("/v1/sessions/focused/compact", json={"focus": "the auth module"})
        assert fine.status_code == 202 and fine.json()["focus"] == "the auth module"
    assert [e.focus for e in _events(daemon, "session-focused")
            if type(e).__name__ == "CompactionRequested"] == ["the auth module"]
    at_rest = _at_rest(tmp_path)
    assert key.encode() not in at_rest and shaped.encode() not in at_rest
