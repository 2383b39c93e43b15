"""Logging for the daemon: loguru sinks, with every secret redacted in every sink.

Readable lines on a terminal, or, with ``--log-json``, one flat JSON object per line:
``{"time": "<ISO 8601, UTC>", "level": "INFO", "message": "...", <fields>}``, where the
fields are the record's bound ``extra`` values (the access log's method, path, status,
…; see ``sessionwarden.cmd.daemon.access``). Loguru's own serialisation nests everything under
``record`` and ``text``; a log shipper wants the flat shape, so the JSON sink is ours.

A patcher runs the redactor over each record's message and extra fields before any sink
sees it, so a key that reaches a log call by accident (an upstream error echoing it, say)
is replaced by its fingerprint. Tracebacks are never rendered with variable values
(``diagnose=False``). Standard-library logging (uvicorn, pykka) is routed into loguru so
it is redacted too.
"""

import json
import logging
import sys
from datetime import UTC
from typing import Any

from loguru import logger
from sessionwarden.redact import default_redactor

__all__ = ["json_line", "redact_record", "setup_logging"]

#: The keys every JSON line starts with; a field of the same name cannot replace them.
_RESERVED = frozenset({"time", "level", "message"})


def redact_record(record: Any) -> None:
    """Loguru patcher: scrub secrets from a record's message, text fields and exception."""
    extra = record["extra"]
    texts = [record["message"], *(v for v in extra.values() if isinstance(v, str))]
    # One pass over all the record's text finds whether anything needs scrubbing (the
    # rare case): "\0" is in no secret and no pattern, so no match spans two texts, and
    # each redaction has a fixed cost an access line's dozen fields would pay each.
    joined = "\0".join(texts)
    if default_redactor.redact(joined) != joined:
        record["message"] = default_redactor.redact(record["message"])
        for key, value in extra.items():
            if isinstance(value, str):
                extra[key] = default_redactor.redact(value)
    if record["exception"] is not None:
        # Keep the type and a redacted message; drop the traceback object itself.
        exc_type, exc, _ = record["exception"]
        record["message"] += f" ({exc_type.__name__ if exc_type else 'error'}: " \
            f"{default_redactor.redact(str(exc))})"
        record["exception"] = None


def json_line(record: Any) -> str:
    """One loguru record as a flat JSON object (no newline): time, level, message, fields."""
    time = record["time"].astimezone(UTC).isoformat(timespec="milliseconds")
    line: dict[str, Any] = {
        "time": time.replace("+00:00", "Z"),
        "level": record["level"].name,
        "message": record["message"],
    }
    for key, value in record["extra"].items():
        if key not in _RESERVED:
            line[key] = value
    # default=str: a field of a type JSON lacks is written as its text, never dropped.
    return json.dumps(line, ensure_ascii=False, default=str)


def _json_sink(message: Any) -> None:
    sys.stderr.write(json_line(message.record) + "\n")
    sys.stderr.flush()


class _Intercept(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6).log(level, record.getMessage())


def setup_logging(*, json: bool = False, level: str = "INFO") -> None:
    """Configure loguru for the daemon (call once, in the entry point)."""
    logger.remove()
    logger.configure(patcher=redact_record)
    if json:
        logger.add(_json_sink, level=level, format="{message}", backtrace=False,
                   diagnose=False)
    else:
        logger.add(
            sys.stderr, level=level, backtrace=False, diagnose=False,
            format="<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {message}",
        )
    logging.basicConfig(handlers=[_Intercept()], level=logging.WARNING, force=True)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "pykka"):
        logging.getLogger(name).handlers = [_Intercept()]
        logging.getLogger(name).propagate = False
