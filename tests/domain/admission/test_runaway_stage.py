"""``domain/admission/runaway_stage.py``: iterations, the grace call, guards, resends."""

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
from sessionwarden.config import BudgetsConfig, Config, GuardrailsConfig
from sessionwarden.domain.admission.pipeline import Admitted, Proceed, Refused, verdict_events
from sessionwarden.domain.admission.runaway_stage import RunawaySettings, govern_runaway
from sessionwarden.domain.admission.stages import default_pipeline
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.runaway.turns import NOTICE_MARKER
from sessionwarden.domain.session import SessionState
from sessionwarden.events import GuardrailTripped, IterationCounted
from sessionwarden.upstream.anthropic_messages import AnthropicMessages
from sessionwarden.upstream.chat_completions import ChatCompletions
from sessionwarden.upstream.responses import Responses

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SHELL = {"type": "function", "function": {"name": "shell", "parameters": {}}}


def settings(limit: int = 3, **guards: Any) -> RunawaySettings:
    return RunawaySettings.from_config(Config(
        budgets=BudgetsConfig(max_iterations=limit), guardrails=GuardrailsConfig(**guards)))


def request(messages: list[dict[str, Any]], call_id: str, wire: Any = None,
            **fields: Any) -> CallRequest:
    wire = wire or ChatCompletions()
    key = "input" if isinstance(wire, Responses) else "messages"
    body = msgspec.json.encode({"model": "m", key: messages, **fields})
    conversation, shape = wire.read_request(body)
    conversation.fields_bytes, _ = wire.upstream_fields(conversation.fields, "m", False)
    return CallRequest(call_id=call_id, session_id="s", provider="p", model="m",
                       api_mode=wire.api_mode, shape=shape, body=conversation)


def admit(state: SessionState, run: RunawaySettings, req: CallRequest) -> CallRequest:
    """Run the stage and fold what it decided, as the session's actor does."""
    result = govern_runaway(run, state, req, NOW)
    assert isinstance(result, Proceed)
    for event in result.events:
        state.fold(event)
    if result.request.guards is not None:
        state.guards = result.request.guards
    return result.request


