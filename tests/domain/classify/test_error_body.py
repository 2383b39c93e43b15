import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify.error_body import MAX_TEXT_CHARS, read_error_body

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
EPOCH = int(NOW.timestamp())


# ------------------------------------------------------------------ resets in fields


@pytest.mark.parametrize(("field", "value", "seconds"), [
    ("reset_at", EPOCH + 600, 600.0),                                  # epoch seconds
    ("resets_at", (EPOCH + 90) * 1000, 90.0),                         # epoch milliseconds
    ("retry_until", (NOW + timedelta(minutes=5)).isoformat(), 300.0),  # ISO 8601
    ("reset_at", "2026-01-15T13:00:00Z", 3600.0),                      # ISO 8601, Z
    ("reset_at", format_datetime(NOW + timedelta(seconds=45), usegmt=True), 45.0),  # HTTP-date
    ("reset_at", str(EPOCH + 30), 30.0),                               # epoch as text
    ("resets_in_seconds", 7200, 7200.0),
    ("retry_after", "1m30s", 90.0),                                    # OpenAI duration
    ("retryDelay", "22s", 22.0),                                       # Gemini RetryInfo
    ("quotaResetDelay", "500ms", 0.5),
])
def test_reset_fields(field: str, value: object, seconds: float) -> None:
    body = read_error_body({"error": {"message": "limited", field: value}}, NOW)
    assert body.reset_seconds == pytest.approx(seconds)
    assert body.reset_source == f"body field {field.lower()}"


@pytest.mark.parametrize("value", [0, -5, EPOCH - 60, "soon", True, None, "9" * 80, 1e300])
def test_unusable_reset_fields_are_ignored(value: object) -> None:
    assert read_error_body({"reset_at": value, "retry_after": value}, NOW).reset_seconds is None


# ------------------------------------------------------------------ resets in words


@pytest.mark.parametrize(("message", "seconds"), [
    ("Usage limit reached. Resets in 2hr 5min.", 7500.0),
    ("Your limit resets in 6hr 29min", 23340.0),
    ("Rate limit hit; resets in 45min", 2700.0),
    ("Quota exceeded, resets in 3hr", 10800.0),
    ("Please try again in 1m30s.", 90.0),
    ("Please try again in 120ms.", 0.12),
    ("Please try again in 20.106s.", 20.106),
    ("Please retry in 10.689924287s.", 10.689924287),
    ("retry after 30 seconds", 30.0),
    ("please retry after 2 minutes and 5 seconds", 125.0),
    ("quotaResetDelay: 900ms", 0.9),
    ("You will regain access on 2026-02-01 at 00:00 UTC.", 16 * 86400 + 12 * 3600.0),
    ("limit resets at 2026-01-15T12:10:00Z", 600.0),
])
def test_reset_phrases(message: str, seconds: float) -> None:
    body = read_error_body(json.dumps({"error": {"message": message}}).encode(), NOW)
    assert body.reset_seconds == pytest.approx(seconds)
    assert body.reset_source == "body phrase"


def test_a_field_reset_wins_over_a_phrase() -> None:
    body = read_error_body({"message": "try again in 5s", "resets_in_seconds": 60}, NOW)
    assert body.reset_seconds == 60.0


def test_past_or_absurd_phrase_resets_are_ignored() -> None:
    for message in ("regain access on 2020-01-01 at 00:00 UTC", "try again in 0s",
                    "regain access on 2026-13-45", "resets in 99999999hr"):
        assert read_error_body(message.encode(), NOW).reset_seconds is None, message


# ------------------------------------------------------------------ text and codes


def test_text_holds_every_message_but_no_identifiers_or_links() -> None:
    body = read_error_body({
        "error": {"message": "Rate-Limit   reached", "type": "tokens", "param": "max_tokens",
                  "code": "rate_limit_exceeded"},
        "request_id": "req_should_not_matter",
        "details": [{"@type": "type.googleapis.com/x", "url": "https://x/rate-limits"}],
    }, NOW)
    assert "rate limit reached" in body.text
    assert "max tokens" not in body.text
    assert "req should not matter" not in body.text
    assert "googleapis" not in body.text
    assert body.codes == ("tokens", "rate limit exceeded")


def test_openrouter_raw_upstream_json_is_read_too() -> None:
    inner = json.dumps({"error": {"message": "This model's maximum context length is 8192",
                                  "code": "context_length_exceeded"}})
    body = read_error_body({"error": {"code": 400, "message": "Provider returned error",
                                      "metadata": {"raw": inner, "provider_name": "X"}}}, NOW)
    assert "maximum context length" in body.text
    assert "context length exceeded" in body.codes


def test_sse_error_event_is_decoded() -> None:
    raw = (b"event: error\n"
           b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
           b"\n\n")
    body = read_error_body(raw, NOW)
    assert "overloaded" in body.text
    assert "overloaded error" in body.codes


@pytest.mark.parametrize("raw", [
    b'{"error": {"message": "Rate limit exc',   # truncated JSON
    b"<html><title>429 Too Many Requests</title></html>",
    "plain text, with ünïcode".encode(),
    b"\xff\xfe\x00garbage",
])
def test_non_json_bodies_are_read_as_text(raw: bytes) -> None:
    body = read_error_body(raw, NOW)
    assert body.text == " ".join(
        raw.decode("utf-8", "replace").lower().replace("_", " ").replace("-", " ").split())
    assert body.codes == ()


def test_text_is_capped() -> None:
    body = read_error_body({"a": "x" * 100_000, "b": ["y " * 50_000]}, NOW)
    assert len(body.text) <= MAX_TEXT_CHARS
    assert len(read_error_body(b"z" * 10_000_000, NOW).text) <= MAX_TEXT_CHARS


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000) | st.text(max_size=2000))
def test_never_raises_on_arbitrary_bytes(raw: bytes | str) -> None:
    body = read_error_body(raw, NOW)
    assert len(body.text) <= MAX_TEXT_CHARS
    assert body.reset_seconds is None or body.reset_seconds > 0
