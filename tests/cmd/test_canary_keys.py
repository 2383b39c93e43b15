"""Canary keys: the provider keys' values appear in no output, response, log or file.

The daemon runs with two random canary keys — one shaped like an OpenAI key, one that no
redaction pattern recognises — and serves normal, streaming and failing calls, including
upstream errors that echo the Authorization header back. Everything a user or operator
could see is collected and searched for the keys (and fragments of them).
"""

import json
import secrets
import shutil
from pathlib import Path

import httpx
import pytest

from tests.cmd.daemon_fixtures import MODEL, Daemon, DaemonFactory, chat_body
from tests.support.fake_provider import FakeProviderServer


def _canaries() -> dict[str, str]:
    return {
        "FAKE_KEY_A": "sk-canary-" + secrets.token_hex(12),
        "FAKE_KEY_B": "canaryB" + secrets.token_hex(12),  # matches no redaction pattern
    }


def _needles(keys: dict[str, str]) -> list[bytes]:
    """Each key, and fragments long enough not to occur by chance."""
    out: list[bytes] = []
    for key in keys.values():
        tail = key[-24:]  # the random part
        out += [key.encode(), tail.encode(), tail[:12].encode(), tail[12:].encode()]
    return out


class Collector:
    """Bytes from everywhere, each labelled by where it came from."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def add(self, label: str, data: bytes | str) -> None:
        self.items.append((label, data.encode() if isinstance(data, str) else data))

    def response(self, label: str, resp: httpx.Response) -> None:
        head = b"".join(k + b": " + v + b"\n" for k, v in resp.headers.raw)
        self.add(f"{label} (status {resp.status_code})", head + b"\n" + resp.content)

    def files(self, label: str, directory: Path) -> None:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            self.add(f"{label}: {path.name}", path.read_bytes())

    def leaks(self, needles: list[bytes]) -> list[str]:
        return [f"{label} contains {needle[:6]!r}…"
                for label, data in self.items for needle in needles if needle in data]


def _traffic(daemon: Daemon, seen: Collector, run: str) -> None:
    """Normal, streaming and failing calls; every response is collected."""
    bodies = [
        ("plain", chat_body("plain call")),
        ("plain-missing-usage", chat_body("no usage", fake={"usage": "missing"})),
        ("stream", chat_body("stream call", stream=True)),
        ("stream-usage", chat_body("stream with usage", stream=True,
                                   stream_options={"include_usage": True})),
        ("unknown-model", {**chat_body(), "model": "nope"}),
        ("malformed", None),
    ]
    for status in (401, 403, 429, 500, 503):
        bodies.append((f"echo-{status}", chat_body(fake={"status": status, "echo_key": True})))
        bodies.append((f"echo-stream-{status}",
                       chat_body(stream=True, fake={"status": status, "echo_key": True})))
    bodies.append(("echo-header", chat_body()))
    # First, while every key is usable: the 401s, 403s and 429s below bench them.
    with daemon.openai(session=f"canary-sdk-{run}") as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "sdk"}])
        seen.response(f"{run} sdk", raw.http_response)
    with daemon.http() as http:
        for label, body in bodies:
            headers = {"X-Session-Id": f"canary-{run}"}
            if label == "echo-header":
                headers |= {"x-fake-status": "401", "x-fake-echo-key": "true"}
            if body is None:
                resp = http.post("/v1/chat/completions", content=b"{", headers=headers)
            else:
                resp = http.post("/v1/chat/completions", json=body, headers=headers)
            seen.response(f"{run} {label}", resp)
            if label.startswith("echo"):
                # Relayed from the upstream, or refused by the daemon once a 401/403/429
                # benched both keys: either way an error, and never a key in it.
                benched = b'"code":"keys_benched"' in resp.content \
                    or b'"code":"no_usable_key"' in resp.content
                assert resp.status_code >= 400
                assert benched or b"Incorrect API key" in resp.content
        seen.response(f"{run} models", http.get("/v1/models"))
        seen.response(f"{run} healthz", http.get("/healthz"))
        with http.stream("POST", "/v1/chat/completions",
                         json=chat_body(stream=True, fake={"stream_chunks": 30,
                                                           "chunk_delay_ms": 20})) as resp:
            first = next(resp.iter_raw())
        seen.add(f"{run} disconnected stream", first)


_EVERY_FORM = (("events", "--json"), ("events",), ("replay", "--verify", "--json"),
               ("replay", "--verify"), ("replay",))


def _cli(daemon: Daemon, seen: Collector, run: str,
         forms: tuple[tuple[str, ...], ...] = (("events", "--json"),)) -> None:
    """The log as the CLI shows it. While the daemon runs, one form is enough: the log
    only grows, so the final run's every form covers what the earlier ones would print."""
    for args in forms:
        result = daemon.cli(*args)
        seen.add(f"{run} `{' '.join(args)}` stdout", result.stdout)
        seen.add(f"{run} `{' '.join(args)}` stderr", result.stderr)


