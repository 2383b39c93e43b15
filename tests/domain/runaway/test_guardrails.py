import json
from collections.abc import Iterable, Sequence

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sessionwarden.config import GuardrailsConfig
from sessionwarden.domain.context.messages import Message, Text, ToolCall, ToolResult
from sessionwarden.domain.runaway.guardrails import (
    Finding,
    GuardSettings,
    GuardState,
    fold,
    observe,
    stop_text,
    warning_notice,
)
from sessionwarden.domain.runaway.signals import Observation, observations, signature
from sessionwarden.domain.runaway.turns import NOTICE_MARKER

DEFAULT = GuardSettings()
HARD = GuardSettings(hard_stop=True)


def obs(tool: str, args: object = None, failed: bool = False, result: str = "r",
        call_id: str = "c") -> Observation:
    arguments = json.dumps(args if args is not None else {"a": 1})
    return Observation(tool, signature(tool, arguments), failed, result, call_id, 0)


def run(sequence: Iterable[Observation],
        guard: GuardSettings = DEFAULT) -> tuple[GuardState, list[tuple[Finding, ...]]]:
    """Fold one at a time; the findings of each observation, in order."""
    state, per_call = GuardState(), []
    for item in sequence:
        state, found = observe(state, item, guard)
        per_call.append(found)
    return state, per_call


def rules(found: Sequence[Finding]) -> set[tuple[str, str]]:
    return {(f.rule, f.level) for f in found}


# --- the cases the issue and §9 name ----------------------------------------------------

def test_the_same_failing_command_warns_from_the_second_and_stops_at_the_fifth():
    failing = [obs("terminal", {"command": "make"}, True, "boom")] * 5
    _, calls = run(failing, HARD)
    assert calls[0] == ()
    for found in calls[1:4]:
        assert ("exact_failure", "warn") in rules(found)
        assert all(f.level == "warn" for f in found)
    assert ("exact_failure", "stop") in rules(calls[4])
    exact = next(f for f in calls[4] if f.rule == "exact_failure")
    assert exact.count == 5 and exact.at_stop and "pwd && ls -la" in exact.message


def test_without_hard_stop_the_fifth_failure_is_a_warning_at_the_stop_threshold():
    state, calls = run([obs("terminal", {"command": "make"}, True, "boom")] * 5)
    assert all(f.level == "warn" for found in calls for f in found)
    assert [f.count for f in calls[4] if f.rule == "exact_failure"] == [5]
    assert next(f for f in calls[4] if f.rule == "exact_failure").at_stop
    assert state.halted is None


def test_a_stop_is_remembered_as_the_turns_halt():
    state, _ = run([obs("terminal", {"command": "make"}, True, "boom")] * 6, HARD)
    assert state.halted is not None and state.halted.rule == "exact_failure"
    assert state.halted.count == 5


def test_a_fix_and_retest_loop_never_stops():
    loop = []
    for i in range(12):
        loop.append(obs("Bash", {"command": "pytest"}, True, "1 failed"))
        loop.append(obs("Edit", {"file_path": "a.py", "old": str(i), "new": str(i + 1)},
                        result="The file a.py has been updated."))
    state, calls = run(loop, HARD)
    assert all(found == () for found in calls)
    assert state.halted is None


def test_one_intervening_mutation_restarts_the_exact_count_once():
    fail = obs("terminal", {"command": "make"}, True, "boom")
    _, calls = run([fail, fail, obs("write_file", {"p": 1}), fail, fail], HARD)
    assert [f.count for f in calls[1] if f.rule == "exact_failure"] == [2]
    assert calls[3] == ()
    assert [f.count for f in calls[4] if f.rule == "exact_failure"] == [2]


def test_navigating_again_after_a_click_is_not_a_replay():
    nav = obs("browser_navigate", {"url": "u"}, True, "timeout")
    _, calls = run([nav, obs("browser_click", {"ref": 1}), nav], HARD)
    assert calls[2] == ()


def test_twelve_distinct_failing_shell_commands_never_stop():
    failing = [obs("Bash", {"command": f"grep -r x{i}"}, True, f"err {i}") for i in range(12)]
    state, calls = run(failing, HARD)
    assert all(f.level == "warn" and f.rule == "same_tool_failure"
               for found in calls for f in found)
    assert [f.count for f in calls[2]] == [3]
    assert state.halted is None


def test_eight_failures_of_a_tool_that_is_not_tolerant_stop():
    failing = [obs("send_message", {"to": i}, True, f"e{i}") for i in range(8)]
    state, calls = run(failing, HARD)
    assert all(f.level == "warn" for found in calls[:7] for f in found)
    assert rules(calls[7]) == {("same_tool_failure", "stop")}
    assert state.halted is not None and state.halted.count == 8


