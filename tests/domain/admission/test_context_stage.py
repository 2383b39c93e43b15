"""The context stage, pure: recognition, spill work, compression decisions, records."""

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from sessionwarden.config import CompressionConfig, Config, ModelConfig, ProviderConfig
from sessionwarden.domain.admission.context_stage import ContextSettings, govern
from sessionwarden.domain.admission.pipeline import Need, Proceed, Refuse, StageResult
from sessionwarden.domain.calls import CallRequest
from sessionwarden.domain.context.spill_turns import SpillOutcome, SpillWork
from sessionwarden.domain.context.summariser import SummaryResult, SummaryWork
from sessionwarden.domain.context.trigger import MAX_UNFIT_COMPRESSIONS, CompressionGuard
from sessionwarden.domain.session import SessionState
from sessionwarden.events import (
    CallAdmitted,
    CallCompleted,
    ContextCompressed,
    HistoryReset,
    SummariserFailed,
    ToolResultSpilled,
)
from sessionwarden.upstream.chat_completions import ChatCompletions

WIRE = ChatCompletions()
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def config(**compression: Any) -> Config:
    return Config(
        providers=(ProviderConfig(name="p", base_url="http://127.0.0.1:9/v1"),),
        models=(ModelConfig(name="small", provider="p", context_length=16_000,
                            max_output_tokens=1_000),),
        compression=CompressionConfig(**compression))


def request(messages: list[dict[str, Any]], call_id: str = "c1") -> CallRequest:
    body = msgspec.json.encode({"model": "small", "messages": messages})
    conversation, shape = WIRE.read_request(body)
    conversation.fields_bytes, _ = WIRE.upstream_fields(conversation.fields, "small", False)
    return CallRequest(call_id=call_id, session_id="s", provider="p", model="small",
                       api_mode="chat_completions", shape=shape, body=conversation)


def run(settings: ContextSettings, state: SessionState, req: CallRequest,
        work: Any = None, now: datetime = NOW) -> StageResult:
    result = govern(settings, state, req, now)
    while isinstance(result, Need):
        result = result.resume(work(result.work) if callable(work) else work)
    return result


def admit(state: SessionState, result: StageResult) -> Proceed:
    """Fold what an admitted call decided, as the session's actor does."""
    assert isinstance(result, Proceed), result
    for event in result.events:
        state.fold(event)
    req = result.request
    state.fold(CallAdmitted(call_id=req.call_id, provider="p", model="small",
                            estimated_tokens=req.estimated_tokens))
    state.started = True
    state.adopt(req.context)
    return result


def sent(result: Proceed) -> list[Any]:
    return [msgspec.json.decode(item) for item in result.request.body.items]


SETTINGS = ContextSettings(config(), "/spill")


def test_a_first_call_is_forwarded_as_sent_and_recorded() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    result = admit(SessionState("s"), run(SETTINGS, SessionState("s"), request(messages)))
    assert sent(result) == messages
    record = result.request.record
    assert record is not None and record.fields is not None and record.system is not None
    assert (record.base, record.kept, len(record.system), len(record.appended)) == ("", 0, 1, 1)
    assert {key for key, _ in result.request.contents} == {
        record.fields[0], record.system[0][0], record.appended[0][0]}
    assert result.request.shape.prompt_tokens > 0


def test_a_resend_records_only_what_it_added_to_the_previous_call() -> None:
    state = SessionState("s")
    first = [{"role": "user", "content": "hi"}]
    admit(state, run(SETTINGS, state, request(first, "c1")))
    second = [*first, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "?"}]
    result = admit(state, run(SETTINGS, state, request(second, "c2")))
    record = result.request.record
    assert record is not None
    assert (record.base, record.kept, len(record.appended)) == ("c1", 1, 2)
    # The same fields and (no) system messages as c1's: not named again, not stored again.
    assert record.fields is None and record.system is None
    assert len(result.request.contents) == 2
    assert sent(result) == second


def test_an_invalid_new_message_is_refused_with_its_position() -> None:
    result = run(SETTINGS, SessionState("s"), request(
        [{"role": "system", "content": "x"}, {"role": "user", "content": "a"}, "oops"]))  # type: ignore[list-item]
    assert isinstance(result, Refuse) and result.status == 400
    assert result.message.startswith("messages[2]: ")


def test_a_session_known_from_the_log_but_not_in_memory_restarts_its_history() -> None:
    state = SessionState("s", started=True, calls=3)
    result = run(SETTINGS, state, request([{"role": "user", "content": "hi"}]))
    assert isinstance(result, Proceed)
    [reset] = [e for e in result.events if isinstance(e, HistoryReset)]
    assert "not rebuilt from the log" in reset.reason


