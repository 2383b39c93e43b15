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
import os
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sessionwarden.cmd.cli.main import main
from sessionwarden.domain.context.spill import REDACTED_NOTE
from sessionwarden.events import CODEC, CallAdmitted, ToolResultSpilled

from tests.cmd.daemon_fixtures import MODEL
from tests.cmd.inprocess import InProcessDaemon
from tests.cmd.test_context_e2e import history, lines, turn, upstream
from tests.support.fake_provider import FakeProviderServer


def _daemon(tmp_path: Path, fake: FakeProviderServer, extra: str = "") -> InProcessDaemon:
    daemon = InProcessDaemon(tmp_path / "events.db", fake, extra_config=extra,
                             max_body_bytes=4 << 20)
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


# -- item 11: a bounded spill directory ----------------------------------------------------

#: 1 MiB: nine results of 110,000 characters fit, the tenth evicts.
QUOTA = "[tools]\nspill_max_mib = 1\n"
MIB = 1024 * 1024


@pytest.fixture
def bounded(tmp_path: Path, fake: FakeProviderServer) -> Iterator[InProcessDaemon]:
    started = _daemon(tmp_path, fake, QUOTA)
    try:
        yield started.start()
    finally:
        started.stop()


def _result(tag: str) -> str:
    """110,000 distinct characters: over gpt-test's 76,800, so spilled."""
    return f"{tag}\n" + lines(1100)[len(tag) + 1:]


def _spill(daemon: InProcessDaemon, fake: FakeProviderServer, session: str,
           content: str) -> str:
    """One call of ``session`` whose tool result is ``content``; the stand-in sent."""
    with daemon.openai(session=session) as client:
        client.chat.completions.create(model=MODEL, messages=history(
            turn([("call_1", "terminal", content)])))  # type: ignore[arg-type]
    return str(upstream(fake)[-1].body["messages"][-1]["content"])


def _evictions(daemon: InProcessDaemon) -> list[Any]:
    return [e for e in _events(daemon, "spill") if type(e).__name__ == "SpillEvicted"]


def _dir_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "spill").iterdir())


