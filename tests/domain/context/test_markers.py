"""Cache markers: ignored when recognising a client item, placed as the client does."""

import json

import msgspec
import pytest
from sessionwarden.domain.context.history import GovernedHistory, digest
from sessionwarden.domain.context.markers import (
    carry_markers,
    count_markers,
    identities,
    identity,
    without_markers,
)
from sessionwarden.domain.context.rebuild import HistoryFold
from sessionwarden.events import CallAdmitted, RequestRecord

EPHEMERAL = {"type": "ephemeral"}


def message(text: str, marker: object = None, compact: bool = True) -> bytes:
    """An Anthropic user message of one text block, with a marker on it or not."""
    block: dict[str, object] = {"type": "text", "text": text}
    if marker is not None:
        block["cache_control"] = marker
    value = {"role": "user", "content": [block]}
    if compact:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps(value).encode()  # Python's default style: spaces, \\u escapes


@pytest.mark.parametrize("compact", [True, False])
def test_an_item_is_recognised_with_or_without_its_marker_in_the_clients_own_style(
        compact: bool) -> None:
    plain = message("héllo \"cache_control\": x", compact=compact)
    marked = message("héllo \"cache_control\": x", EPHEMERAL, compact=compact)
    assert identity(plain) == digest(plain)  # the fast path: logs already written hold
    assert identity(marked) == identity(plain)
    assert without_markers(marked) == plain  # cut out, the rest byte for byte
    assert identity(message("other", EPHEMERAL)) != identity(plain)


def test_a_marker_first_in_its_object_nested_or_with_a_ttl_is_cut_too() -> None:
    first = b'{"cache_control": {"type": "ephemeral", "ttl": "1h"}, "role":"user","content":"x"}'
    assert without_markers(first) == b'{"role":"user","content":"x"}'
    nested = (b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
              b'"content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]},'
              b'{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}')
    assert count_markers(nested) == 2
    stripped = without_markers(nested)
    assert count_markers(stripped) == 0
    assert msgspec.json.decode(stripped)["content"][0]["content"] == [{"type": "text",
                                                                        "text": "a"}]


def test_the_word_in_a_string_only_is_not_a_marker() -> None:
    raw = b'{"role":"tool","content":"set \\"cache_control\\": {} here"}'
    assert without_markers(raw) is raw
    assert identity(raw) == digest(raw)
    assert count_markers(raw) == 0


STAND_IN = (b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
            b'"content":"[spilled]","cache_control":{"type":"ephemeral"}}]}')
CLIENT = (b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t",'
          b'"content":"a big output"}]}')


def test_a_stand_in_takes_the_marker_of_its_clients_item_now_and_loses_a_stale_one() -> None:
    marked_client = without_markers(CLIENT).replace(
        b'"a big output"}', b'"a big output","cache_control":{"type":"ephemeral","ttl":"1h"}}')
    assert count_markers(marked_client) == 1
    # The client moved its marker on: the stand-in is forwarded without.
    unmarked = carry_markers(STAND_IN, CLIENT)
    assert count_markers(unmarked) == 0
    assert carry_markers(STAND_IN, None) == unmarked  # a summary: never a marker
    # The client marks the item (with a TTL): the stand-in carries exactly that marker.
    carried = carry_markers(unmarked, marked_client)
    assert msgspec.json.decode(carried)["content"][-1]["cache_control"] == {
        "type": "ephemeral", "ttl": "1h"}
    assert count_markers(carried) == 1
    # Already placed so: the very bytes (their content key holds).
    assert carry_markers(STAND_IN, STAND_IN) is STAND_IN
    assert carry_markers(unmarked, CLIENT) is unmarked


def test_a_client_item_sent_with_a_marker_is_rebuilt_under_its_identity() -> None:
    marked = message("task", EPHEMERAL)
    record = RequestRecord(fields=("f" * 32, 2), system=(),
                           appended=((digest(marked).hex(), len(marked)),), tokens=(3,),
                           sources=(0,), covers=1, marked=((0, identity(marked).hex()),))
    fold = HistoryFold()
    fold.fold(CallAdmitted(call_id="c1", provider="p", model="m", request=record))
    rebuilt = fold.result({})
    assert isinstance(rebuilt, GovernedHistory)
    assert rebuilt.client == (identity(marked),)
    [item] = rebuilt.items
    assert (item.digest, item.key) == (identity(marked), digest(marked))


def test_chat_completions_parts_with_anthropic_markers_are_handled_alike() -> None:
    # OpenRouter takes Anthropic's markers on chat-completions content parts.
    plain = b'{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"out"}]}'
    marked = plain.replace(b'"out"}', b'"out","cache_control":{"type":"ephemeral"}}')
    assert identity(marked) == identity(plain) == digest(plain)
    stand_in = b'{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"[s]"}]}'
    assert count_markers(carry_markers(stand_in, marked)) == 1
    assert carry_markers(stand_in, plain) is stand_in
    # a string content has no block to carry it: none rather than one too many
    text = b'{"role":"tool","tool_call_id":"c1","content":"[s]"}'
    assert count_markers(carry_markers(text, marked)) == 0


def test_identities_name_each_item_and_the_ones_that_may_hold_a_marker() -> None:
    plain = b'{"role":"user","content":"hi"}'
    marked = (b'{"role":"user","content":[{"type":"text","text":"hi",'
              b'"cache_control":{"type":"ephemeral"}}]}')
    unmarked = b'{"role":"user","content":[{"type":"text","text":"hi"}]}'
    digests, positions = identities([plain, marked, unmarked])
    assert digests == [identity(plain), identity(marked), identity(unmarked)]
    assert digests[1] == digests[2]  # the marker moved off: the same item
    assert positions == frozenset({1})
