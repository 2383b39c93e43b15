"""The daemon's own prompts to a model: a plain request out, the answer's text back.

The model summariser (``cmd/daemon/summarise.py``) asks an upstream model for a summary on the
daemon's behalf: a system text and one user prompt, not streamed. This module builds
that request and reads its answer for the wire formats that can carry it — only
``chat_completions`` today; the Anthropic Messages and Responses formats add theirs with
their adapters. Unlike a client's call, nothing here is relayed: the answer's text is
all the daemon wants, with its usage block for the ledger.
"""

from typing import Any

import msgspec
from sessionwarden.upstream.errors import MalformedResponse

__all__ = ["PATH", "prompt_body", "read_answer", "supports"]

#: Where a chat-completions prompt is POSTed, under the provider's ``base_url``.
PATH = "/chat/completions"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def supports(api_mode: str) -> bool:
    """Whether the daemon can send its own prompts in ``api_mode``."""
    return api_mode == "chat_completions"


def prompt_body(model: str, system: str, prompt: str, max_tokens: int = 0) -> bytes:
    """A plain (non-streamed) chat-completions request: ``system`` then the ``prompt``.

    ``max_tokens`` caps the answer when positive; 0 sends no cap (the provider's own
    limit applies), which is what the summariser uses (``domain.context.summariser``).
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "system", "content": system},
                     {"role": "user", "content": prompt}],
        "stream": False,
    }
    if max_tokens > 0:
        body["max_tokens"] = max_tokens
    return _encode(body)


def _text(content: object) -> str:
    """A message's content as text: a string, or the text parts of a list, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def read_answer(body: bytes) -> tuple[str, object]:
    """The first choice's text and the usage block (None when absent) of a plain answer.

    A choice without text (a refusal, a tool call, ``content: null``) reads as ``""``.

    Raises:
        MalformedResponse: not JSON, not an object, or no first choice with a message.
    """
    try:
        decoded = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        raise MalformedResponse("the upstream's answer is not JSON") from None
    if not isinstance(decoded, dict):
        raise MalformedResponse("the upstream's answer is not a JSON object")
    choices = decoded.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("the upstream's answer has no choice")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("the upstream's answer has no message")
    return _text(message.get("content")), decoded.get("usage")
