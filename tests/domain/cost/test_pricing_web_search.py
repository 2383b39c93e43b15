"""Web searches are priced per search, once per call, and never silently at $0."""

from datetime import UTC, datetime
from decimal import Decimal

import msgspec
import pytest
from sessionwarden.config import ConfigError, parse_config
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import Price, PriceLookup, cost
from sessionwarden.domain.usage.canonical import normalise_usage

D = Decimal
NOW = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
BLOCK = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 5000,
         "cache_creation_input_tokens": 100,
         "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 1}}
# claude-sonnet-4-5 in genai-prices: $3 in, $15 out, $0.30 cache read, $3.75 cache write;
# 1200 x 3 + 300 x 15 + 5000 x 0.3 + 100 x 3.75 = 9975 per million = $0.009975
TOKENS = D("0.009975")
CONFIG = """
[[providers]]
name = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_mode = "anthropic_messages"
keys = ["env:ANTHROPIC_API_KEY"]

[[models]]
name = "claude-sonnet-4-5"
provider = "anthropic"
price = { web_search = "0.025" }

[[models]]
name = "house-claude"
provider = "anthropic"
price = { input = "3.00", output = "15.00", cache_read = "0.30", cache_write = "3.75" }
"""


def book() -> PriceBook:
    return PriceBook(parse_config(CONFIG))


def test_three_searches_on_a_library_priced_claude_cost_tokens_and_three_cents() -> None:
    usage = normalise_usage("anthropic_messages", BLOCK)
    assert usage.web_searches == 3 and usage.flags == ()
    lookup = PriceBook(parse_config("")).lookup("anthropic", "claude-sonnet-4-5", at=NOW)
    assert lookup.price is not None and lookup.price.web_search == D("0.01")
    result = cost(usage, lookup)
    assert result.amount == TOKENS + 3 * D("0.01") == D("0.039975")
    assert result.status == "actual" and result.source.startswith("genai-prices@")
    # exact: the same figure without the searches is the tokens alone
    alone = cost(msgspec.structs.replace(usage, web_searches=0), lookup)
    assert alone.amount == TOKENS


def test_a_config_override_prices_the_searches() -> None:
    usage = normalise_usage("anthropic_messages", BLOCK)
    lookup = book().lookup("anthropic", "claude-sonnet-4-5", at=NOW)
    assert lookup.price is not None and lookup.price.web_search == D("0.025")
    assert lookup.price.version.startswith("config+genai-prices@")
    assert cost(usage, lookup).amount == TOKENS + 3 * D("0.025") == D("0.084975")


def test_searches_without_a_price_make_the_cost_unknown() -> None:
    usage = normalise_usage("anthropic_messages", BLOCK)
    # a full override keeps nothing of the library's, its web searches included
    lookup = book().lookup("anthropic", "house-claude", at=NOW)
    result = cost(usage, lookup)
    assert (result.amount, result.status) == (None, "unknown")
    assert result.reason == "no web_search price in override"
    # without searches the same override prices the tokens
    assert cost(msgspec.structs.replace(usage, web_searches=0), lookup).amount == TOKENS


def test_searches_are_added_once_per_call_beside_iterations_and_the_request_fee() -> None:
    usage = normalise_usage("anthropic_messages", {
        "input_tokens": 10, "output_tokens": 10, "server_tool_use": {"web_search_requests": 2},
        "iterations": [{"type": "compaction", "input_tokens": 1000, "output_tokens": 100},
                       {"type": "message", "input_tokens": 10, "output_tokens": 10}]})
    price = Price(source="t", version="1", input=D("1"), output=D("2"),
                  request=D("0.001"), web_search=D("0.01"))
    # (1010 x 1 + 110 x 2) per million + the fee once + 2 searches once
    expected = D("0.00123") + D("0.001") + D("0.02")
    assert cost(usage, PriceLookup(kind="price", price=price)).amount == expected


def test_a_price_without_searches_in_the_usage_needs_no_web_search_price() -> None:
    usage = normalise_usage("anthropic_messages", {"input_tokens": 10, "output_tokens": 10})
    price = Price(source="t", version="1", input=D("1"), output=D("2"))
    assert cost(usage, PriceLookup(kind="price", price=price)).amount == D("0.00003")


def test_the_config_refuses_a_float_or_negative_web_search_price() -> None:
    for bad in ("0.025", '"-1"'):
        text = CONFIG.replace('web_search = "0.025"', f"web_search = {bad}")
        with pytest.raises(ConfigError):
            parse_config(text)
