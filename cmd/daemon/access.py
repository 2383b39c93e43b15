"""The access log: one line per HTTP request, written once its response has ended.

:func:`access_logged` wraps a request: it notes the status the app sends, and at the end
logs one line, whose text is also the JSON log's ``message``::

    POST /v1/chat/completions 200 41.2ms session=s1 model=gpt-4.1-mini provider=openai
        call=q3xz… tokens=812+64                    (one line; wrapped here)
    POST /v1/chat/completions 401 0.2ms error="missing or wrong bearer token"

What the app learns while it serves the request reaches the entry through a context
variable (each request is its own task): a proxied call notes itself (:func:`note_call`),
its completion brings the tokens as recorded in the ledger (:func:`note_completion`:
prompt tokens, cache reads and writes included, ``+`` output tokens, ``~`` before them
when estimated), and an error the daemon answers itself brings its one-line message
(:func:`note_error`). An upstream's own error body is never logged (it may quote the
prompt): its line says ``outcome=upstream_error``. Nothing of a request's body, its query
string or its headers is logged; client-chosen text (the path) is escaped and bounded.

Levels: WARNING for 401, 403, 413 and every 5xx (someone is knocking without the token,
from a foreign page, with a huge body — or something is broken); DEBUG for a ``/healthz``
that answered 200 (monitors poll it); INFO for everything else.
"""

import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from loguru import logger
from sessionwarden.events import CallCompleted
from sessionwarden.text import printable

__all__ = ["AccessEntry", "access_logged", "note_call", "note_completion", "note_error"]

_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Statuses that get a WARNING line (besides every 5xx).
_LOUD = frozenset({401, 403, 413})
_MAX_TEXT = 200

_current: ContextVar["AccessEntry | None"] = ContextVar("sessionwarden_access", default=None)


def _safe(text: str) -> str:
    """``text`` bounded, with control characters escaped: one log line stays one line."""
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - 1] + "…"
    return printable(text)


class AccessEntry:
    """What the access line of one request says, filled in while it is served."""

    __slots__ = ("call_id", "completed", "error", "method", "model", "path", "provider",
                 "session", "started", "status")

    def __init__(self, method: str, path: str) -> None:
        """A request for ``path`` has just arrived."""
        self.started = time.perf_counter()
        self.method = _safe(method)
        self.path = _safe(path)
        self.status = 0
        self.error = ""
        self.call_id = self.session = self.model = self.provider = ""
        self.completed: CallCompleted | None = None

    def line(self) -> tuple[str, str, dict[str, Any]]:
        """The level, the text and the fields of the line (latency measured now)."""
        latency = (time.perf_counter() - self.started) * 1000
        status = self.status
        fields: dict[str, Any] = {"method": self.method, "path": self.path,
                                  "status": status or None, "latency_ms": round(latency, 1)}
        text = f"{self.method} {self.path} {status or '-'} {latency:.1f}ms"
        if self.call_id:
            fields |= {"session": self.session, "model": self.model,
                       "provider": self.provider, "call_id": self.call_id}
            text += (f" session={self.session} model={self.model}"
                     f" provider={self.provider} call={self.call_id}")
        done = self.completed
        if done is not None:
            fields |= {"outcome": done.outcome, "usage_source": done.source,
                       "input_tokens": done.input_tokens,
                       "cache_read_tokens": done.cache_read_tokens,
                       "cache_write_tokens": done.cache_write_tokens,
                       "output_tokens": done.output_tokens}
            if done.source != "missing":
                prompt = done.input_tokens + done.cache_read_tokens + done.cache_write_tokens
                mark = "~" if done.source == "estimated" else ""
                text += f" tokens={mark}{prompt}+{done.output_tokens}"
            if done.outcome != "ok":
                text += f" outcome={done.outcome}"
        if self.error:
            fields["error"] = self.error
            text += ' error="' + self.error.replace('"', "'") + '"'
        if status in _LOUD or status >= 500:
            level = "WARNING"
        elif status == 200 and self.path == "/healthz":
            level = "DEBUG"
        else:
            level = "INFO"
        return level, text, fields


@contextmanager
def access_logged(scope: MutableMapping[str, Any], send: _Send) -> Iterator[_Send]:
    """Serve one HTTP request inside: yields the ``send`` to use; logs the line at the end."""
    entry = AccessEntry(scope.get("method", ""), scope.get("path", ""))

    async def watched(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            entry.status = message["status"]
        await send(message)

    token = _current.set(entry)
    try:
        yield watched
    finally:
        _current.reset(token)
        level, text, fields = entry.line()
        # The text is passed as an argument, never as the format: a path with braces in
        # it must not be taken for a template. The keyword arguments become the record's
        # fields (loguru adds them to ``extra``).
        logger.log(level, "{}", text, **fields)


def note_call(call_id: str, session: str, provider: str, model: str) -> None:
    """The request being served is proxied call ``call_id``."""
    entry = _current.get()
    if entry is not None:
        entry.call_id, entry.session = call_id, session
        entry.provider, entry.model = provider, _safe(model)


def note_completion(completed: CallCompleted) -> None:
    """The call of the request being served was recorded as ``completed``."""
    entry = _current.get()
    if entry is not None:
        entry.completed = completed


def note_error(message: str) -> None:
    """The daemon answers the request being served with an error saying ``message``."""
    entry = _current.get()
    if entry is not None:
        entry.error = _safe(message)
