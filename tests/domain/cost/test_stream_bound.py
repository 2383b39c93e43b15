"""``domain.cost.stream_bound.past_bound``: a stream past its reserved output (issue 21 §8)."""

from sessionwarden.domain.cost.stream_bound import CHARS_PER_TOKEN, SLACK_CHARS, past_bound


def test_more_output_events_than_the_bound_is_past_it() -> None:
    assert not past_bound(100, 100, 100)
    assert past_bound(100, 101, 101)  # one character a token: caught by its events


def test_characters_count_with_room_for_an_honest_answer() -> None:
    # 100 tokens of prose at 5 characters: at its limit, not past it.
    assert not past_bound(100, 500, 100)
    assert not past_bound(100, 100 * CHARS_PER_TOKEN + SLACK_CHARS, 10)
    # Batched: few events, but more characters than any honest 100 tokens.
    assert past_bound(100, 100 * CHARS_PER_TOKEN + SLACK_CHARS + 1, 10)


def test_a_bound_of_one_token_allows_one_long_word() -> None:
    assert not past_bound(1, len("Unfortunately,"), 1)
    assert past_bound(1, 3, 2)
