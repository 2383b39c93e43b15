import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.redact import (
    MIN_SECRET_LENGTH,
    Redactor,
    default_redactor,
    fingerprint,
    placeholder,
)

SECRET = "hunter2-but-longer-0001"


def test_registered_secret_is_replaced_by_its_fingerprint() -> None:
    redactor = Redactor()
    assert redactor.add(SECRET) == fingerprint(SECRET)
    text = f"key={SECRET} and again {SECRET}!"
    out = redactor.redact(text)
    assert SECRET not in out
    assert out == f"key={placeholder(SECRET)} and again {placeholder(SECRET)}!"
    assert placeholder(SECRET) == f"[REDACTED:{fingerprint(SECRET)}]"
    assert SECRET in redactor and len(redactor) == 1


def test_longest_secret_wins_when_one_contains_another() -> None:
    short, long = "abcdefgh12", "abcdefgh12345678"
    redactor = Redactor([short, long])
    assert redactor.redact(long) == placeholder(long)
    assert redactor.redact(short + "!") == placeholder(short) + "!"


def test_secret_with_regex_metacharacters() -> None:
    secret = "a.b*c+d?(e)[f]|g\\h"
    redactor = Redactor([secret])
    assert redactor.redact(f"<{secret}>") == f"<{placeholder(secret)}>"
    assert redactor.redact("a-b-c-d-e-f-g-h") == "a-b-c-d-e-f-g-h"


def test_short_secrets_are_refused_without_echo() -> None:
    with pytest.raises(ValueError) as info:
        Redactor().add("abc")
    assert "abc" not in str(info.value)
    assert str(MIN_SECRET_LENGTH) in str(info.value)


@pytest.mark.parametrize(
    "token",
    [
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_ABCDEFG-hijk",
        "sk-or-v1-0123456789abcdef0123456789abcdef",
    ],
)
def test_unregistered_api_keys_are_pattern_redacted(token: str) -> None:
    out = Redactor().redact(f'{{"api_key": "{token}"}} in a log line')
    assert token not in out
    assert placeholder(token) in out


def test_bearer_tokens_keep_scheme() -> None:
    out = Redactor().redact("Authorization: Bearer abc.DEF-123_xyz~+/=")
    assert out == "Authorization: Bearer " + placeholder("abc.DEF-123_xyz~+/=")


@pytest.mark.parametrize(
    "text",
    [
        "x-api-key: 0123456789abcdef0123",
        "https://example.test/v1?api_key=0123456789abcdef0123&x=1",
        "API-KEY = '0123456789abcdef0123'",
    ],
)
def test_key_value_patterns(text: str) -> None:
    out = Redactor().redact(text)
    assert "0123456789abcdef0123" not in out
    assert placeholder("0123456789abcdef0123") in out


@pytest.mark.parametrize(
    "text",
    [
        "task-management-is-fine-here",
        "the desk-0123456789abcdefghij stays",
        "sk-short",
        "Bearer x",
        "a bearer of news",
        "plain text with no secrets",
        "",
    ],
)
def test_innocent_text_is_unchanged(text: str) -> None:
    assert Redactor().redact(text) == text


def test_redaction_is_idempotent() -> None:
    redactor = Redactor([SECRET])
    once = redactor.redact(f"Bearer {SECRET} sk-{'a' * 30}")
    assert redactor.redact(once) == once


def test_redact_bytes() -> None:
    redactor = Redactor([SECRET, "ünïcødé-secret"])
    data = f"{SECRET} ünïcødé-secret sk-{'b' * 20} \xff".encode("utf-8", "surrogateescape")
    data += b"\xfe invalid utf-8 Bearer tok_0123456789"
    out = redactor.redact_bytes(data)
    assert SECRET.encode() not in out
    assert "ünïcødé-secret".encode() not in out
    assert b"sk-bbbb" not in out and b"tok_0123456789" not in out
    assert placeholder(SECRET).encode() in out
    assert placeholder("ünïcødé-secret").encode() in out
    assert b"\xfe invalid" in out
    assert out.decode("utf-8", "replace").count("[REDACTED:fp:") == 4


def test_text_and_bytes_agree() -> None:
    redactor = Redactor([SECRET])
    text = f"a {SECRET} Bearer abcdefghijk sk-{'z' * 20} api_key=0123456789abcdef0123 b"
    assert redactor.redact_bytes(text.encode()) == redactor.redact(text).encode()


def test_default_instance_exists() -> None:
    assert isinstance(default_redactor, Redactor)


def test_concurrent_adds_are_all_kept() -> None:
    redactor = Redactor()
    secrets = [f"secret-value-{i:04d}" for i in range(64)]

    def add(chunk: list[str]) -> None:
        for secret in chunk:
            redactor.add(secret)

    threads = [threading.Thread(target=add, args=(secrets[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(redactor) == 64
    assert all(s not in redactor.redact(" ".join(secrets)) for s in secrets)


def test_linear_time_on_large_hostile_input() -> None:
    redactor = Redactor([SECRET, "another-secret-42"])
    for chunk in ("sk-" * 10, "Bearer " * 3, "api_key=" * 3, "a" * 30, "sk-a" * 5):
        text = chunk * (2_000_000 // len(chunk))
        start = time.perf_counter()
        redactor.redact(text)
        assert time.perf_counter() - start < 2.0, chunk


def test_short_strings_are_fast() -> None:
    redactor = Redactor([f"secret-value-{i:04d}" for i in range(20)])
    start = time.perf_counter()
    for _ in range(10_000):
        redactor.redact("GET /v1/models 200 OK in 3 ms")
    assert time.perf_counter() - start < 1.0


KEY_CHARS = st.characters(categories=("Lu", "Ll", "Nd"), include_characters="-_.")


@given(st.text(), st.text(KEY_CHARS, min_size=MIN_SECRET_LENGTH, max_size=64))
def test_property_registered_secret_never_survives(prefix: str, secret: str) -> None:
    redactor = Redactor([secret])
    out = redactor.redact(prefix + secret + prefix)
    assert secret not in out or secret in placeholder(secret)


def test_the_escape_aware_pattern_is_built_only_when_bytes_hold_a_secret() -> None:
    # Each add makes a new snapshot; building the escape-aware pattern for every one made
    # adding n keys quadratic (64 keys: over a second). It waits for a probe that finds one.
    redactor = Redactor([f"secret-value-{i:04d}" for i in range(8)])
    assert redactor.redact_bytes(b'{"content": "nothing to hide"}') == (
        b'{"content": "nothing to hide"}')
    assert redactor._compiled._bytes_re is None
    escaped = b'{"echo": "\\u0073ecret-value-0003"}'
    assert redactor.redact_bytes(escaped) == (
        b'{"echo": "' + placeholder("secret-value-0003").encode() + b'"}')
    assert redactor._compiled._bytes_re is not None
    redactor.add("secret-value-0100")  # a new snapshot starts without it again
    assert redactor._compiled._bytes_re is None
    assert b"secret-value-0100" not in redactor.redact_bytes(b"\\u0073ecret-value-0100")
