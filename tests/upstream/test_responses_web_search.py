"""Responses web searches: each ``web_search_call`` output item is counted into the usage.

Responses bills a search per ``web_search_call`` item and reports none in ``usage``; the
adapter adds ``server_tool_use.web_search_requests`` to the block it hands over (plain and
streamed), which the domain reads as it reads Anthropic's, and pricing adds the fees.
"""

import json
from decimal import Decimal
from typing import Any

import pytest
from sessionwarden.domain.cost.pricing import Price, PriceLookup, cost
from sessionwarden.domain.usage.canonical import normalise_usage
from sessionwarden.upstream.responses import Responses
from sessionwarden.upstream.responses_stream import with_web_searches

WIRE = Responses()
USAGE = {"input_tokens": 1000, "output_tokens": 200,
         "input_tokens_details": {"cached_tokens": 400}}
SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed",
          "action": {"type": "search", "query": "weather"}}
OUTPUT = [SEARCH, {**SEARCH, "id": "ws_2"},
          {"type": "message", "id": "msg_1", "role": "assistant",
           "content": [{"type": "output_text", "text": "sunny", "annotations": []}]}]
RESPONSE = {"id": "resp_1", "object": "response", "status": "completed",
            "output": OUTPUT, "usage": USAGE}
GPT = Price(source="test", version="1", input=Decimal("2"), output=Decimal("8"),
            cache_read=Decimal("0.5"), web_search=Decimal("0.01"))
# 600 x 2 + 400 x 0.5 + 200 x 8 = 3000 per million, plus 2 searches at $0.01
EXPECTED = Decimal("0.003") + Decimal("0.02")


def event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_a_plain_response_counts_its_web_search_calls() -> None:
    facts = WIRE.read_response(json.dumps(RESPONSE).encode())
    assert facts.usage_block == {**USAGE, "server_tool_use": {"web_search_requests": 2}}
    usage = normalise_usage("codex_responses", facts.usage_block)
    assert (usage.web_searches, usage.input_tokens, usage.cache_read_tokens) == (2, 600, 400)
    assert usage.flags == ()
    assert cost(usage, PriceLookup(kind="price", price=GPT)).amount == EXPECTED


def test_a_streamed_response_counts_the_web_search_calls_of_its_final_response() -> None:
    stream = WIRE.stream(False)
    stream.feed(event("response.created", response={"id": "resp_1", "output": []})
                + event("response.output_item.done", item=SEARCH)
                + event("response.output_item.done", item={**SEARCH, "id": "ws_2"})
                + event("response.output_text.delta", delta="sunny")
                + event("response.completed", response=RESPONSE))
    assert stream.done
    assert stream.usage_block == {**USAGE, "server_tool_use": {"web_search_requests": 2}}
    usage = normalise_usage("codex_responses", stream.usage_block)
    assert usage.web_searches == 2
    assert cost(usage, PriceLookup(kind="price", price=GPT)).amount == EXPECTED


def test_no_search_adds_nothing_and_the_providers_block_is_not_changed() -> None:
    plain = {**RESPONSE, "output": OUTPUT[2:]}
    assert WIRE.read_response(json.dumps(plain).encode()).usage_block == USAGE
    given = dict(USAGE)
    assert with_web_searches(given, OUTPUT) is not given and given == USAGE


@pytest.mark.parametrize(("usage", "output"), [
    (None, OUTPUT), ([1], OUTPUT), ("x", OUTPUT), (USAGE, None), (USAGE, {"a": 1}),
    (USAGE, [1, "web_search_call", {"type": "web_search"}]),
])
def test_what_is_not_a_usage_object_and_searches_is_left_as_it_is(usage: object,
                                                                   output: object) -> None:
    assert with_web_searches(usage, output) is usage


def test_searches_without_a_web_search_price_make_the_cost_unknown() -> None:
    usage = normalise_usage("codex_responses", with_web_searches(USAGE, OUTPUT))
    unpriced = Price(source="test", version="1", input=Decimal("2"), output=Decimal("8"))
    result = cost(usage, PriceLookup(kind="price", price=unpriced))
    assert (result.amount, result.status) == (None, "unknown")
    assert result.reason == "no web_search price in test"
