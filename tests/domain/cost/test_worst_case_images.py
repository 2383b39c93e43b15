"""Media parts in the worst case (issue 21 §7): each image reserves a bounded figure.

200 ``image_url`` parts used to reserve $0 of input (chars / 4 reads no image) and were
billed ~765 tokens each; now each media part counts ``MEDIA_PART_TOKENS``.
"""

from decimal import Decimal

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.cost.pricing import Price, PriceLookup
from sessionwarden.domain.cost.worst_case import (
    MEDIA_PART_TOKENS,
    call_worst_case,
    media_parts,
    media_tokens,
    prompt_chars,
    prompt_tokens,
)
from sessionwarden.domain.usage.estimate import tokens_from_chars

IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


def item(message: object) -> bytes:
    return msgspec.json.encode(message)


def test_the_bound_covers_every_documented_per_image_maximum() -> None:
    # OpenAI tiles at high detail (85 + 170 x 8), its patch models (1,536 x 2.46),
    # Anthropic (~1,600), Hermes's estimate (6,400 chars / 4).
    assert max(85 + 170 * 8, int(1536 * 2.46) + 1, 1600) <= MEDIA_PART_TOKENS


def test_each_media_part_counts_once_wherever_it_is() -> None:
    assert media_parts({"role": "user", "content": "just text"}) == 0
    assert media_parts({"role": "user", "content": [{"type": "text", "text": "hi"}]}) == 0
    assert media_parts({"role": "user", "content": [IMAGE, IMAGE, {"type": "text"}]}) == 2
    # Audio and files on chat; Responses and Anthropic spellings; inside a tool result.
    assert media_parts({"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f1"}},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
        {"type": "image", "source": {"type": "base64", "data": "AAAA"}},
        {"type": "tool_result", "content": [{"type": "document", "source": {}}]},
    ]}) == 5
    # A part's own data is not searched: one image whose url object says "image".
    assert media_parts({"type": "image_url", "image_url": {"type": "image"}}) == 1


def test_nesting_hides_no_part() -> None:
    deep: object = IMAGE
    for _ in range(500):
        deep = [deep]
    assert media_parts({"role": "user", "content": deep}) == 1


def test_two_hundred_images_reserve_their_cost() -> None:
    items = [item({"role": "user", "content": [IMAGE] * 200})]
    assert prompt_chars(items, {}) == 0  # what the estimate saw before
    assert prompt_tokens(items, {}) == 200 * MEDIA_PART_TOKENS
    assert media_tokens(items) == 200 * MEDIA_PART_TOKENS
    # At $10 a million input tokens (~765 each billed: $1.53), the worst case holds them.
    lookup = PriceLookup(kind="price", price=Price(
        source="override", version="config", input=Decimal(10), output=Decimal(10)))
    worst = call_worst_case(lookup, prompt_tokens(items, {}), 0)
    assert worst is not None and worst >= Decimal("1.53")


@given(st.lists(st.text(max_size=50), max_size=5), st.integers(0, 5))
def test_text_is_counted_as_before_and_each_part_on_top(texts: list[str], images: int) -> None:
    content = [{"type": "text", "text": t} for t in texts] + [IMAGE] * images
    items = [item({"role": "user", "content": content}), b"{not json"]
    fields = {"tools": [{"type": "function", "function": {"name": "f"}}]}
    assert prompt_tokens(items, fields) == (tokens_from_chars(prompt_chars(items, fields))
                                            + images * MEDIA_PART_TOKENS)