def test_a_success_of_the_tool_restarts_its_failure_count():
    fails = [obs("send_message", {"to": i}, True, f"e{i}") for i in range(2)]
    _, calls = run([*fails, obs("send_message", {"to": 9}), *fails], HARD)
    assert all(found == () for found in calls)


def test_identical_reads_with_the_same_result_warn_at_two_and_stop_at_five():
    read = obs("read_file", {"path": "a.py"}, result="same")
    state, calls = run([read] * 5, HARD)
    assert calls[0] == ()
    for found in calls[1:4]:
        assert ("idempotent_no_progress", "warn") in rules(found)
        assert "already have this result" in found[0].message
    assert rules(calls[4]) == {("idempotent_no_progress", "stop")}
    assert state.halted is not None


def test_the_same_read_with_a_changed_result_never_fires():
    reads = [obs("Read", {"file_path": "log"}, result=f"v{i}") for i in range(12)]
    _, calls = run(reads, HARD)
    assert all(found == () for found in calls)


def test_an_agents_own_tool_gets_no_idempotent_rule_but_a_streak():
    same = obs("lookup_order", {"id": 7}, result="shipped")
    _, calls = run([same] * 5, HARD)
    assert calls[1] == ()
    assert rules(calls[2]) == {("identical_streak", "warn")}
    assert rules(calls[4]) == {("identical_streak", "stop")}


def test_an_identical_successful_terminal_call_stops_at_exactly_five():
    same = obs("terminal", {"command": "ls"}, result="a b")
    _, calls = run([same] * 5, HARD)
    assert all(f.level == "warn" for found in calls[:4] for f in found)
    assert rules(calls[4]) == {("identical_streak", "stop")}


def test_an_ab_cycle_is_warned_then_stopped():
    a = obs("lookup", {"q": "x"}, result="A")
    b = obs("convert", {"q": "y"}, result="B")
    _, calls = run([a, b] * 5, HARD)
    cycles = [(i, f) for i, found in enumerate(calls) for f in found if f.rule == "cycle"]
    assert [(i, f.count, f.level) for i, f in cycles] == [
        (5, 3, "warn"), (7, 4, "warn"), (9, 5, "stop")]
    warned = cycles[0][1]
    assert "lookup" in warned.tool and "convert" in warned.tool
    assert "lookup" in warned.message and "change approach" in warned.message


def test_a_cycle_of_three_and_a_cycle_rearmed_after_a_break():
    a, b, c = (obs(t, result=t) for t in ("f", "g", "h"))
    breaker = obs("other", result="z")
    _, calls = run([a, b, c] * 3 + [breaker] + [a, b] * 3, DEFAULT)
    cycles = [(i, f.count) for i, found in enumerate(calls) for f in found
              if f.rule == "cycle"]
    assert cycles == [(8, 3), (15, 3)]


def test_a_cycle_with_changing_results_is_progress():
    seq = []
    for i in range(8):
        seq += [obs("lookup", result=f"A{i}"), obs("convert", result="B")]
    _, calls = run(seq, HARD)
    assert all(f.rule != "cycle" for found in calls for f in found)


def test_pollers_are_exempt():
    for name in ("process_manage", "job_poll", "task_get_result"):
        _, calls = run([obs(name, {"id": 1}, result="running")] * 10, HARD)
        assert all(found == () for found in calls), name
    _, calls = run([obs("a_poll", result="1"), obs("b_poll", result="2")] * 6, HARD)
    assert all(found == () for found in calls)


def test_the_web_search_past_the_cap_stops_even_without_hard_stop():
    searches = [obs("web_search", {"q": i}, result=str(i)) for i in range(51)]
    state, calls = run(searches, DEFAULT)
    assert all(found == () for found in calls[:50])
    assert [(f.rule, f.level, f.count) for f in calls[50]] == [("web_search_cap", "stop", 51)]
    assert state.halted is not None and state.halted.rule == "web_search_cap"


def test_a_cap_of_zero_is_unlimited_and_a_small_cap_blocks_its_next_search():
    searches = [obs("WebSearch", {"q": i}, result=str(i)) for i in range(80)]
    _, calls = run(searches, GuardSettings(max_web_searches=0))
    assert all(found == () for found in calls)
    _, calls = run(searches[:4], GuardSettings(max_web_searches=3))
    assert [f.rule for f in calls[3]] == ["web_search_cap"]


def test_a_fresh_state_is_a_new_turn():
    fail = obs("terminal", {"command": "make"}, True, "boom")
    state, _ = run([fail] * 4, HARD)
    _, found = observe(GuardState(), fail, HARD)
    assert found == ()
    assert state != GuardState()


