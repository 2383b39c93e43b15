"""Hostile or malformed requests: a status code, a short JSON error, no traceback, no harm.

One daemon (1 MiB body cap) serves the whole module. Every test ends by checking that it
still serves a normal call and that its stderr shows no traceback; tests of refused
requests also check that nothing was forwarded upstream.
"""

import gzip
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.cmd.daemon_fixtures import (
    MODEL,
    Daemon,
    chat_body,
    module_daemon,
    still_running,
)
from tests.support.fake_provider import FakeProviderServer

CAP_MIB = 1


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, FakeProviderServer]]:
    """The module's fake upstream and daemon, stopped (SIGTERM, else SIGKILL) at the end."""
    with module_daemon(tmp_path_factory.mktemp("security"),
                       extra_config=f"[daemon]\nmax_body_mib = {CAP_MIB}\n") as found:
        yield found


@pytest.fixture
def fake(shared: tuple[Daemon, FakeProviderServer]) -> FakeProviderServer:
    """The shared fake, with its record of requests cleared for this test."""
    shared[1].state.clear()
    return shared[1]


@pytest.fixture
def daemon(shared: tuple[Daemon, FakeProviderServer], fake: FakeProviderServer) -> Iterator[Daemon]:
    """The shared daemon; after the test it must still serve and show no traceback."""
    d = still_running(shared)
    yield d
    assert_still_serving(d)
    err = d.stderr()
    assert "Traceback" not in err and 'File "' not in err, err


def assert_still_serving(daemon: Daemon) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=chat_body("still there?"))
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "ok: still there?"


def assert_error(resp: httpx.Response | tuple[int, bytes], status: int) -> dict[str, Any]:
    """``resp`` has ``status`` and a short OpenAI-style JSON error without a traceback."""
    if isinstance(resp, httpx.Response):
        code, body = resp.status_code, resp.content
        assert resp.headers["content-type"].startswith("application/json")
    else:
        code, body = resp
    assert code == status, body[:500]
    assert len(body) < 1024, body[:500]
    assert b"Traceback" not in body and b'File "' not in body
    payload = json.loads(body)
    assert isinstance(payload, dict) and set(payload) == {"error"}
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]
    return payload


def assert_nothing_forwarded(fake: FakeProviderServer) -> None:
    assert fake.state.counters["total"] == 0, fake.state.snapshot()