def test_canary_keys_never_leak(
    daemon_factory: DaemonFactory, fake: FakeProviderServer, tmp_path: Path
) -> None:
    keys = _canaries()
    seen = Collector()
    db_dir = tmp_path / "db"

    # Run 1: text logs at DEBUG; stopped with SIGTERM.
    first = daemon_factory(keys=keys, args=["--log-level", "DEBUG"], name="text").start()
    _traffic(first, seen, "text")
    _cli(first, seen, "text")
    seen.files("db dir while running (text)", db_dir)
    assert first.stop() == 0
    # The keys the errors benched (401: dead), listed and reset by hand, daemon stopped.
    _cli(first, seen, "keys", (("keys", "list"), ("keys", "list", "--json"),
                                ("breaker", "list")))
    listed = json.loads(first.cli("keys", "list", "--json").stdout)
    for key in listed:
        seen.add("keys reset", first.cli("keys", "reset", "fake", key["fingerprint"]).stdout)

    # Run 2: JSON logs, same database; killed with SIGKILL so the WAL stays behind.
    second = daemon_factory(keys=keys, args=["--log-json", "--log-level", "DEBUG"],
                            db=first.db, name="json").start()
    _traffic(second, seen, "json")
    _cli(second, seen, "json")
    seen.files("db dir while running (json)", db_dir)
    second.kill()
    wal = db_dir / "events.db-wal"
    assert wal.exists() and wal.stat().st_size > 0
    seen.files("db dir after kill -9", db_dir)
    shutil.copytree(db_dir, tmp_path / "db-after-kill")  # keep for the post-mortem

    # Run 3: recovers the killed log, then stops cleanly (TRUNCATE checkpoint).
    third = daemon_factory(keys=keys, db=first.db, name="recover").start()
    _cli(third, seen, "recover")
    assert third.stop() == 0
    seen.files("db dir after clean stop", db_dir)
    _cli(third, seen, "stopped", _EVERY_FORM)

    for daemon in (first, second, third):
        for path in daemon.outputs():
            seen.add(f"daemon output {path.parent.name}/{path.name}", path.read_bytes())

    # Sanity: the fake really received the keys, and the collection is not empty.
    authorizations = {r.headers.get("authorization") for r in fake.state.snapshot()}
    assert {f"Bearer {k}" for k in keys.values()} <= authorizations
    assert any(b"session.call_completed.v4" in data for _, data in seen.items)
    assert any(b"REDACTED" in data for _, data in seen.items)
    assert any(b'"level"' in data or b'"record"' in data for label, data in seen.items
               if "json-" in label and label.endswith(".err"))

    leaks = seen.leaks(_needles(keys))
    assert not leaks, "\n".join(leaks)


@pytest.mark.parametrize("status", [401, 500])
def test_error_bodies_name_the_key_by_fingerprint(
    daemon_factory: DaemonFactory, status: int
) -> None:
    from sessionwarden.redact import fingerprint

    keys = _canaries()
    daemon = daemon_factory(keys=keys, strategy="fill_first").start()
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions",
                         json=chat_body(fake={"status": status, "echo_key": True}))
    assert resp.status_code == status
    # A 401 is the key's own failure: it failed over, and B's answer was relayed.
    relayed = keys["FAKE_KEY_B" if status == 401 else "FAKE_KEY_A"]
    assert fingerprint(relayed) in resp.text
    assert keys["FAKE_KEY_A"] not in resp.text and keys["FAKE_KEY_B"] not in resp.text


def test_an_upstream_echoing_the_key_in_a_good_answer_never_gets_it_to_the_client(
    daemon_factory: DaemonFactory, fake: FakeProviderServer
) -> None:
    # The echo writes the key's first character as a JSON \u escape, as a serialiser that
    # escapes freely would; the headers carry it raw and as a Bearer. A stream's echo is
    # in one event (stream_chunks=1): a key spread over several deltas is not caught.
    keys = _canaries()
    daemon = daemon_factory(keys=keys).start()
    seen = Collector()
    echo = {"echo_key_ok": True, "echo_key_header": True, "stream_chunks": 1}
    with daemon.http() as http:
        for i in range(4):  # round robin: both keys, twice
            resp = http.post("/v1/chat/completions", json=chat_body(f"plain {i}", fake=echo))
            assert resp.status_code == 200 and "your key is" in resp.json()[
                "choices"][0]["message"]["content"]
            seen.response(f"plain {i}", resp)
            resp = http.post("/v1/chat/completions",
                             json=chat_body(f"stream {i}", stream=True, fake=echo))
            assert resp.status_code == 200 and b"[DONE]" in resp.content
            seen.response(f"stream {i}", resp)
    sent = {r.headers.get("authorization") for r in fake.state.snapshot()}
    assert {f"Bearer {k}" for k in keys.values()} <= sent
    assert b"REDACTED" in b"".join(data for _, data in seen.items)
    needles = _needles(keys)
    escaped = [b"\\u%04x" % ord(k[0]) + k[1:].encode() for k in keys.values()]
    leaks = seen.leaks(needles + escaped)
    assert not leaks, "\n".join(leaks)
