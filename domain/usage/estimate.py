"""Our estimate of a request's tokens, for when the provider reports none or lies.

Characters / 4, rounded up (hermes-behaviour.md §0: ``CHARS_PER_TOKEN = 4``), over the
text a model reads or writes only: images, tool schemas and unknown keys are not
counted, and a message is never stringified whole (Hermes's older estimate was
``sum(len(str(m)))//4``, counting keys and punctuation). ``sessionwarden.domain.usage.canonical``
re-exports these names; :func:`~sessionwarden.domain.usage.canonical.estimate_usage` builds on them.
"""

from collections.abc import Mapping

__all__ = ["estimate_tokens", "text_chars", "tokens_from_chars"]

# Keys whose values carry text a model reads or writes: message and part ``content`` /
# ``text``, tool-call ``arguments``, Responses ``input`` / ``output`` / ``instructions``,
# Anthropic ``system`` / ``thinking``, and whole request bodies (``messages``).
_TEXT_KEYS = (
    "messages",
    "input",
    "instructions",
    "system",
    "content",
    "text",
    "thinking",
    "refusal",
    "reasoning_content",
    "tool_calls",
    "function",
    "arguments",
    "output",
)
_MAX_DEPTH = 32


def text_chars(messages: object) -> int:
    """Count the characters of every text value reachable through :data:`_TEXT_KEYS`."""
    total = 0
    stack: list[tuple[object, int]] = [(messages, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            total += len(node)
        elif depth >= _MAX_DEPTH:
            continue
        elif isinstance(node, list | tuple):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, Mapping):
            for key in _TEXT_KEYS:
                value = node.get(key)
                if value is not None:
                    stack.append((value, depth + 1))
    return total


def tokens_from_chars(chars: int) -> int:
    """Our estimate of the tokens in ``chars`` characters of text: chars / 4, rounded up."""
    return (max(chars, 0) + 3) // 4


def estimate_tokens(messages: object) -> int:
    """Estimate the tokens of ``messages`` as characters / 4, rounded up, at least 1.

    Accepts a string, a list of chat messages (``content`` as a string or a list of
    content parts), Responses ``input`` items, or a whole request body. Images, tool
    schemas and unknown keys are not counted. Never raises.
    """
    return max(1, (text_chars(messages) + 3) // 4)