def rounds(n: int, command: str = "ls missing") -> list[dict[str, Any]]:
    """``n`` tool rounds of the same shell command, failing."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": "shell", "arguments": json.dumps({"command": command})}}]})
        out.append({"role": "tool", "tool_call_id": f"c{i}",
                    "content": json.dumps({"exit_code": 2, "output": "No such file"})})
    return out


def counts(state: SessionState) -> tuple[int, str]:
    assert state.turn is not None
    return state.turn.used, state.turn.decision


def test_three_forwarded_then_the_grace_call_then_answered() -> None:
    state, run = SessionState("s"), settings(3)
    task = [{"role": "user", "content": "go"}]
    for n in range(3):
        sent = admit(state, run, request(task + rounds(n, f"echo {n}"), f"k{n}", tools=[SHELL]))
        assert sent.reply is None and not sent.notices
    grace = admit(state, run, request(task + rounds(3, "echo x"), "k3", tools=[SHELL]))
    fields = json.loads(grace.body.fields_bytes)
    assert fields["tool_choice"] == "none" and fields["tools"] == [SHELL]
    assert grace.notices[-1].startswith(NOTICE_MARKER) and "3 iterations" in grace.notices[-1]
    assert counts(state) == (4, "grace")
    answered = admit(state, run, request(task + rounds(4, "echo x"), "k4", tools=[SHELL]))
    assert answered.reply is not None and answered.reply.refused == "iteration_budget"
    assert answered.reply.status == 200 and "max_iterations" in answered.reply.text
    # A new user message: a new turn, a fresh budget.
    fresh = admit(state, run, request(task + rounds(4, "echo x") + [
        {"role": "user", "content": "next"}], "k5", tools=[SHELL]))
    assert fresh.reply is None and counts(state) == (1, "forward")


def test_a_resend_is_not_counted_and_gets_the_same_decision() -> None:
    state, run = SessionState("s"), settings(1)
    task = [{"role": "user", "content": "go"}]
    admit(state, run, request(task, "k0", tools=[SHELL]))
    again = govern_runaway(run, state, request(task, "k1", tools=[SHELL]), NOW)
    assert isinstance(again, Proceed) and not again.events
    grace = admit(state, run, request(task + rounds(1), "k2", tools=[SHELL]))
    assert grace.notices and counts(state) == (2, "grace")
    # The grace call retried: tools off again, its notice not added twice (it is in the
    # forwarded history already), nothing counted.
    retried = govern_runaway(run, state, request(task + rounds(1), "k3", tools=[SHELL]), NOW)
    assert isinstance(retried, Proceed) and not retried.events
    assert json.loads(retried.request.body.fields_bytes)["tool_choice"] == "none"
    assert not retried.request.notices


def test_the_same_failure_is_warned_and_stopped_only_with_hard_stop() -> None:
    task = [{"role": "user", "content": "go"}]
    for hard in (False, True):
        state, run = SessionState("s"), settings(0, hard_stop=hard)
        found: list[GuardrailTripped] = []
        last: CallRequest | None = None
        for n in range(1, 6):
            result = govern_runaway(run, state, request(task + rounds(n), f"k{n}"), NOW)
            assert isinstance(result, Proceed)
            found += [e for e in result.events if isinstance(e, GuardrailTripped)]
            for event in result.events:
                state.fold(event)
            state.guards = result.request.guards
            last = result.request
        exact = [e for e in found if e.rule == "exact_failure"]
        assert [e.count for e in exact] == [2, 3, 4, 5]
        assert last is not None
        assert (last.reply is not None) is hard
        assert exact[-1].stopped is hard and exact[-1].level == ("stop" if hard else "warn")


def test_after_a_restart_the_count_comes_from_the_log_and_old_failures_stay_quiet() -> None:
    state, run = SessionState("s"), settings(10)
    task = [{"role": "user", "content": "go"}]
    for n in range(1, 3):
        admit(state, run, request(task + rounds(n), f"k{n}"))
    state.guards = None  # recovered from the log: the turn folded, not the guards
    result = govern_runaway(run, state, request(task + rounds(3), "k3"), NOW)
    assert isinstance(result, Proceed)
    assert [e.used for e in result.events if isinstance(e, IterationCounted)] == [3]
    # The third failure is the one warned about, not the first two again.
    assert [e.count for e in result.events if isinstance(e, GuardrailTripped)] == [3]


def test_a_child_whose_parent_has_spent_its_turn_is_wound_down() -> None:
    state, run = SessionState("c"), settings(5)
    req = msgspec.structs.replace(request([{"role": "user", "content": "part"}], "k1",
                                          tools=[SHELL]),
                                  parent_session="p", parent_turn=(5, 5))
    sent = admit(state, run, req)
    assert json.loads(sent.body.fields_bytes)["tool_choice"] == "none"
    assert counts(state) == (1, "grace")


def test_each_format_says_no_tools_its_own_way() -> None:
    run = settings(0)
    cases = [
        (AnthropicMessages(), [{"role": "user", "content": "go"}], {"type": "none"},
         {"max_tokens": 10, "tools": [{"name": "Bash", "input_schema": {}}]}),
        (Responses(), [{"type": "message", "role": "user", "content": "go"}], "none",
         {"tools": [{"type": "function", "name": "shell"}]}),
    ]
    for wire, items, none, fields in cases:
        state = SessionState("s")
        admit(state, settings(0), request(items, "k0", wire, **fields))
        state.turn = state.turn._replace(limit=1) if state.turn else None
        # Spent: the next call in the turn is the grace call.
        more = [*items, *([{"role": "assistant", "content": "ok"}] if not isinstance(
            wire, Responses) else [{"type": "message", "role": "assistant",
                                    "content": "ok"}])]
        result = govern_runaway(run._replace(max_iterations=1), state,
                                request(more, "k1", wire, **fields), NOW)
        assert isinstance(result, Proceed)
        assert json.loads(result.request.body.fields_bytes)["tool_choice"] == none


def test_the_notice_is_appended_and_stays_where_it_was_forwarded() -> None:
    pipeline = default_pipeline(Config(budgets=BudgetsConfig(max_iterations=1)))
    state = SessionState("s")
    task = [{"role": "user", "content": "go"}]

    def call(messages: list[dict[str, Any]], call_id: str) -> list[Any]:
        verdict = pipeline.run(state, request(messages, call_id, tools=[SHELL]), NOW)
        assert isinstance(verdict, Admitted)
        for event in verdict_events(state, verdict):
            state.fold(event)
        state.started = True
        state.adopt(verdict.request.context)
        state.guards = verdict.request.guards
        return [json.loads(raw) for raw in verdict.request.body.items]

    call(task, "k0")
    grace = call(task + rounds(1), "k1")
    assert grace[-1]["role"] == "user" and grace[-1]["content"].startswith(NOTICE_MARKER)
    answer = {"role": "assistant", "content": "done so far: nothing; left: the build"}
    later = call(task + rounds(1) + [answer, {"role": "user", "content": "next"}], "k2")
    # Append-only: what was forwarded is forwarded again, the notice in its place.
    assert later[:len(grace)] == grace and later[len(grace)] == answer


def test_a_refused_call_is_no_iteration() -> None:
    state = SessionState("s")
    verdict = Refused("budgets", 402, "over the cap", "cap_exhausted", "x",
                      request([{"role": "user", "content": "go"}], "k0"),
                      (IterationCounted(call_id="k0", turn="t", used=1),))
    assert not [e for e in verdict_events(state, verdict) if isinstance(e, IterationCounted)]


def test_an_unlimited_budget_forwards_every_call_and_counts_them_all() -> None:
    for limit in (0, -5):
        state, run = SessionState("s"), settings(limit)
        task = [{"role": "user", "content": "go"}]
        for n in range(120):
            sent = admit(state, run, request(task + rounds(n, f"echo {n}"), f"k{n}",
                                             tools=[SHELL]))
            assert sent.reply is None and "tool_choice" not in json.loads(
                sent.body.fields_bytes)
        assert counts(state) == (120, "forward")


def test_the_links_of_a_stored_chain_count_in_the_turn_they_continue() -> None:
    state, run, wire = SessionState("s"), settings(2), Responses()
    shell = {"tools": [{"type": "function", "name": "shell"}]}
    first = request([{"type": "message", "role": "user", "content": "go"}], "k0", wire,
                    **shell)
    admit(state, run, first)
    for n in (1, 2):  # each link sends only the last call's output
        link = msgspec.structs.replace(request([{"type": "function_call_output",
                                                 "call_id": f"c{n}", "output": "ok"}],
                                               f"k{n}", wire, **shell),
                                       continues=f"resp_{n}")
        sent = admit(state, run, link)
    assert counts(state) == (3, "grace")
    assert json.loads(sent.body.fields_bytes)["tool_choice"] == "none"


def test_a_new_turn_with_the_same_words_gets_its_own_grace_call() -> None:
    state, run = SessionState("s"), settings(1)
    history = [{"role": "user", "content": "continue"}]
    admit(state, run, request(history, "k0", tools=[SHELL]))
    history += rounds(1)
    admit(state, run, request(history, "k1", tools=[SHELL]))
    history += [{"role": "assistant", "content": "done"}]
    assert admit(state, run, request(history, "k2", tools=[SHELL])).reply is not None
    # The user says "continue" again: a new turn, whose own budget ends in a grace call.
    history += [{"role": "user", "content": "continue"}]
    admit(state, run, request(history, "k3", tools=[SHELL]))
    history += rounds(1, "echo again")
    spent = admit(state, run, request(history, "k4", tools=[SHELL]))
    assert spent.reply is None and counts(state) == (2, "grace")


def test_a_retry_of_a_stopped_call_is_stopped_again() -> None:
    state = SessionState("s")
    run = settings(0, hard_stop=True)._replace(on_exhausted="error")
    task = [{"role": "user", "content": "go"}]
    for n in range(1, 6):
        last = admit(state, run, request(task + rounds(n), f"k{n}"))
    assert last.reply is not None and last.reply.status == 429
    assert counts(state) == (5, "stop")
    # The client's SDK retries the 429: the same items, answered again, not sent.
    again = govern_runaway(run, state, request(task + rounds(5), "k6"), NOW)
    assert isinstance(again, Proceed) and not again.events
    assert again.request.reply is not None and again.request.reply.refused == "guardrail"
    assert again.request.reply.code == "guardrail_stop"
