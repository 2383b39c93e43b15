"""The fast reading of error bodies gives what the plain reading gave.

``read_error_body`` runs on every failed call, so its walk keeps locals and a stack of
iterators, its phrase resets start from the first cue word, and the phrase reset is read
on first use; these tests hold each to the reading it replaced, written out here.
"""

import json
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.domain.classify import error_body
from sessionwarden.domain.classify import resets as error_resets
from sessionwarden.domain.classify.error_body import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_TEXT_CHARS,
    read_error_body,
)

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def reference_walk(root: Any) -> tuple[list[str], list[str]]:
    """The strings and raw codes, as the walk with one stack entry per node found them."""
    strings: list[str] = []
    codes: list[str] = []
    size = nodes = 0
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack and nodes < MAX_NODES and size < MAX_TEXT_CHARS:
        node, depth = stack.pop()
        nodes += 1
        if isinstance(node, str):
            piece = node[: MAX_TEXT_CHARS - size]
            strings.append(piece)
            size += len(piece) + 1
            if depth < MAX_DEPTH and piece.lstrip().startswith("{"):
                inner = error_body._decode(piece)
                if inner is not None:
                    stack.append((inner, depth + 1))
        elif depth >= MAX_DEPTH:
            continue
        elif isinstance(node, dict):
            children = []
            for key, value in islice(node.items(), MAX_NODES):
                if not isinstance(key, str) or key.lower() in error_body._SKIP_KEYS:
                    continue
                if key.lower() in error_body._CODE_KEYS and isinstance(value, str) and len(
                        value) <= 100:
                    codes.append(value)
                children.append((value, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(node, (list, tuple)):
            stack.extend((item, depth + 1) for item in reversed(node[:MAX_NODES]))
    return strings, codes


_KEYS = st.sampled_from(["message", "error", "type", "code", "param", "details", "Status",
                         "metadata", "raw", "id", "x"])
_LEAVES = st.one_of(st.text(max_size=12), st.none(), st.integers(), st.booleans(),
                    st.sampled_from(['{"error": {"message": "inner", "code": "c"}}', "RATE_LIMIT"]))
_JSON = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=6)
                     | st.dictionaries(_KEYS, inner, max_size=6), max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_the_walk_finds_what_the_one_stack_walk_found(root: Any) -> None:
    strings: list[str] = []
    codes: list[str] = []
    error_body._walk(root, NOW, strings, codes)
    assert (strings, codes) == reference_walk(root)


def test_the_walk_stops_where_the_one_stack_walk_stopped() -> None:
    wide = {"error": [{"code": f"c{i}", "message": "m" * 50} for i in range(300)]}
    deep: Any = "bottom"
    for _ in range(20):
        deep = {"error": [deep, "side"]}
    for root in (wide, deep, [["x" * 5000] * 3] * 2):
        strings: list[str] = []
        codes: list[str] = []
        error_body._walk(root, NOW, strings, codes)
        assert (strings, codes) == reference_walk(root)


_WORDS = st.sampled_from([
    "quotaresetdelay", "reset", "resets", "in", "at", "on", "try", "again", "retry", "after",
    "please", "wait", "until", "regain", "access", "5", "1m30s", "2hr", "500ms", "seconds",
    "2026-08-01", "00:00", "2027-13-01", "utc", ":", "=", "'", "and", "\t", "quota", "x"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_WORDS, max_size=12), st.sampled_from([" ", "", "  "]))
def test_phrase_resets_read_as_the_whole_text_search(words: list[str], sep: str) -> None:
    raw = sep.join(words)
    assert error_resets.phrase_reset(raw, NOW) == error_resets.phrase_reset(
        raw, NOW, from_cues=False), raw


def test_first_cue() -> None:
    assert error_resets.first_cue("", ("reset",)) == -1
    assert error_resets.first_cue("please retry after a reset", error_resets.DELAY_CUES) == 7
    assert error_resets.first_cue("reset until", error_resets.DATE_CUES) == 0


def test_every_phrase_begins_with_a_cue() -> None:
    # _phrase_reset starts its search at the first cue: each alternative must begin with one
    for pattern, cues in ((error_resets._DELAY, error_resets.DELAY_CUES),
                          (error_resets._DATE, error_resets.DATE_CUES)):
        alternatives = pattern.pattern[3:pattern.pattern.index(")")].split("|")
        for alternative in alternatives:
            assert alternative.replace("s? ", "s ").startswith(cues), alternative


def test_the_phrase_reset_is_read_once_on_first_use() -> None:
    body = read_error_body(json.dumps({"error": {"message": "Try again in 20s."}}).encode(), NOW)
    assert body.reset() == (20.0, "body phrase")
    assert (body.reset_seconds, body.reset_source) == (20.0, "body phrase")
    twin = read_error_body({"error": {"message": "Try again in 20s."}}, NOW)
    assert body == twin and hash(body) == hash(twin)
    assert "reset_seconds=20.0" in repr(twin)
    # a field's reset is known at once, and wins over the words
    field = read_error_body({"message": "try again in 5s", "retry_after": 60}, NOW)
    assert field.reset() == (60.0, "body field retry_after")
    assert read_error_body(b"", NOW).reset() == (None, "")
