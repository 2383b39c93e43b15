"""Turns, seen from a proxy: where a turn starts, its key, and the daemon's own text.

Issue 25: a turn is everything since the newest *real* user message of the history a
client sends, each call within it an iteration; budgets and guardrail counters reset on
a new turn. The daemon's own notices start with :data:`NOTICE_MARKER`. Pure: histories
in, marks out.

Rules:

* A *real* user message (:func:`is_real_user_message`): role ``user``, no tool results,
  and at least one non-blank :class:`Text` part the daemon did not write. A user message
  carrying tool results *and* text is the agent loop going on (Anthropic clients put
  reminders next to their ``tool_result`` blocks), not a new request. Daemon text starts
  with :data:`NOTICE_MARKER`, the summary's ``SUMMARY_START``, or a spill or truncation
  stand-in's opening; a user message whose only text is such is not real.
* :func:`turn_key`: SHA-256 of the opening message's user-written text parts, framing
  and daemon text left out, so the same message re-serialised keeps its key. Compression
  keeps the newest request verbatim (``domain.context.boundaries``: the tail always holds
  it), so a compressed history keeps the key; its index may drop, never grow.
* Which call opens a new turn, and which is a resend, the runaway stage decides from the
  items it has not seen yet (``domain.admission.runaway_stage``).
"""

import hashlib
from collections.abc import Sequence

from sessionwarden.domain.context.messages import Message, Text, ToolResult
from sessionwarden.domain.context.spill import TRUNCATION_MARKER
from sessionwarden.domain.context.summary import SUMMARY_START

__all__ = [
    "DAEMON_PREFIXES",
    "NOTICE_MARKER",
    "SPILL_NOTE",
    "is_daemon_text",
    "is_real_user_message",
    "runtime_notice",
    "turn_key",
    "turn_start",
]

#: The prefix of every notice the daemon adds to a forwarded request or answers with.
NOTICE_MARKER = "[sessionwarden runtime notice"
#: How a spilled result's stand-in starts (``domain.context.spill.spill_note``).
SPILL_NOTE = "[sessionwarden saved this tool result"
#: How text the daemon wrote starts: notices, summaries, spill and truncation stand-ins,
#: the compression note.
DAEMON_PREFIXES: tuple[str, ...] = (
    NOTICE_MARKER, SUMMARY_START, TRUNCATION_MARKER, SPILL_NOTE,
    "[sessionwarden compressed",
)


def runtime_notice(title: str, body: str) -> str:
    """A notice in the daemon's marked form: ``[sessionwarden runtime notice: title …]``.

    The marker line says the text is the runtime's, not the user's, so a model does not
    take it for a request (Hermes's budget marker does the same).
    """
    return f"{NOTICE_MARKER}: {title} — from the proxy, not from the user]\n{body}"


def is_daemon_text(text: str) -> bool:
    """Whether ``text`` is something the daemon wrote (:data:`DAEMON_PREFIXES`)."""
    return text.lstrip().startswith(DAEMON_PREFIXES)


def _user_texts(message: Message) -> list[str]:
    return [part.text for part in message.parts
            if isinstance(part, Text) and part.text.strip() and not is_daemon_text(part.text)]


def is_real_user_message(message: Message) -> bool:
    """Whether ``message`` is a request the user wrote (module doc)."""
    if message.role != "user":
        return False
    if any(isinstance(part, ToolResult) for part in message.parts):
        return False
    return bool(_user_texts(message))


def turn_start(messages: Sequence[Message]) -> int | None:
    """The index of the newest real user message, or None when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if is_real_user_message(messages[index]):
            return index
    return None


def turn_key(message: Message) -> str:
    """A stable identity of a turn's opening message: its user-written text, hashed."""
    digest = hashlib.sha256(b"sessionwarden.turn.v1")
    for text in _user_texts(message):
        encoded = text.encode()
        # length-prefixed: ["ab", "c"] and ["a", "bc"] are different messages
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return digest.hexdigest()
