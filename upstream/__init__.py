"""Upstream I/O: the HTTP client, server-sent events framing, one adapter per wire format.

Beside the actors, above the domain: it may import config, domain, events and the root
modules, never actors or cmd. An adapter (the :class:`Adapter` protocol) knows one
``api_mode``'s shapes both ways; :func:`adapter_for` finds it. Only ``chat_completions``
exists today; ``anthropic_messages`` and ``codex_responses`` arrive with their issue, as
``anthropic_messages.py`` and ``responses.py`` beside ``chat_completions.py``.
"""

from sessionwarden.upstream.adapter import Adapter
from sessionwarden.upstream.chat_completions import ChatCompletions

__all__ = ["ADAPTERS", "Adapter", "adapter_for"]

#: The adapters by ``api_mode`` (each an :class:`~sessionwarden.upstream.adapter.Adapter`).
ADAPTERS: dict[str, Adapter] = {"chat_completions": ChatCompletions()}


def adapter_for(api_mode: str) -> Adapter | None:
    """The adapter of ``api_mode``, or None when the daemon cannot speak it yet."""
    return ADAPTERS.get(api_mode)