def raw_exchange(daemon: Daemon, head: bytes, body_parts: Iterator[bytes]) -> tuple[int, bytes]:
    """Send a request over a bare socket (tolerating an early close); parse the response."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=15) as sock:
        try:
            sock.sendall(head)
            for part in body_parts:
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered and closed before reading everything: fine
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if _complete(data):
                    break
        except ConnectionResetError:
            pass
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line = head_bytes.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 "), data[:300]
    return int(status_line.split()[1]), body


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


# -- authentication and Host -------------------------------------------------------------


@pytest.mark.parametrize("auth", [
    None, "", "Bearer", "Bearer wrong-token", "Basic dXNlcjpwYXNz",
    "Bearer {token}x", "Bearer {token}{token}", "Bearer  {token}", "{token}",
    "Bearer \u00e9\u00e9",
])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
def test_missing_or_wrong_token_is_401(
    daemon: Daemon, fake: FakeProviderServer, auth: str | None, path: str
) -> None:
    headers = {} if auth is None else {
        "Authorization": auth.format(token=daemon.token).encode("utf-8")}
    with httpx.Client(base_url=daemon.url("")) as http:
        if path == "/v1/models":
            resp = http.get(path, headers=headers)
        else:
            resp = http.post(path, json=chat_body(), headers=headers)
    payload = assert_error(resp, 401)
    assert daemon.token not in resp.text
    assert payload["error"]["code"] == "unauthorized"
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("host", [
    "evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil.example",
    "", "[::2]", "127.0.0.1:1@evil.com", "localhost:80@evil.com", "127.0.0.1:80:80",
    "127.0.0.1 evil.com", "127.0.0.1/evil", "localhost:port", "[::1", "::1",
])
def test_foreign_host_header_is_403(daemon: Daemon, fake: FakeProviderServer, host: str) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=chat_body(), headers={"Host": host})
        assert_error(resp, 403)
        assert_error(http.get("/healthz", headers={"Host": host}), 403)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("hosts", [
    ["127.0.0.1", "evil.example"], ["evil.example", "127.0.0.1"], ["127.0.0.1", "127.0.0.1"],
])
def test_more_than_one_host_header_is_403(
    daemon: Daemon, fake: FakeProviderServer, hosts: list[str]
) -> None:
    body = json.dumps(chat_body()).encode()
    head = "".join(f"Host: {h}\r\n" for h in hosts)
    request = (f"POST /v1/chat/completions HTTP/1.1\r\n{head}"
               f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode()
    status, payload = raw_exchange(daemon, request, iter([body]))
    assert status == 403 and json.loads(payload)["error"]["code"] == "host_not_allowed"
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("shape", ["many", "one-long", "long-url"])
def test_a_request_head_over_the_cap_is_431_before_auth(
    daemon: Daemon, fake: FakeProviderServer, shape: str
) -> None:
    # No token: the head is refused before the check that would ask for one.
    if shape == "many":
        head = "".join(f"X-Pad-{i}: {'v' * 1000}\r\n" for i in range(200))
        line = "POST /v1/chat/completions HTTP/1.1"
    elif shape == "one-long":
        head = f"X-Pad: {'v' * (1 << 20)}\r\n"
        line = "POST /v1/chat/completions HTTP/1.1"
    else:
        head = ""
        line = f"GET /v1/models?{'q' * (200 << 10)} HTTP/1.1"
    request = f"{line}\r\nHost: 127.0.0.1\r\n{head}Content-Length: 2\r\n\r\n{{}}".encode()
    status, payload = raw_exchange(daemon, request, iter(()))
    assert status == 431
    assert json.loads(payload)["error"]["code"] == "headers_too_large"
    assert_nothing_forwarded(fake)


def test_a_head_under_the_cap_is_served(daemon: Daemon, fake: FakeProviderServer) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=chat_body(),
                         headers={f"X-Pad-{i}": "v" * 1000 for i in range(40)})
    assert resp.status_code == 200


def test_loopback_host_names_are_accepted(daemon: Daemon) -> None:
    with daemon.http() as http:
        for host in (f"localhost:{daemon.port}", f"127.0.0.1:{daemon.port}", "LOCALHOST",
                     "[::1]", f"[::1]:{daemon.port}", "localhost"):
            assert http.get("/v1/models", headers={"Host": host}).status_code == 200


def test_healthz_needs_no_token(daemon: Daemon) -> None:
    resp = httpx.get(daemon.url("/healthz"))
    assert resp.status_code == 200 and resp.json()["ok"] is True


# -- body size ---------------------------------------------------------------------------


def _big_body(size: int) -> bytes:
    prefix = json.dumps(chat_body()).encode()[:-1] + b', "pad": "'
    return prefix + b"x" * (size - len(prefix) - 2) + b'"}'


def test_body_over_cap_with_content_length_is_413(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = _big_body(2 << 20)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    parts = (body[i:i + 65536] for i in range(0, len(body), 65536))
    payload = assert_error(raw_exchange(daemon, head, parts), 413)
    assert payload["error"]["code"] == "body_too_large"
    assert_nothing_forwarded(fake)


def test_body_over_cap_with_httpx_is_413(daemon: Daemon, fake: FakeProviderServer) -> None:
    with daemon.http() as http:
        try:
            resp = http.post("/v1/chat/completions", content=_big_body(2 << 20),
                             headers={"Content-Type": "application/json"})
        except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
            pytest.skip("the daemon closed the connection before httpx finished sending")
    assert_error(resp, 413)
    assert_nothing_forwarded(fake)


def test_chunked_body_over_cap_is_413(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = _big_body(2 << 20)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 65536):
            part = body[i:i + 65536]
            yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
        yield b"0\r\n\r\n"

    payload = assert_error(raw_exchange(daemon, head, chunks()), 413)
    assert payload["error"]["code"] == "body_too_large"
    assert_nothing_forwarded(fake)


def test_chunked_body_under_cap_is_served(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = json.dumps(chat_body("chunked")).encode()

    def gen() -> Iterator[bytes]:
        yield body[:10]
        yield body[10:]

    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", content=gen(),
                         headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    assert fake.state.last.body["messages"][0]["content"] == "chunked"


def test_bad_content_length_is_400(daemon: Daemon, fake: FakeProviderServer) -> None:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\nContent-Length: -5\r\n"
            "Connection: close\r\n\r\n").encode()
    status, body = raw_exchange(daemon, head, iter(()))
    assert status == 400
    assert b"Traceback" not in body
    assert_nothing_forwarded(fake)


# -- body content ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b"", b"{", b'{"model": ', b"{'model': 'x'}", b'{"model": "gpt-test",}', b"nope",
    b'{"model": "gpt-test", "messages": []} trailing', b"\x00\x01\x02",
    b"[" * 100_000, b'{"a":' * 50_000, b"[" * 100_000 + b"]" * 100_000,
    b'{"model": "\xff\xfe", "messages": []}', b"\xef\xbb\xbf{}", b"\xc3\x28",
    b'{"model": "gpt-test", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
], ids=[
    "empty", "open-brace", "truncated", "single-quotes", "trailing-comma", "bare-word",
    "trailing-garbage", "control-bytes", "deep-arrays", "deep-objects", "deep-closed-arrays",
    "invalid-utf8-in-string", "bom", "invalid-utf8", "surrogate-utf8",
])
def test_malformed_json_is_400(daemon: Daemon, fake: FakeProviderServer, body: bytes) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", content=body,
                         headers={"Content-Type": "application/json"})
    assert_error(resp, 400)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("body", ["[]", '[{"model": "gpt-test"}]', '"gpt-test"', "42", "null",
                                  "true", "1e999"])
def test_json_that_is_not_an_object_is_400(
    daemon: Daemon, fake: FakeProviderServer, body: str
) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", content=body,
                         headers={"Content-Type": "application/json"})
    assert_error(resp, 400)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("model", ["fake/" + "m" * 300, "fake/gpt\x1b[31mred", "fake/a\nb",
                                   "fake/\u202eevil"])
def test_a_model_name_too_long_or_unprintable_is_400_and_not_logged(
    daemon: Daemon, fake: FakeProviderServer, model: str
) -> None:
    # A provider/model name routes to the provider whatever the model part says: before
    # this check, such a name went upstream and into the permanent log.
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json={**chat_body(), "model": model})
    assert assert_error(resp, 400)["error"]["code"] == "invalid_model"
    assert_nothing_forwarded(fake)
    stored = b"".join(p.read_bytes() for p in daemon.db.parent.glob(daemon.db.name + "*"))
    assert b"fake/" in stored  # the check looks where the calls are
    assert model[5:].encode() not in stored


@pytest.mark.parametrize("model", [None, 123, 1.5, True, ["gpt-test"], {"name": "gpt-test"}, ""])
def test_non_string_model_is_400(daemon: Daemon, fake: FakeProviderServer, model: Any) -> None:
    body: dict[str, Any] = chat_body()
    body["model"] = model
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=body)
    assert_error(resp, 400)
    assert_nothing_forwarded(fake)


def test_model_field_missing_is_400(daemon: Daemon, fake: FakeProviderServer) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json={"messages": []})
    assert_error(resp, 400)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("messages", [None, "hi", {"role": "user"}, 3])
def test_messages_not_a_list_is_400(
    daemon: Daemon, fake: FakeProviderServer, messages: Any
) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
    assert_error(resp, 400)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("session", [
    "x" * 500, "x" * 129, "a b", "", "a/b", "../../etc/passwd", "a\tb", "semi;colon",
    "quote\"d", "<script>", "ünïcode",
])
def test_bad_session_id_is_400(daemon: Daemon, fake: FakeProviderServer, session: str) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=chat_body(),
                         headers=[("X-Session-Id", session.encode("utf-8"))])
    payload = assert_error(resp, 400)
    assert "X-Session-Id" in payload["error"]["message"]
    assert_nothing_forwarded(fake)


def test_good_session_ids_are_accepted(daemon: Daemon) -> None:
    with daemon.http() as http:
        for session in ("x" * 128, "a.b_c:d@e-f", "0"):
            resp = http.post("/v1/chat/completions", json=chat_body(),
                             headers={"X-Session-Id": session})
            assert resp.status_code == 200, (session, resp.text)


# -- routing -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/chat/completions"), ("PUT", "/v1/chat/completions"),
    ("DELETE", "/v1/chat/completions"), ("PATCH", "/v1/chat/completions"),
    ("POST", "/v1/models"), ("DELETE", "/v1/models"),
])
def test_wrong_method_is_405(
    daemon: Daemon, fake: FakeProviderServer, method: str, path: str
) -> None:
    with daemon.http() as http:
        resp = http.request(method, path, json=chat_body() if method != "DELETE" else None)
    assert_error(resp, 405)
    assert_nothing_forwarded(fake)


@pytest.mark.parametrize("path", [
    "/v1", "/v1/", "/v1/nope", "/v1/chat/completions/extra", "/v1/completions",
    "/v1/chat/completions/", "/V1/MODELS", "/v1/messages/", "/v1/message",
    "/%2e%2e/etc/passwd",
])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_unknown_path_is_404(
    daemon: Daemon, fake: FakeProviderServer, path: str, method: str
) -> None:
    with daemon.http() as http:
        resp = http.request(method, path, json=chat_body() if method == "POST" else None)
    assert_error(resp, 404)
    assert_nothing_forwarded(fake)


def test_unknown_path_without_token_is_401_not_404(daemon: Daemon) -> None:
    resp = httpx.get(daemon.url("/v1/nope"))
    assert_error(resp, 401)


def test_many_bad_requests_in_a_row(daemon: Daemon, fake: FakeProviderServer) -> None:
    bodies = [b"{", b"[]", b"[" * 100_000, b"\xff", json.dumps({"model": 1}).encode()] * 20
    with daemon.http() as http:
        for body in bodies:
            assert http.post("/v1/chat/completions", content=body).status_code == 400
    assert_nothing_forwarded(fake)


# -- what crosses to and from the upstream ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_upstream_redirect_is_neither_followed_nor_relayed(
    daemon: Daemon, fake: FakeProviderServer, stream: bool
) -> None:
    target = fake.base_url + "/stolen"
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions",
                         json=chat_body(stream=stream, fake={"redirect": target}))
    assert assert_error(resp, 502)["error"]["type"] == "upstream_error"
    assert "location" not in resp.headers and "redirect" in resp.text
    assert [r.path for r in fake.state.snapshot()] == ["/v1/chat/completions"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_compressed_answer_reaches_the_client_readable(
    daemon: Daemon, fake: FakeProviderServer, stream: bool
) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", headers={"Accept-Encoding": "identity"},
                         json=chat_body("zipped", stream=stream,
                                        fake={"gzip": True, "stream_chunks": 1}))
    assert resp.status_code == 200 and "content-encoding" not in resp.headers
    if stream:
        assert b"ok: zipped" in resp.content and resp.content.endswith(b"data: [DONE]\n\n")
    else:
        assert resp.json()["choices"][0]["message"]["content"] == "ok: zipped"
    assert fake.state.last.headers["accept-encoding"] == "identity"


def test_expect_and_the_clients_content_encoding_are_not_forwarded(
    daemon: Daemon, fake: FakeProviderServer
) -> None:
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", json=chat_body(),
                         headers={"Expect": "100-continue", "Content-Encoding": "identity"})
    assert resp.status_code == 200
    sent = fake.state.last.headers
    assert "expect" not in sent and "content-encoding" not in sent


def test_a_compressed_request_body_is_415(daemon: Daemon, fake: FakeProviderServer) -> None:
    body = gzip.compress(json.dumps(chat_body()).encode())
    with daemon.http() as http:
        resp = http.post("/v1/chat/completions", content=body,
                         headers={"Content-Encoding": "gzip",
                                  "Content-Type": "application/json"})
    assert assert_error(resp, 415)["error"]["code"] == "unsupported_encoding"
    assert_nothing_forwarded(fake)


def test_the_root_answers_a_probe_and_nothing_more(daemon: Daemon, fake: FakeProviderServer
                                                   ) -> None:
    # Claude Code sends HEAD / before its first call; the answer says only "ok".
    with daemon.http() as http:
        head, get = http.head("/"), http.get("/")
        post = http.post("/", json=chat_body())
    assert head.status_code == 200 and get.status_code == 200
    assert get.json() == {"ok": True}
    assert_error(post, 404)
    assert_nothing_forwarded(fake)
