"""The governed history: digests, recognition of a resent history, forwarded bytes."""

from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.domain.context.history import GovernedHistory, Item, digest, recognise
from sessionwarden.domain.context.transcript import content_key


def governed(*items: bytes) -> GovernedHistory:
    return GovernedHistory(client=tuple(digest(i) for i in items),
                           items=tuple(Item(digest(i), len(i), 1, None, n)
                                       for n, i in enumerate(items)))


def test_a_digest_is_the_content_key_in_bytes() -> None:
    assert digest(b'{"role":"user"}').hex() == content_key(b'{"role":"user"}')
    assert len(digest(b"")) == 16


def test_a_resend_with_new_items_extends_the_history() -> None:
    history = governed(b"a", b"b")
    assert recognise(history, [digest(b"a"), digest(b"b"), digest(b"c")]) == (2, "")
    assert recognise(history, [digest(b"a"), digest(b"b")]) == (2, "")
    assert recognise(GovernedHistory(), [digest(b"x")]) == (0, "")


def test_an_edited_or_shortened_history_says_where_and_why() -> None:
    history = governed(b"a", b"b", b"c")
    edited = recognise(history, [digest(b"a"), digest(b"B"), digest(b"c")])
    assert edited.matched == 1 and "message 2" in edited.reason
    shorter = recognise(history, [digest(b"a"), digest(b"b")])
    assert shorter.matched == 2 and shorter.reason == "shortened to 2 of 3 messages"
    other = recognise(history, [digest(b"x")])
    assert other.matched == 0 and other.reason == "a new conversation (message 1 differs)"


def test_forwarded_takes_unchanged_items_from_the_request_and_keeps_stand_ins() -> None:
    history = GovernedHistory(client=(digest(b"a"), digest(b"b")), items=(
        Item(digest(b"a"), 1, 1, None, 0), Item(digest(b"S"), 1, 1, b"S", -1)))
    assert history.forwarded([b"a", b"b", b"new"]) == [b"a", b"S"]


@given(st.lists(st.binary(max_size=8), max_size=12), st.lists(st.binary(max_size=8),
                                                              max_size=12))
def test_recognition_matches_exactly_the_common_prefix(old: list[bytes],
                                                       new: list[bytes]) -> None:
    found = recognise(governed(*old), [digest(i) for i in new])
    common = 0
    while common < min(len(old), len(new)) and old[common] == new[common]:
        common += 1
    assert found.matched == common
    assert (found.reason == "") == (common == len(old))
