"""The proxy's front doors: which path speaks which wire format, and what a call there is.

A *door* is where a client comes in: ``/v1/chat/completions`` (OpenAI chat completions),
``/v1/messages`` (Anthropic Messages: Claude Code), ``/v1/responses`` (OpenAI Responses:
Codex, the OpenAI Agents SDK), and the side endpoints of the last two. The door's adapter
reads the client's request and shapes its errors; the call then reaches a provider of
the same ``api_mode`` (no translation between formats yet: a mismatch is refused with
both named, ``relay._arrive``).

The side endpoints are forwarded as they are, never governed, and metered as side calls
of the session (``purpose``): ``/v1/messages/count_tokens`` is free (recorded with zero
usage: Anthropic does not bill it), ``/v1/responses/compact`` is billed by its own usage
and held by the spend caps like any call.
"""

from dataclasses import dataclass

from sessionwarden.upstream import adapter_for
from sessionwarden.upstream.adapter import Adapter

__all__ = ["COUNT_TOKENS", "Door", "doors"]

#: The purpose of a token count forwarded for a client (free: metered with zero usage).
COUNT_TOKENS = "count_tokens"


@dataclass(frozen=True, slots=True)
class Door:
    """One path clients post to.

    Attributes:
        path: the path (``/v1/messages``).
        adapter: the wire format it speaks: it reads the request and shapes the errors.
        endpoint: what is appended to the adapter's upstream path (``/count_tokens``).
        purpose: "" for a governed call; a side call's purpose otherwise.
        forward_query: the client's query string goes upstream with the request
            (Claude Code posts to ``/v1/messages?beta=true``, which Anthropic reads).
    """

    path: str
    adapter: Adapter
    endpoint: str = ""
    purpose: str = ""
    forward_query: bool = False


def doors() -> dict[str, Door]:
    """Every door of the wire formats the daemon speaks, by path."""
    found: dict[str, Door] = {}
    chat = adapter_for("chat_completions")
    if chat is not None:
        found["/v1/chat/completions"] = Door("/v1/chat/completions", chat)
    anthropic = adapter_for("anthropic_messages")
    if anthropic is not None:
        found["/v1/messages"] = Door("/v1/messages", anthropic, forward_query=True)
        found["/v1/messages/count_tokens"] = Door(
            "/v1/messages/count_tokens", anthropic, "/count_tokens", COUNT_TOKENS,
            forward_query=True)
    responses = adapter_for("codex_responses")
    if responses is not None:
        found["/v1/responses"] = Door("/v1/responses", responses, forward_query=True)
        found["/v1/responses/compact"] = Door(
            "/v1/responses/compact", responses, "/compact", "compact", forward_query=True)
    return found
