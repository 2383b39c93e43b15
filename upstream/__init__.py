"""Upstream I/O: the HTTP client, server-sent events framing, one adapter per wire format.

Beside the actors, above the domain: it may import config, domain, events and the root
modules, never actors or cmd. An adapter (the :class:`Adapter` protocol) knows one
``api_mode``'s shapes both ways; :func:`adapter_for` finds it: ``chat_completions``
(``chat_completions.py``), ``anthropic_messages`` (``anthropic_messages.py``) and
``codex_responses`` (``responses.py``). Each door of the proxy is served by the adapter of
its format; translating between formats would be one more adapter pair, not a change here.
"""

from sessionwarden.upstream.adapter import Adapter
from sessionwarden.upstream.anthropic_messages import AnthropicMessages
from sessionwarden.upstream.chat_completions import ChatCompletions
from sessionwarden.upstream.responses import Responses

__all__ = ["ADAPTERS", "Adapter", "adapter_for"]

#: The adapters by ``api_mode`` (each an :class:`~sessionwarden.upstream.adapter.Adapter`).
ADAPTERS: dict[str, Adapter] = {
    "chat_completions": ChatCompletions(),
    "anthropic_messages": AnthropicMessages(),
    "codex_responses": Responses(),
}


def adapter_for(api_mode: str) -> Adapter | None:
    """The adapter of ``api_mode``, or None when the daemon cannot speak it yet."""
    return ADAPTERS.get(api_mode)