def test_spill_work_is_asked_for_and_a_failure_truncates() -> None:
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "t1", "type": "function",
                     "function": {"name": "terminal", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "x" * 20_000}]
    first = govern(SETTINGS, SessionState("s"), request(messages), NOW)
    assert isinstance(first, Need) and isinstance(first.work, SpillWork)
    [spill_file] = first.work.files
    failed = first.resume(SpillOutcome({spill_file.name: "disk full"}))
    assert isinstance(failed, Proceed)
    [event] = [e for e in failed.events if isinstance(e, ToolResultSpilled)]
    assert event.truncated and event.error == "disk full"


def long_session(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
    for n in range(turns):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"t{n}", "type": "function",
             "function": {"name": "terminal", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"t{n}", "content": f"{n}\n" + "out\n" * 600}]
    return messages


def test_a_model_summary_is_asked_for_and_its_failure_falls_back_to_the_builtin() -> None:
    settings = ContextSettings(config(summariser="model"), "/spill")
    state = SessionState("s")
    admit(state, run(settings, state, request(long_session(1), "c1")))
    first = govern(settings, state, request(long_session(30), "c2"), NOW)
    assert isinstance(first, Need) and isinstance(first.work, SummaryWork)
    assert (first.work.provider, first.work.fallback_model) == ("p", "small")
    result = admit(state, first.resume(SummaryResult(failure="upstream 503")))
    [failed] = [e for e in result.events if isinstance(e, SummariserFailed)]
    assert (failed.action, failed.cooldown_s) == ("fallback", 60.0)
    [compressed] = [e for e in result.events if isinstance(e, ContextCompressed)]
    assert compressed.summariser == "builtin-fallback"
    # A reading judges the compression; cooling down, the next one does not ask the model.
    state.fold(CallCompleted(call_id="c2", input_tokens=4_000))
    later = run(settings, state, request(long_session(60), "c3"),
                now=NOW + timedelta(seconds=30))
    assert isinstance(later, Proceed)
    assert any(isinstance(e, SummariserFailed) and "cooling" in e.reason
               for e in later.events)


def test_a_first_call_over_its_threshold_is_summarised_by_the_builtin() -> None:
    settings = ContextSettings(config(summariser="model"), "/spill")
    result = run(settings, SessionState("s"), request(long_session(30)))
    assert isinstance(result, Proceed)
    [compressed] = [e for e in result.events if isinstance(e, ContextCompressed)]
    assert compressed.summariser == "builtin"


def test_abort_refuses_what_no_longer_fits_the_window() -> None:
    settings = ContextSettings(config(summariser="model", on_summary_failure="abort"),
                               "/spill")
    state = SessionState("s")
    admit(state, run(settings, state, request(long_session(1), "c1")))
    result = run(settings, state, request(long_session(80), "c2"),
                 work=SummaryResult(failure="timeout"))
    assert isinstance(result, Refuse) and result.status == 503
    assert "timeout" in result.message and result.code == "summary_failed"
    small = run(settings, state, request(long_session(25), "c3"),
                work=SummaryResult(failure="timeout"), now=NOW + timedelta(hours=1))
    assert isinstance(small, Proceed)  # over the trigger, within the window: forwarded whole
    assert not any(isinstance(e, ContextCompressed) for e in small.events)
    assert len(sent(small)) == len(long_session(25))


def test_a_models_entry_governs_it_under_either_of_its_names() -> None:
    for name in ("small", "p/small"):
        body = msgspec.json.encode({"model": name, "messages": long_session(30)})
        conversation, shape = WIRE.read_request(body)
        req = CallRequest(call_id="c", session_id="s", provider="p", model="small",
                          api_mode="chat_completions", shape=shape, body=conversation)
        result = run(SETTINGS, SessionState("s"), req)
        assert isinstance(result, Proceed)
        # Its 16K window, not the 128K default: the session is compressed.
        assert any(isinstance(e, ContextCompressed) for e in result.events), name


def test_the_system_messages_count_in_the_estimate_and_are_read_again_when_changed() -> None:
    state = SessionState("s")
    chat = [{"role": "user", "content": "hi"}]
    short = [{"role": "system", "content": "be brief"}]
    long = [{"role": "system", "content": "be brief " * 400}]
    one = admit(state, run(SETTINGS, state, request([*short, *chat], "c1")))
    two = admit(state, run(SETTINGS, state, request([*short, *chat, *chat], "c2")))
    # The same system message: its estimate carried over, not lost.
    assert two.request.shape.prompt_tokens > one.request.shape.prompt_tokens
    three = admit(state, run(SETTINGS, state, request([*long, *chat, *chat, *chat], "c3")))
    assert three.request.shape.prompt_tokens > two.request.shape.prompt_tokens + 700
    record = three.request.record
    assert record is not None and record.system is not None and record.fields is None


def tool_round(n: int, size: int) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"t{n}", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": f"t{n}", "content": f"{n} " + "y" * size}]