def test_the_spill_directory_stays_under_its_quota_least_recently_referenced_out(
    bounded: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    names = [_spill_path(_spill(bounded, fake, f"s{i}", _result(f"r{i}"))).name for i in range(9)]
    assert _evictions(bounded) == [] and _dir_bytes(tmp_path) <= MIB
    # r0 is spilled again by another session: referenced, so r1 is now the oldest.
    assert _spill_path(_spill(bounded, fake, "again", _result("r0"))).name == names[0]
    for i in range(9, 14):
        _spill(bounded, fake, f"s{i}", _result(f"r{i}"))
        assert _dir_bytes(tmp_path) <= MIB
    evicted = _evictions(bounded)
    assert [e.file for e in evicted] == names[1:6]
    assert {(e.bytes, e.reason, e.quota_bytes) for e in evicted} == {(110_000, "quota", MIB)}
    left = {p.name for p in (tmp_path / "spill").iterdir()}
    assert names[0] in left and not left & set(names[1:6])
    assert main(["replay", "--db", str(bounded.db), "--verify"]) == 0


def test_a_stand_in_whose_file_was_evicted_says_so_at_the_next_call(
    bounded: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    first = history(turn([("call_1", "terminal", _result("victim"))]))
    with bounded.openai(session="victim") as client:
        client.chat.completions.create(model=MODEL, messages=first)  # type: ignore[arg-type]
    stand_in = upstream(fake)[-1].body["messages"][-1]["content"]
    path = _spill_path(stand_in)
    for i in range(9):  # the tenth file of 110,000 bytes evicts the oldest: the victim's
        _spill(bounded, fake, f"filler{i}", _result(f"f{i}"))
    assert not path.exists() and [e.file for e in _evictions(bounded)] == [path.name]
    second = [*first, {"role": "assistant", "content": "Long log."},
              {"role": "user", "content": "What failed?"}]
    with bounded.openai(session="victim") as client:
        reply = client.chat.completions.create(model=MODEL, messages=second)  # type: ignore[arg-type]
    assert reply.choices[0].message.content
    said = upstream(fake)[-1].body["messages"][len(first) - 1]["content"]
    assert "Full output:" not in said and f"Evicted: the file {path} was deleted" in said
    assert "run the tool again" in said
    assert said.split("Preview (", 1)[1] == stand_in.split("Preview (", 1)[1]
    # The call after forwards that new stand-in unchanged: the prefix is stable again.
    third = [*second, {"role": "assistant", "content": "A test."},
             {"role": "user", "content": "Fix it."}]
    with bounded.openai(session="victim") as client:
        client.chat.completions.create(model=MODEL, messages=third)  # type: ignore[arg-type]
    two, three = upstream(fake)[-2:]
    assert three.raw.startswith(two.raw[: two.raw.rindex(b'],"model":')] + b",")
    assert main(["replay", "--db", str(bounded.db), "--verify"]) == 0
    calls = [r for r in upstream(fake) if b"victim" in r.raw]
    for number, request in enumerate(calls, 1):
        capsys.readouterr()
        assert main(["replay", "--db", str(bounded.db), "--session", "victim", "--call",
                     str(number), "--json"]) == 0
        assert request.raw in capsys.readouterr().out.encode()


def test_a_result_larger_than_the_quota_is_truncated_inline_and_the_call_goes_on(
    bounded: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    huge = lines(11_000)  # 1.1 MB, over the 1 MiB quota on its own
    with bounded.openai(session="huge") as client:
        reply = client.chat.completions.create(model=MODEL, messages=history(
            turn([("call_1", "terminal", huge)])))  # type: ignore[arg-type]
    assert reply.choices[0].message.content
    sent = upstream(fake)[-1].body["messages"][-1]["content"]
    assert "the full output could not be saved" in sent
    [event] = [e for e in _events(bounded, "session-huge") if isinstance(e, ToolResultSpilled)]
    assert event.truncated and "spill quota" in event.error
    assert not (tmp_path / "spill").exists() or _dir_bytes(tmp_path) == 0
    assert _evictions(bounded) == []


def _plant(directory: Path, content: bytes, mtime: int) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / (hashlib.sha256(content).hexdigest() + ".txt")
    path.write_bytes(content)
    path.chmod(0o600)
    os.utime(path, ns=(mtime, mtime))
    return path


def test_a_directory_over_its_quota_at_start_is_brought_under_it(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    # Written under a larger setting: twelve files of 100,000 bytes, the oldest first.
    planted = [_plant(tmp_path / "spill", f"{i:06d}".encode() * 16_667, 10**18 + i * 10**9)
               for i in range(12)]
    daemon = _daemon(tmp_path, fake, QUOTA).start()
    try:
        evicted = _evictions(daemon)
        with daemon.openai(session="after") as client:  # and it serves
            client.chat.completions.create(model=MODEL, messages=history())  # type: ignore[arg-type]
    finally:
        daemon.stop()
    assert [e.file for e in evicted] == [p.name for p in planted[:2]]
    assert {e.reason for e in evicted} == {"quota_at_start"}
    assert [p.exists() for p in planted] == [False] * 2 + [True] * 10
    assert _dir_bytes(tmp_path) <= MIB


def test_a_file_at_a_hash_name_is_reused_only_when_it_holds_those_bytes(
    daemon: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    content = _result("tampered")
    path = _spill_path(_spill(daemon, fake, "one", content))
    good = path.read_bytes()
    # Same size, other bytes: an edit the size check alone let through.
    path.write_bytes(b"#" * len(good))
    assert _spill_path(_spill(daemon, fake, "two", content)) == path
    assert path.read_bytes() == good
    # Truncated, and a planted symlink: rewritten as well.
    path.write_bytes(good[:100])
    _spill(daemon, fake, "three", content)
    assert path.read_bytes() == good
    path.unlink()
    (tmp_path / "elsewhere.txt").write_bytes(good)
    path.symlink_to(tmp_path / "elsewhere.txt")
    _spill(daemon, fake, "four", content)
    assert not path.is_symlink() and path.read_bytes() == good


def test_parallel_spills_from_one_client_keep_the_directory_under_its_quota(
    bounded: InProcessDaemon, fake: FakeProviderServer, tmp_path: Path
) -> None:
    # The red team's flood, scaled to the 1 MiB quota: 40 distinct 110 KB results, 8 at once.
    def one(i: int) -> None:
        with bounded.openai(session=f"flood{i}") as client:
            client.chat.completions.create(model=MODEL, messages=history(
                turn([("call_1", "terminal", _result(f"flood{i}"))])))  # type: ignore[arg-type]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(40)))
    files = {p.name: p.stat().st_size for p in (tmp_path / "spill").iterdir()}
    assert sum(files.values()) <= MIB and len(files) == 9
    evicted = [e.file for e in _evictions(bounded)]
    assert len(evicted) == len(set(evicted)) == 31 and not set(evicted) & set(files)
    assert bounded.runtime.spills.quota.used == sum(files.values())
    assert httpx.get(f"http://127.0.0.1:{bounded.port}/healthz").status_code == 200
    assert main(["replay", "--db", str(bounded.db), "--verify"]) == 0
