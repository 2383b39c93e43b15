"""The spill directory's quota (issue 21, §11): what is evicted, and stand-ins that say so."""

from hypothesis import given
from hypothesis import strategies as st
from sessionwarden.config import ToolsConfig
from sessionwarden.domain.context.history import GovernedHistory, Item, digest
from sessionwarden.domain.context.messages import ToolResult
from sessionwarden.domain.context.spill import (
    EVICTED_LINE,
    evicted_text,
    resolve_limits,
    spill_name,
    spilled_text,
)
from sessionwarden.domain.context.spill_quota import Eviction, SpillQuota
from sessionwarden.domain.context.spill_turns import (
    SpillOutcome,
    apply_spills,
    mark_evicted,
    plan_spills,
)
from sessionwarden.upstream.chat_completions import ChatItems
from sessionwarden.upstream.chat_messages import to_neutral

DIR = "/var/lib/sessionwarden/spill"
CODEC = ChatItems()


def test_a_file_that_fits_evicts_nothing_and_one_that_does_not_evicts_the_oldest() -> None:
    quota = SpillQuota(100)
    quota.load([("b", 30, 2), ("a", 30, 1), ("c", 30, 2)])  # time, then name
    assert quota.order() == ["a", "b", "c"] and quota.used == 90
    assert quota.room_for(10) == []
    assert quota.room_for(40) == [Eviction("a", 30)]
    assert quota.room_for(70) == [Eviction("a", 30), Eviction("b", 30)]


def test_a_reference_makes_a_file_the_most_recent() -> None:
    quota = SpillQuota(100)
    for name in "abc":
        quota.add(name, 30)
    quota.touch("a")
    assert quota.room_for(40) == [Eviction("b", 30)]


def test_a_file_larger_than_the_quota_or_fitting_only_by_evicting_its_own_write_is_refused(
) -> None:
    quota = SpillQuota(100)
    assert quota.room_for(101) is None
    quota.add("mine", 60)
    quota.add("other", 30)
    assert quota.room_for(50, keep={"mine"}) is None  # only "other" may go: 30 < 40
    assert quota.room_for(40, keep={"mine"}) == [Eviction("other", 30)]


def test_over_quota_at_start_evicts_the_oldest_until_under() -> None:
    quota = SpillQuota(100)
    quota.load([(f"f{i}", 40, i) for i in range(5)])
    assert quota.over() == [Eviction("f0", 40), Eviction("f1", 40), Eviction("f2", 40)]
    assert SpillQuota(1000).over() == []


def test_evicted_names_are_remembered_boundedly_and_forgotten_once_written_again() -> None:
    quota = SpillQuota(100, remembered=2)
    for name in "abc":
        quota.add(name, 10)
        quota.evicted(name)
    assert list(quota.gone()) == ["b", "c"] and quota.used == 0 and len(quota) == 0
    quota.add("c", 10)
    assert list(quota.gone()) == ["b"] and "c" in quota


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(1, 60)), max_size=40))
def test_what_room_for_evicts_always_makes_the_file_fit(writes: list[tuple[str, int]]) -> None:
    quota = SpillQuota(100)
    for name, size in writes:
        quota.remove(name)
        victims = quota.room_for(size)
        assert victims is not None  # every size here fits an empty directory
        for victim in victims:
            quota.evicted(victim.name)
        quota.add(name, size)
        assert quota.used <= 100
        assert quota.used == sum(quota.size_of(n) or 0 for n in quota.order())


# -- the stand-ins ----------------------------------------------------------------------


def test_an_evicted_files_stand_in_says_so_and_keeps_its_preview() -> None:
    content = "line\n" * 1000
    path = f"{DIR}/{spill_name(content)}"
    stand_in = spilled_text(content, path, 100)
    said = evicted_text(stand_in, DIR, {spill_name(content)})
    assert "Full output:" not in said and f"{EVICTED_LINE}the file {path} was deleted" in said
    assert said.startswith(stand_in.split("\n", 1)[0] + "\n")
    assert said.split("Preview (", 1)[1] == stand_in.split("Preview (", 1)[1]
    # Not evicted, another directory's, or already said: unchanged.
    assert evicted_text(stand_in, DIR, {"0" * 64 + ".txt"}) == stand_in
    assert evicted_text(stand_in, "/elsewhere", {spill_name(content)}) == stand_in
    assert evicted_text(said, DIR, {spill_name(content)}) == said
    assert evicted_text("a tool's own words", DIR, {spill_name(content)}) == "a tool's own words"


def _governed(content: str) -> tuple[GovernedHistory, str]:
    """A history of a user item (the client's) and a spilled tool result (a stand-in)."""
    limits = resolve_limits(ToolsConfig(result_size_chars=1_000, preview_chars=100), None)
    messages = to_neutral([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": content}])
    plan = plan_spills(messages, limits, DIR)
    out, _ = apply_spills(plan, SpillOutcome(), messages, CODEC, "call-1")
    raw = out[1][1]
    assert raw is not None
    first = CODEC.write_item(messages[0])
    items = (Item(digest(first), len(first), 5, None, 0), Item(digest(raw), len(raw), 50, raw))
    return GovernedHistory(client=(b"a", b"b"), items=items, call_id="call-1", tokens=55), \
        plan.files[0].name


def test_mark_evicted_re_renders_only_the_stand_ins_naming_an_evicted_file() -> None:
    history, name = _governed("z" * 5_000)
    assert mark_evicted(history, frozenset(), CODEC, DIR) is None
    assert mark_evicted(history, {"f" * 64 + ".txt"}, CODEC, DIR) is None
    marked = mark_evicted(history, {name}, CODEC, DIR)
    assert marked is not None
    new, first = marked
    assert first == 1 and new.items[0] == history.items[0] and new.client == history.client
    raw = new.items[1].raw
    assert raw is not None and new.items[1].digest == digest(raw)
    message = CODEC.read_item(raw)
    assert not isinstance(message, str)
    result = message.parts[0]
    assert isinstance(result, ToolResult)
    assert EVICTED_LINE in getattr(result.parts[0], "text", "")
    assert new.tokens == history.tokens - history.items[1].tokens + new.items[1].tokens
    # Said once: a second pass finds nothing left to say.
    assert mark_evicted(new, {name}, CODEC, DIR) is None
