"""Anthropic's ``usage.server_tool_use`` is flagged, so its counts are kept in the log.

Web searches and fetches are billed per request, and no canonical field holds those counts
yet: the flag makes the call keep the provider's usage block as ``raw_usage``.
"""

import pytest
from sessionwarden.domain.usage.canonical import (
    FLAG_ITERATIONS,
    FLAG_SERVER_TOOL_USE,
    normalise_usage,
)


def test_server_tool_use_with_a_request_is_flagged_and_counts_are_unchanged() -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 10, "output_tokens": 5,
        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0}})
    assert usage.flags == (FLAG_SERVER_TOOL_USE,)
    assert (usage.input_tokens, usage.output_tokens) == (10, 5)


@pytest.mark.parametrize("counts", [
    None, {}, {"web_search_requests": 0}, {"web_search_requests": True},
    {"web_search_requests": "3"}, [1], "x"])
def test_no_request_or_a_malformed_object_is_not_flagged(counts: object) -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 10, "output_tokens": 5, "server_tool_use": counts})
    assert FLAG_SERVER_TOOL_USE not in usage.flags


def test_with_iterations_both_flags_are_kept() -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 1, "output_tokens": 1, "server_tool_use": {"web_search_requests": 1},
        "iterations": [{"type": "message", "input_tokens": 1, "output_tokens": 1}]})
    assert usage.flags == (FLAG_ITERATIONS, FLAG_SERVER_TOOL_USE)
