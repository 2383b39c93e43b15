"""Spill over a call's new messages: turns, tool names, files asked for, stand-ins."""

from typing import Any

from sessionwarden.config import ToolsConfig
from sessionwarden.domain.context.messages import Message, ToolResult
from sessionwarden.domain.context.spill import (
    REDACTED_NOTE,
    TRUNCATION_MARKER,
    resolve_limits,
    spill_bytes,
    spill_name,
)
from sessionwarden.domain.context.spill_turns import SpillOutcome, apply_spills, plan_spills
from sessionwarden.upstream.chat_completions import ChatItems
from sessionwarden.upstream.chat_messages import to_neutral

CODEC = ChatItems()
LIMITS = resolve_limits(ToolsConfig(result_size_chars=1_000, turn_budget_chars=3_000,
                                    preview_chars=100), None)


def calls(*named: tuple[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}}
        for i, n in named]}


def result(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def text_of(message: Message) -> str:
    part = message.parts[0]
    assert isinstance(part, ToolResult)
    return "".join(getattr(p, "text", "") for p in part.parts)


def test_a_result_over_its_limit_is_planned_with_its_file_and_named_by_its_call() -> None:
    big = "line\n" * 400
    messages = to_neutral([calls(("c1", "terminal")), result("c1", big)])
    plan = plan_spills(messages, LIMITS, "/spill", first=7)
    [spill] = plan.spills
    assert (spill.message, spill.tool, spill.decision.reason) == (1, "terminal", "threshold")
    assert [f.name for f in plan.files] == [spill_name(big)]
    assert plan.files[0].data == spill_bytes(big)
    out, events = apply_spills(plan, SpillOutcome(), messages, CODEC, "call-9")
    assert out[0] == (messages[0], None)  # untouched: no new bytes
    replaced, raw = out[1]
    assert raw is not None and "/spill/" + spill_name(big) in text_of(replaced)
    assert CODEC.read_item(raw) == replaced
    [event] = events
    assert (event.message, event.file, event.chars, event.truncated) == (
        8, spill_name(big), 2_000, False)


def test_a_failed_write_truncates_inline_with_a_marker() -> None:
    big = "x" * 2_000
    messages = to_neutral([calls(("c1", "terminal")), result("c1", big)])
    plan = plan_spills(messages, LIMITS, "/spill")
    out, events = apply_spills(plan, SpillOutcome({spill_name(big): "disk full"}),
                               messages, CODEC, "c")
    assert TRUNCATION_MARKER in text_of(out[1][0])
    assert events[0].truncated and events[0].error == "disk full" and events[0].file == ""


def test_read_file_images_and_our_own_stand_ins_are_never_spilled() -> None:
    big = "y" * 5_000
    messages = to_neutral([
        calls(("a", "read_file"), ("b", "terminal"), ("c", "terminal")),
        result("a", big),
        result("b", [{"type": "text", "text": big},
                     {"type": "image_url", "image_url": {"url": "data:x"}}]),
        result("c", "[sessionwarden saved this tool result to a file]" + big),
    ])
    assert plan_spills(messages, LIMITS, "/spill").spills == ()


def test_turns_are_budgeted_apart_and_a_result_without_its_call_takes_the_default() -> None:
    mid = "z" * 900  # under the 1,000 limit; the turn's four make 3,601 > 3,000
    messages = to_neutral([
        result("old", "q" * 1_500),  # its call came in an earlier request
        {"role": "user", "content": "go on"},
        calls(("a", "t"), ("b", "t"), ("c", "t"), ("d", "t")),
        result("a", mid), result("b", mid), result("c", mid), result("d", mid + "!"),
    ])
    plan = plan_spills(messages, LIMITS, "/spill")
    # The largest goes first (d); its stand-in still leaves the turn over budget, so
    # the next largest goes too (the first of equals: a). The lone result is its own turn.
    assert [(s.message, s.tool, s.decision.reason) for s in plan.spills] == [
        (0, "", "threshold"), (3, "t", "turn_budget"), (6, "t", "turn_budget")]


# -- no secret at rest (issue 21, item 9) ---------------------------------------------------

KEY = "plainkey-0123456789abcdef"


def scrub(text: str) -> str:
    return text.replace(KEY, "[REDACTED:fp:000000000000]")


def test_a_spilled_result_is_scrubbed_before_it_is_named_written_and_previewed() -> None:
    big = f"env: {KEY}\n" + "line\n" * 400 + KEY
    clean = scrub(big)
    messages = to_neutral([calls(("c1", "terminal")), result("c1", big)])
    plan = plan_spills(messages, LIMITS, "/spill", scrub=scrub)
    [spill] = plan.spills
    assert spill.decision.redacted and spill.decision.content == clean
    # The name is the scrubbed text's hash, the file the scrubbed bytes.
    assert [(f.name, f.data) for f in plan.files] == [(spill_name(clean), spill_bytes(clean))]
    out, events = apply_spills(plan, SpillOutcome(), messages, CODEC, "c")
    text = text_of(out[1][0])
    assert KEY not in text and REDACTED_NOTE in text and "[REDACTED:fp:" in text
    assert events[0].chars == len(clean) and events[0].bytes == len(spill_bytes(clean))
    # A failed write previews the scrubbed text too, and says so.
    out, _ = apply_spills(plan, SpillOutcome({spill_name(clean): "disk full"}), messages,
                          CODEC, "c")
    fallback = text_of(out[1][0])
    assert KEY not in fallback and fallback.endswith("secrets in it were redacted]")


def test_a_result_without_secrets_is_spilled_as_before() -> None:
    big = "line\n" * 400
    messages = to_neutral([calls(("c1", "terminal")), result("c1", big)])
    scrubbed = plan_spills(messages, LIMITS, "/spill", scrub=scrub)
    assert scrubbed == plan_spills(messages, LIMITS, "/spill")
    assert not scrubbed.spills[0].decision.redacted
    assert REDACTED_NOTE not in scrubbed.spills[0].decision.replacement
