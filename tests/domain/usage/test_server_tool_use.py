"""Anthropic's ``usage.server_tool_use``: web searches counted, other fees flagged.

``web_search_requests`` becomes ``web_searches`` (priced per search); web fetches cost only
their tokens and are neither kept nor flagged; another server tool's positive count, or
junk where a count belongs, sets the flag that keeps the provider's block in the log.
"""

import pytest
from sessionwarden.domain.usage.canonical import (
    FLAG_ITERATIONS,
    FLAG_SERVER_TOOL_USE,
    CanonicalUsage,
    normalise_usage,
)


def anthropic(counts: object, **more: object) -> CanonicalUsage:
    return normalise_usage("anthropic_messages", {
        "input_tokens": 10, "output_tokens": 5, "server_tool_use": counts, **more})


def test_web_searches_are_counted_and_not_flagged() -> None:
    usage = anthropic({"web_search_requests": 3, "web_fetch_requests": 2})
    assert (usage.web_searches, usage.flags) == (3, ())
    assert (usage.input_tokens, usage.output_tokens) == (10, 5)


@pytest.mark.parametrize("counts", [
    None, {}, {"web_search_requests": 0}, {"web_fetch_requests": 4},
    {"web_search_requests": None}, {"web_fetch_requests": "x"}, {"other_requests": 0}])
def test_no_priced_request_and_nothing_unpriced_is_zero_and_unflagged(counts: object) -> None:
    usage = anthropic(counts)
    assert (usage.web_searches, usage.flags) == (0, ())


@pytest.mark.parametrize("counts", [
    {"web_search_requests": True}, {"web_search_requests": "3"},
    {"web_search_requests": -1}, {"web_search_requests": 2.5},
    {"web_search_requests": 10**12}, [1], "x", 3])
def test_junk_is_ignored_and_flagged(counts: object) -> None:
    usage = anthropic(counts)
    assert (usage.web_searches, usage.flags) == (0, (FLAG_SERVER_TOOL_USE,))
    assert (usage.input_tokens, usage.output_tokens) == (10, 5)  # the rest is still read


def test_an_unpriced_server_tool_is_flagged_beside_the_priced_searches() -> None:
    usage = anthropic({"web_search_requests": 2, "code_execution_requests": 1})
    assert (usage.web_searches, usage.flags) == (2, (FLAG_SERVER_TOOL_USE,))


def test_searches_are_counted_once_at_the_call_level_with_iterations() -> None:
    usage = anthropic({"web_search_requests": 1}, iterations=[
        {"type": "message", "input_tokens": 1, "output_tokens": 1,
         "server_tool_use": {"web_search_requests": 5}},
        {"type": "message", "input_tokens": 2, "output_tokens": 2}])
    assert usage.flags == (FLAG_ITERATIONS,)
    assert usage.web_searches == 1
    assert [part.web_searches for part in usage.billed_parts] == [0, 0]


def test_the_responses_shape_reads_the_same_key() -> None:
    usage = normalise_usage("codex_responses", {
        "input_tokens": 10, "output_tokens": 5,
        "server_tool_use": {"web_search_requests": 2}})
    assert (usage.web_searches, usage.flags) == (2, ())
    junk = normalise_usage("codex_responses", {
        "input_tokens": 10, "output_tokens": 5, "server_tool_use": {"web_search_requests": -2}})
    assert (junk.web_searches, junk.flags) == (0, (FLAG_SERVER_TOOL_USE,))


def test_a_negative_count_is_refused_on_direct_construction() -> None:
    with pytest.raises(ValueError, match="web_searches"):
        CanonicalUsage(source="provider", web_searches=-1)
