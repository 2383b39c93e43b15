"""The daemon's log records: redaction of the message and every text field, flat JSON.

Through loguru itself (a patched logger and a sink of the test's own), without touching
the process-wide configuration other tests log through.
"""

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger
from sessionwarden.cmd.daemon.logs import json_line, redact_record
from sessionwarden.redact import default_redactor, fingerprint


@pytest.fixture
def lines() -> Iterator[list[str]]:
    """JSON lines of every record logged through the patched logger, at any level."""
    seen: list[str] = []
    sink = logger.add(lambda message: seen.append(json_line(message.record)), level=0,
                      filter=lambda record: record["extra"].get("test_logs") is True)
    try:
        yield seen
    finally:
        logger.remove(sink)


def _log(message: str, **fields: Any) -> None:
    logger.patch(redact_record).log("INFO", "{}", message, test_logs=True, **fields)


def test_a_registered_key_in_the_message_or_any_field_is_replaced_by_its_fingerprint(
    lines: list[str],
) -> None:
    key = "unpatterned" + secrets.token_hex(12)
    default_redactor.add(key)
    _log(f"upstream said {key}", path=f"/v1/{key}", status=401, note="nothing here")
    (line,) = lines
    assert key not in line
    record = json.loads(line)
    assert record["message"] == f"upstream said [REDACTED:{fingerprint(key)}]"
    assert record["path"] == f"/v1/[REDACTED:{fingerprint(key)}]"
    assert (record["status"], record["note"]) == (401, "nothing here")


def test_a_clean_record_is_one_flat_object_with_its_fields_unchanged(
    lines: list[str],
) -> None:
    _log("GET /v1/models 200 0.2ms", method="GET", latency_ms=0.2, level="spoofed",
         session=None)
    (line,) = lines
    record = json.loads(line)
    assert list(record) == ["time", "level", "message", "test_logs", "method", "latency_ms",
                            "session"]  # a field named like a reserved key is dropped
    assert record["level"] == "INFO" and record["time"].endswith("Z")
    assert (record["message"], record["method"], record["latency_ms"], record["session"]) == (
        "GET /v1/models 200 0.2ms", "GET", 0.2, None)
