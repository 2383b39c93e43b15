import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify.patterns import (
    DEFAULT_BOOK,
    DEFAULT_PATTERNS,
    MAX_PATTERN_CHARS,
    PATTERN_LISTS,
    Patterns,
    normalise,
)
from sessionwarden.domain.errors import BadPatterns, DomainError
from sessionwarden.errors import SessionwardenError


def test_normalise_reads_separators_as_spaces() -> None:
    assert normalise("RESOURCE_EXHAUSTED") == normalise("resource-exhausted") == (
        "resource exhausted")
    assert normalise("  Too   many\n requests ") == "too many requests"


def test_every_default_list_is_filled_and_normalised() -> None:
    for name in PATTERN_LISTS:
        phrases = getattr(DEFAULT_PATTERNS, name)
        assert phrases, name
        assert all(phrase == normalise(phrase) for phrase in phrases), name
        assert len(set(phrases)) == len(phrases), name


def test_constructed_patterns_are_normalised() -> None:
    patterns = Patterns(billing=("Out_Of-Funds", "out of funds", "  "))
    assert patterns.billing == ("out of funds",)


def test_extended_appends_normalised_phrases_without_touching_the_original() -> None:
    extended = DEFAULT_PATTERNS.extended({"rate_limit": ["Slow_Down Cowboy"], "billing": []})
    assert extended.rate_limit == (*DEFAULT_PATTERNS.rate_limit, "slow down cowboy")
    assert extended.billing == DEFAULT_PATTERNS.billing
    assert "slow down cowboy" not in DEFAULT_PATTERNS.rate_limit


@pytest.mark.parametrize("extra", [
    {"no_such_list": ["x"]},
    {"billing": "a string, not a list"},
    {"billing": [""]},
    {"billing": ["   "]},
    {"billing": ["x" * (MAX_PATTERN_CHARS + 1)]},
    {"billing": [42]},
    {"billing": ["x"] * 101},
])
def test_extended_refuses_unusable_patterns(extra: dict[str, object]) -> None:
    with pytest.raises(BadPatterns) as info:
        DEFAULT_PATTERNS.extended(extra)  # type: ignore[arg-type]
    assert isinstance(info.value, DomainError)
    assert isinstance(info.value, SessionwardenError)
    assert "\n" not in str(info.value)


def test_pattern_book_per_provider() -> None:
    book = DEFAULT_BOOK.with_provider("a", {"overloaded": ["hamsters tired"]})
    book = book.with_provider("b", {"billing": ["wallet empty"]})
    assert "hamsters tired" in book.for_provider("a").overloaded
    assert "hamsters tired" not in book.for_provider("b").overloaded
    assert "wallet empty" in book.for_provider("b").billing
    assert book.for_provider("c") is DEFAULT_PATTERNS
    assert DEFAULT_BOOK.by_provider == {}


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(PATTERN_LISTS),
                       st.lists(st.text(min_size=1, max_size=40), max_size=5), max_size=4))
def test_extended_either_accepts_or_refuses_cleanly(extra: dict[str, list[str]]) -> None:
    try:
        patterns = DEFAULT_PATTERNS.extended(extra)
    except BadPatterns:
        assert any(not normalise(p) for phrases in extra.values() for p in phrases)
        return
    for name, phrases in extra.items():
        assert all(normalise(p) in getattr(patterns, name) for p in phrases)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(
    [*"aZ_-. \n\t\r\x0b\x0c\x1c\x1f\x7fé", "\u00a0", "\u2003", "\u0130", "ΑΣ"]), max_size=20
).map("".join))
def test_normalise_is_split_and_join_whatever_the_shortcut(text: str) -> None:
    # the single-space ASCII shortcut must give what splitting and joining gives
    assert normalise(text) == " ".join(text.lower().replace("_", " ").replace("-", " ").split())