def test_from_config_reads_the_section():
    cfg = GuardrailsConfig(hard_stop=True, exact_failure=(1, 2), idempotent_no_progress=(2, 4),
                           max_web_searches=0)
    guard = GuardSettings.from_config(cfg)
    assert guard.hard_stop and guard.exact_failure == (1, 2)
    assert guard.identical_streak == (3, 4) and guard.cycle == (3, 4)
    assert guard.max_web_searches == 0
    assert GuardSettings.from_config(GuardrailsConfig()) == GuardSettings()


def test_notices_are_marked():
    _, calls = run([obs("terminal", {"command": "make"}, True, "boom")] * 5, HARD)
    notice = warning_notice(calls[1])
    assert notice.startswith(NOTICE_MARKER) and "exact_failure" in notice
    stop = stop_text(next(f for f in calls[4] if f.level == "stop"))
    assert stop.startswith(NOTICE_MARKER) and "exact_failure" in stop


# --- incremental folding ----------------------------------------------------------------

observations_st = st.builds(
    obs, st.sampled_from(["terminal", "read_file", "Edit", "lookup", "web_search", "job_poll",
                          "send_message"]),
    st.sampled_from([{"a": 1}, {"a": 2}, {"b": 1}]), st.booleans(),
    st.sampled_from(["r1", "r2"]))
small = GuardSettings(hard_stop=True, max_web_searches=3)


@settings(max_examples=300)
@given(st.lists(observations_st, max_size=40), st.data())
def test_folding_in_any_split_is_folding_one_by_one(sequence, data):
    cut = data.draw(st.integers(0, len(sequence)))
    one_by_one, calls = run(sequence, small)
    first, found_first = fold(GuardState(), sequence[:cut], small)
    whole, found_rest = fold(first, sequence[cut:], small)
    assert whole == one_by_one
    assert found_first + found_rest == tuple(f for found in calls for f in found)


@settings(max_examples=300)
@given(st.lists(observations_st, max_size=40))
def test_a_counter_speaks_only_on_the_observation_that_grew_it(sequence):
    _, calls = run(sequence, small)
    for item, found in zip(sequence, calls, strict=True):
        assert len({f.rule for f in found}) == len(found)  # one finding per rule
        for f in found:
            if f.rule != "cycle":
                assert f.signature == item.signature and f.count >= 2


def test_a_cycle_is_not_repeated_within_a_lap():
    a, b, c = (obs(t, result=t) for t in ("f", "g", "h"))
    _, calls = run([a, b, c] * 5, HARD)
    laps = [f.count for found in calls for f in found if f.rule == "cycle"]
    assert laps == [3, 4, 5]


def _history(steps: Sequence[tuple[str, str, str]]) -> list[Message]:
    messages = [Message("user", (Text("fix the build"),))]
    for i, (name, args, text) in enumerate(steps):
        messages.append(Message("assistant", (ToolCall(f"c{i}", name, args),)))
        messages.append(Message("tool", (ToolResult(f"c{i}", (Text(text),)),)))
    return messages


steps_st = st.lists(st.tuples(st.sampled_from(["terminal", "read_file", "Edit"]),
                              st.sampled_from(['{"a":1}', '{"a": 2}', '{ "a" : 1 }']),
                              st.sampled_from(["ok", "Error: x", "same"])), max_size=20)


@settings(max_examples=200)
@given(steps_st, steps_st)
def test_a_resend_folds_only_its_new_observations(before, added):
    earlier = _history(before)
    later = earlier + _history(added)[1:]
    state, _ = fold(GuardState(), observations(earlier), small)
    resent, _ = fold(state, observations(earlier, len(earlier)), small)
    assert resent == state  # the same history again: nothing new
    grown, _ = fold(state, observations(later, len(earlier)), small)
    assert grown == fold(GuardState(), observations(later), small)[0]


@settings(max_examples=100)
@given(st.lists(observations_st, max_size=30), observations_st)
def test_observing_never_changes_the_state_it_was_given(sequence, item):
    state, _ = fold(GuardState(), sequence, small)
    snapshot = msgspec.json.encode(state)
    observe(state, item, small)
    assert msgspec.json.encode(state) == snapshot


@settings(max_examples=100)
@given(st.lists(observations_st, max_size=30))
def test_a_state_survives_a_json_round_trip(sequence):
    state, _ = fold(GuardState(), sequence, small)
    decoded = msgspec.json.decode(msgspec.json.encode(state), type=GuardState)
    assert decoded == state
    assert fold(decoded, sequence, small) == fold(state, sequence, small)


def test_a_cycle_has_one_id_whichever_call_completes_its_laps():
    a, b = obs("lookup", result="A"), obs("convert", result="B")
    _, calls = run([a, b] * 4 + [a, a] + [b, a] * 4, DEFAULT)
    ids = {f.signature for found in calls for f in found if f.rule == "cycle"}
    assert len(ids) == 1