def test_a_prompt_over_the_window_is_compressed_though_the_guard_says_ineffective() -> None:
    state = SessionState("s")
    admit(state, run(SETTINGS, state, request(long_session(1), "c1")))
    state.adopt(state.context._replace(guard=CompressionGuard(unfit=MAX_UNFIT_COMPRESSIONS)))
    # ~20K tokens of history into a 16K window (15K room beside the 1K reserve).
    result = run(SETTINGS, state, request(long_session(60), "c2"))
    assert isinstance(result, Proceed)
    [compressed] = [e for e in result.events if isinstance(e, ContextCompressed)]
    assert compressed.tokens_before > 15_000 > result.request.shape.prompt_tokens


def test_a_prompt_no_compression_can_fit_is_refused_naming_the_sizes() -> None:
    # The newest tool result alone (read_file: never spilled) is larger than the window.
    messages = [{"role": "user", "content": "read it"}, *tool_round(1, 80_000)]
    result = run(SETTINGS, SessionState("s"), request(messages))
    assert isinstance(result, Refuse) and result.status == 400
    assert result.code == "context_length_exceeded"
    assert "small's context window" in result.message and "+ 1,000 reserved" in result.message
    assert "> 16,000" in result.message and "nothing was sent" in result.message


def test_with_compression_off_a_prompt_over_the_window_is_refused_not_sent() -> None:
    settings = ContextSettings(config(enabled=False), "/spill")
    assert isinstance(run(settings, SessionState("s"), request(long_session(25))), Proceed)
    result = run(settings, SessionState("s"), request(long_session(80)))
    assert isinstance(result, Refuse) and result.code == "context_length_exceeded"
    assert "compression could not shorten it" in result.message


def test_the_reserve_is_the_answers_limit_the_request_states() -> None:
    body = msgspec.json.encode({"model": "small", "messages": long_session(80),
                                "max_tokens": 800})
    conversation, shape = WIRE.read_request(body)
    req = CallRequest(call_id="c", session_id="s", provider="p", model="small",
                      api_mode="chat_completions", shape=shape, body=conversation)
    result = run(ContextSettings(config(enabled=False), "/spill"), SessionState("s"), req)
    assert isinstance(result, Refuse) and "+ 800 reserved for the answer" in result.message


def test_a_compression_the_upstreams_overflow_asks_for_is_never_blocked_by_the_guard() -> None:
    # The resend after a provider's context-length error asks for a compaction (the
    # SessionActor folds a CompactionRequested): the guard, even "ineffective", has no say.
    from sessionwarden.events import CompactionRequested

    state = SessionState("s")
    admit(state, run(SETTINGS, state, request(long_session(1), "c1")))
    state.adopt(state.context._replace(guard=CompressionGuard(  # type: ignore[union-attr]
        unfit=MAX_UNFIT_COMPRESSIONS, awaiting_reading=True)))
    state.fold(CompactionRequested(focus="the upstream said the request is too long"))
    result = run(SETTINGS, state, request(long_session(20), "c2"))
    assert isinstance(result, Proceed)
    assert any(isinstance(e, ContextCompressed) and e.trigger == "requested"
               for e in result.events)


def chained(messages: list[dict[str, Any]], call_id: str, carried: int) -> CallRequest:
    """A request continuing a stored response: its items are new, the rest the provider's."""
    return msgspec.structs.replace(request(messages, call_id), continues="resp_1",
                                   carried_tokens=carried)


def test_a_link_of_a_chain_is_governed_alone_with_the_chain_in_its_estimate() -> None:
    state = SessionState("s")
    admit(state, run(SETTINGS, state, request([{"role": "user", "content": "hi"}], "c1")))
    link = [{"role": "user", "content": "and then?"}]
    result = admit(state, run(SETTINGS, state, chained(link, "c2", 2_000)))
    # Not a history that changed (no reset), not a resend of c1's (nothing kept).
    assert not any(isinstance(e, HistoryReset) for e in result.events)
    assert sent(result) == link and result.request.record is not None
    assert result.request.record.kept == 0
    assert result.request.estimated_tokens == result.request.shape.prompt_tokens + 2_000


def test_a_link_over_its_threshold_is_not_compressed_and_over_the_window_is_refused() -> None:
    long = long_session(25)  # over the trigger alone, within the window
    fits = run(SETTINGS, SessionState("s"), chained(long, "c1", 0))
    assert isinstance(fits, Proceed) and sent(fits) == long
    assert not any(isinstance(e, ContextCompressed) for e in fits.events)
    refused = run(SETTINGS, SessionState("s"), chained(long, "c1", 9_000))
    assert isinstance(refused, Refuse) and refused.code == "context_length_exceeded"
    assert "'resp_1'" in refused.message and "~9,000 tokens" in refused.message
    assert "store: false" in refused.message and "nothing was sent" in refused.message
