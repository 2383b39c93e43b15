"""Golden payloads: every event type and version ever written must stay decodable.

``golden/<tag>.json`` holds one stored payload per type tag, byte for byte as the log
stores it, including retired tags (``session.started.v1``) that are only read and upcast.
A golden file is never edited or regenerated once committed: it stands for events already
in users' logs. Adding an event type means adding its expected value to ``EXPECTED`` and
running ``python tests/events/test_golden.py``, which writes golden files for tags that
have none (and never overwrites one).
"""

import re
import sys
from pathlib import Path

import msgspec
import pytest
from sessionwarden.events import (
    ALL_EVENTS,
    CODEC,
    WITHDRAWN_TAGS,
    BreakerChanged,
    CallAdmitted,
    CallAttempt,
    CallCompleted,
    CallRefused,
    CallResent,
    CompactionRequested,
    CompactionSkipped,
    CompressionDropped,
    CompressionPrepared,
    CompressionPreparing,
    ContextCompressed,
    ContextLimits,
    CredentialAdded,
    CredentialRemoved,
    CreditNoticeCleared,
    CreditNoticeRaised,
    CreditsObserved,
    Event,
    EventDecodeError,
    GuardrailTripped,
    HistoryReset,
    IterationCounted,
    IterationsAdjusted,
    KeyStateChanged,
    ListedPrice,
    PriceListingPublished,
    RateLimitBucketSeen,
    RateLimitsObserved,
    RequestRecord,
    SessionCapSet,
    SessionStarted,
    SpillEvicted,
    SummariserFailed,
    ToolResultSpilled,
    UnknownEventType,
    WalCheckpointed,
    parse_tag,
)

GOLDEN = Path(__file__).with_name("golden")
TAG = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.v[1-9][0-9]*$")

#: What each golden payload decodes to. Current versions set every field to a
#: non-default value, so the golden bytes pin the name and encoding of every field.
EXPECTED: dict[str, Event] = {
    "budgets.session_cap_set.v1": SessionCapSet(session_id="sess-7", usd="2.50"),
    "session.started.v1": SessionStarted(model="gpt-4o", client="", parent_session_id=None),
    "session.started.v2": SessionStarted(
        model="claude-sonnet", client="claude-code/1.2", parent_session_id="sess-1",
    ),
    "session.started.v3": SessionStarted(
        model="openai/gpt-4.1", client="codex/0.9", parent_session_id="sess-0",
    ),
    "session.call_admitted.v1": CallAdmitted(
        call_id="call-1", provider="anthropic", model="claude-sonnet",
        message_count=12, estimated_tokens=34567, stream=True,
    ),
    "session.call_admitted.v2": CallAdmitted(
        call_id="c3vd2xk7m4qa5bde", provider="openai", model="gpt-4.1",
        message_count=40, estimated_tokens=51234, stream=True,
    ),
    "session.call_admitted.v3": CallAdmitted(
        call_id="c3vd2xk7m4qa5bdh", provider="openai", model="gpt-4.1-mini",
        message_count=3, estimated_tokens=4100, stream=True, purpose="summary",
        parent_call="c3vd2xk7m4qa5bdg", request=RequestRecord(
            fields=("0f" * 16, 61), items_key="input", system=(("1a" * 16, 120),),
            base="c3vd2xk7m4qa5bdf", kept=40, appended=(("2b" * 16, 310), ("3c" * 16, 1502)),
            stored=False, withheld=("3c" * 16,)),
    ),
    "session.call_admitted.v4": CallAdmitted(
        call_id="c3vd2xk7m4qa5bdj", provider="openai", model="gpt-4.1-mini",
        message_count=3, estimated_tokens=4100, stream=True, purpose="summary",
        parent_call="c3vd2xk7m4qa5bdg", request=RequestRecord(
            fields=("0f" * 16, 61), items_key="input", system=(("1a" * 16, 120),),
            base="c3vd2xk7m4qa5bdf", kept=40, appended=(("2b" * 16, 310), ("3c" * 16, 1502)),
            stored=False, withheld=("3c" * 16,)),
        limits=ContextLimits(threshold=12_750, window=32_000, compression=False),
    ),
    "session.call_admitted.v5": CallAdmitted(
        call_id="c3vd2xk7m4qa5bdk", provider="openai", model="gpt-4.1-mini",
        message_count=4, estimated_tokens=4300, stream=True, purpose="summary",
        parent_call="c3vd2xk7m4qa5bdg", request=RequestRecord(
            fields=("0f" * 16, 61), items_key="input", system=(("1a" * 16, 120),),
            base="c3vd2xk7m4qa5bdj", kept=40, appended=(("2b" * 16, 310), ("3c" * 16, 1502)),
            stored=False, withheld=("3c" * 16,), tokens=(82, 371), sources=(40, -1),
            covers=42, replaced=("4d" * 16,)),
        limits=ContextLimits(threshold=12_750, window=32_000, compression=False),
    ),
    "session.call_refused.v1": CallRefused(
        call_id="c3vd2xk7m4qa5bdf", stage="validation", status=400,
        reason="'messages' must contain at least one message", code="empty_messages",
    ),
    "session.call_completed.v1": CallCompleted(
        call_id="c3vd2xk7m4qa5bde", outcome="truncated", status=429, latency_ms=812.5,
        credential="fp:9f2c", input_tokens=1200, output_tokens=340, cache_read_tokens=800,
        cache_write_tokens=64, reasoning_tokens=120, source="estimated",
        flags=("rejected:prompt_tokens",), raw_usage='{"prompt_tokens":-1}',
        retry_after_seconds=12.5, error="rate limited", cost="0.0123", cost_status="actual",
    ),
    "session.call_completed.v2": CallCompleted(
        call_id="c3vd2xk7m4qa5bde", outcome="truncated", status=429, latency_ms=812.5,
        credential="fp:9f2c", input_tokens=1200, output_tokens=340, cache_read_tokens=800,
        cache_write_tokens=64, reasoning_tokens=120, source="estimated",
        flags=("rejected:prompt_tokens",), raw_usage='{"prompt_tokens":-1}',
        retry_after_seconds=12.5, error="rate limited", cost="0.0123", cost_status="actual",
        cost_source="genai-prices@0.2.3", cost_version="0.2.3",
    ),
    "session.call_completed.v3": CallCompleted(
        call_id="c3vd2xk7m4qa5bdh", outcome="upstream_error", status=429, latency_ms=64.25,
        credential="fp:b7e1", input_tokens=1200, output_tokens=340, cache_read_tokens=800,
        cache_write_tokens=64, reasoning_tokens=120, source="estimated",
        flags=("rejected:prompt_tokens",), raw_usage='{"prompt_tokens":-1}',
        retry_after_seconds=3600.0, error="rate limited", cost="0.0123", cost_status="actual",
        cost_source="override", cost_version="config",
        attempts=(CallAttempt(credential="fp:9f2c", status=429, error_class="rate_limit"),),
        error_class="rate_limit",
    ),
    "session.call_completed.v4": CallCompleted(
        call_id="c3vd2xk7m4qa5bdh", outcome="upstream_error", status=429, latency_ms=64.25,
        credential="fp:b7e1", input_tokens=1200, output_tokens=340, cache_read_tokens=800,
        cache_write_tokens=64, reasoning_tokens=120, source="estimated",
        flags=("rejected:prompt_tokens",), raw_usage='{"prompt_tokens":-1}',
        retry_after_seconds=3600.0, error="rate limited", cost="0.0123", cost_status="actual",
        cost_source="override", cost_version="config",
        attempts=(CallAttempt(credential="fp:9f2c", status=429, error_class="rate_limit"),),
        error_class="rate_limit", response_id="resp_68b1c0ffee", web_searches=3,
    ),
    "session.call_resent.v1": CallResent(
        call_id="c3vd2xk7m4qa5bdh", reason="context_overflow", request=RequestRecord(
            fields=("9f" * 16, 88), items_key="messages", system=(("2a" * 16, 120),),
            base="", kept=0, appended=(("5c" * 16, 1800), ("77" * 16, 64)), stored=True),
        provider="backup", model="gpt-4.1-mini"),
    "session.call_resent.v2": CallResent(
        call_id="c3vd2xk7m4qa5bdk", reason="context_overflow", request=RequestRecord(
            fields=("9f" * 16, 88), items_key="input", system=(("2a" * 16, 120),),
            base="c3vd2xk7m4qa5bdj", kept=2, appended=(("5c" * 16, 1800), ("77" * 16, 64)),
            stored=False, withheld=("77" * 16,), tokens=(460, 20), sources=(-1, 3),
            covers=4, replaced=("6e" * 16, "6f" * 16, "70" * 16)),
        provider="backup", model="gpt-4.1-mini"),
    "context.tool_result_spilled.v1": ToolResultSpilled(
        call_id="c3vd2xk7m4qa5bdg", message=41, tool="terminal", reason="turn",
        file="4d" * 16 + ".txt", chars=150_000, bytes=150_210, preview_chars=1480,
        truncated=True, error="disk full",
    ),
    "context.history_reset.v1": HistoryReset(
        call_id="c3vd2xk7m4qa5bdg", reason="message 12 was edited", matched=12,
    ),
    "context.compressed.v1": ContextCompressed(
        call_id="c3vd2xk7m4qa5bdg", trigger="requested", summariser="builtin-fallback",
        model="openai/gpt-4.1-mini", focus="the failing test", source="real",
        tokens_before=70_000, tokens_after=21_000, threshold=64_000, messages_before=160,
        messages_after=24, summarised=130, pruned=17, summary=("5e" * 16, 2400),
    ),
    "context.compressed.v2": ContextCompressed(
        call_id="c3vd2xk7m4qa5bdk", trigger="cold_cache", summariser="model",
        model="openai/gpt-4.1-mini", focus="the failing test", source="real",
        tokens_before=70_000, tokens_after=21_000,
        threshold=64_000, messages_before=160, messages_after=24, summarised=130, pruned=17,
        summary=("5e" * 16, 2400), state=("5f" * 16, 2210), prepared=True, waited_ms=12,
        cache_write_usd="0.078750", saved_usd_per_call="0.014700",
    ),
    "context.summariser_failed.v1": SummariserFailed(
        call_id="c3vd2xk7m4qa5bdg", model="openai/gpt-4.1-mini", reason="upstream 503",
        action="abort", cooldown_s=60.0,
    ),
    "context.compaction_requested.v1": CompactionRequested(focus="the database schema"),
    "context.compression_preparing.v1": CompressionPreparing(
        call_id="c3vd2xk7m4qa5bdk", messages=160, tokens=56_000),
    "context.compression_prepared.v1": CompressionPrepared(
        call_id="c3vd2xk7m4qa5bdk", prefix="7a" * 16, messages_before=160,
        compacted=RequestRecord(fields=("0f" * 16, 61), appended=(("5e" * 16, 2400),),
                                tokens=(600,), sources=(-1,), covers=170),
        summariser="builtin", model="openai/gpt-4.1-mini", summarised=130, pruned=17,
        tokens_before=56_000, tokens_after=18_000, summary=("5e" * 16, 2400),
        state=("5f" * 16, 2210)),
    "context.compression_dropped.v1": CompressionDropped(
        call_id="c3vd2xk7m4qa5bdk", reason="the history was reset"),
    "context.compaction_skipped.v1": CompactionSkipped(
        call_id="c3vd2xk7m4qa5bdg", reason="nothing to summarise"),
    "context.spill_evicted.v1": SpillEvicted(
        file="3f" * 32 + ".txt", bytes=112_640, reason="quota_at_start",
        quota_bytes=268_435_456, used_bytes=268_500_000),
    "credential.added.v1": CredentialAdded(
        provider="openai", ref="env:OPENAI_API_KEY", fingerprint="fp:1a2b", source="cli"
    ),
    "credential.added.v2": CredentialAdded(
        provider="openrouter", ref="env:OPENROUTER_KEY_B", fingerprint="fp:3c4d",
        source="keys-add",
    ),
    "credential.removed.v1": CredentialRemoved(
        provider="openai", fingerprint="fp:1a2b", reason="revoked"
    ),
    "credential.removed.v2": CredentialRemoved(
        provider="openrouter", fingerprint="fp:3c4d", reason="not configured"
    ),
    "credits.observed.v1": CreditsObserved(
        credential="fp:7a1e", source="balance", remaining_micros=8_000_000,
        remaining_usd="8.00", subscription_micros=-1_500_000, subscription_usd="-1.50",
        rollover_micros=250_000, purchased_micros=9_500_000, purchased_usd="9.50",
        as_of_ms=1_764_640_000_000, subscription_limit_micros=20_000_000,
        subscription_limit_usd="20.00", denominator_kind="subscription_cap",
        paid_access=False, seen_below_lowest=True, seen_grant_unspent=True, band=90,
        grant_spent_shown=True, depleted_shown=True,
    ),
    "credits.notice_raised.v1": CreditNoticeRaised(
        credential="fp:7a1e", key="credits.usage", level="warn",
        message="used $18.00 of the $20.00 credit cap (90%)", band=90, ttl_ms=8000,
    ),
    "credits.notice_cleared.v1": CreditNoticeCleared(credential="fp:7a1e", key="credits.usage"),
    "ratelimit.observed.v1": RateLimitsObserved(
        credential="fp:9f2c",
        buckets=(
            RateLimitBucketSeen(name="requests", limit=50, remaining=0, reset_seconds=12.0),
            RateLimitBucketSeen(name="tokens", limit=40000, remaining=39000),
        ),
    ),
    "credential.state_changed.v1": KeyStateChanged(
        provider="openrouter", fingerprint="fp:3c4d5e6f7a8b", state="exhausted",
        previous="cooling", at="2026-12-02T12:00:00.000+00:00",
        until="2026-12-02T13:00:00.000+00:00", reason="genuine_limit", status=429,
    ),
    "ratelimit.breaker_changed.v1": BreakerChanged(
        provider="deepseek", state="open", until="2026-12-02T12:05:00.000+00:00",
        reason="no_usable_key",
    ),
    "store.wal_checkpointed.v1": WalCheckpointed(
        mode="TRUNCATE", wal_frames=4096, checkpointed_frames=4096, reason="size"
    ),
    "runaway.iteration_counted.v1": IterationCounted(
        call_id="c3vd2xk7m4qa5bdk", turn="9e" * 16, used=4, limit=3, decision="grace",
        items=17, last="5a" * 16, child="sub-agent-2"),
    "runaway.guardrail_tripped.v1": GuardrailTripped(
        call_id="c3vd2xk7m4qa5bdk", rule="exact_failure", level="stop", tool="shell",
        signature="b4" * 32, count=5, stopped=True),
    "runaway.iterations_adjusted.v1": IterationsAdjusted(consumed=2, refunded=1, used=5),
    "store.wal_checkpointed.v2": WalCheckpointed(
        mode="PASSIVE", wal_frames=1000, checkpointed_frames=998, reason="50 commits"
    ),
    "prices.listing_published.v1": PriceListingPublished(
        version="5d41402abc4b2a76",
        models=(
            ListedPrice(model="anthropic/claude-sonnet-4.5", input="3", output="15",
                        cache_read="0.3", cache_write="3.75", request="0.0005"),
            ListedPrice(model="openai/gpt-4.1-mini", input="0.4", output="1.6"),
        ),
        skipped=2,
    ),
}

#: Retired payloads cannot be produced by current code: they are the bytes the retired
#: classes encoded to (the tag first, then fields in definition order), as users' logs
#: hold them.
RETIRED_PAYLOADS: dict[str, bytes] = {
    "session.call_admitted.v4": (
        b'{"call_id":"c3vd2xk7m4qa5bdj","provider":"openai","model":"gpt-4.1-mini","messag'
        b'e_count":3,"estimated_tokens":4100,"stream":true,"purpose":"summary","parent_cal'
        b'l":"c3vd2xk7m4qa5bdg","request":{"fields":["0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",61'
        b'],"items_key":"input","system":[["1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a",120]],"base"'
        b':"c3vd2xk7m4qa5bdf","kept":40,"appended":[["2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b",31'
        b'0],["3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c",1502]],"stored":false,"withheld":["3c3c3c'
        b'3c3c3c3c3c3c3c3c3c3c3c3c3c"]},"limits":{"threshold":12750,"window":32000,"compre'
        b'ssion":false}}'
    ),
    "session.call_resent.v1": (
        b'{"call_id":"c3vd2xk7m4qa5bdh","reason":"context_overflow","request":{"fields":["'
        b'9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f9f",88],"system":[["2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a'
        b'2a",120]],"appended":[["5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c",1800],["77777777777777'
        b'777777777777777777",64]]},"provider":"backup","model":"gpt-4.1-mini"}'
    ),
    "context.compressed.v1": (
        b'{"call_id":"c3vd2xk7m4qa5bdg","trigger":"requested","summariser":"builtin-fallba'
        b'ck","model":"openai/gpt-4.1-mini","focus":"the failing test","source":"real","to'
        b'kens_before":70000,"tokens_after":21000,"threshold":64000,"messages_before":160,'
        b'"messages_after":24,"summarised":130,"pruned":17,"summary":["5e5e5e5e5e5e5e5e5e5'
        b'e5e5e5e5e5e5e",2400]}'
    ),
    "session.started.v1": b'{"type":"session.started.v1","session_id":"sess-v1","model":"gpt-4o"}',
    "session.started.v2": (
        b'{"type":"session.started.v2","session_id":"sess-2","model":"claude-sonnet",'
        b'"client":"claude-code/1.2","parent_session_id":"sess-1"}'
    ),
    "session.call_admitted.v1": (
        b'{"type":"session.call_admitted.v1","call_id":"call-1","session_id":"sess-2",'
        b'"provider":"anthropic","model":"claude-sonnet","message_count":12,'
        b'"estimated_tokens":34567,"stream":true}'
    ),
    "session.call_admitted.v2": (
        b'{"call_id":"c3vd2xk7m4qa5bde","provider":"openai","model":"gpt-4.1",'
        b'"message_count":40,"estimated_tokens":51234,"stream":true}'
    ),
    "session.call_admitted.v3": (
        b'{"call_id":"c3vd2xk7m4qa5bdh","provider":"openai","model":"gpt-4.1-mini","messag'
        b'e_count":3,"estimated_tokens":4100,"stream":true,"purpose":"summary","parent_cal'
        b'l":"c3vd2xk7m4qa5bdg","request":{"fields":["0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",61'
        b'],"items_key":"input","system":[["1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a",120]],"base"'
        b':"c3vd2xk7m4qa5bdf","kept":40,"appended":[["2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b",31'
        b'0],["3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c",1502]],"stored":false,"withheld":["3c3c3c'
        b'3c3c3c3c3c3c3c3c3c3c3c3c3c"]}}'
    ),
    "session.call_completed.v1": (
        b'{"call_id":"c3vd2xk7m4qa5bde","outcome":"truncated","status":429,"latency_ms":81'
        b'2.5,"credential":"fp:9f2c","input_tokens":1200,"output_tokens":340,"cache_read_t'
        b'okens":800,"cache_write_tokens":64,"reasoning_tokens":120,"source":"estimated","'
        b'flags":["rejected:prompt_tokens"],"raw_usage":"{\\"prompt_tokens\\":-1}","retry_af'
        b'ter_seconds":12.5,"error":"rate limited","cost":"0.0123","cost_status":"actual"}'
    ),
    "session.call_completed.v2": (
        b'{"call_id":"c3vd2xk7m4qa5bde","outcome":"truncated","status":429,"latency_ms":81'
        b'2.5,"credential":"fp:9f2c","input_tokens":1200,"output_tokens":340,"cache_read_t'
        b'okens":800,"cache_write_tokens":64,"reasoning_tokens":120,"source":"estimated","'
        b'flags":["rejected:prompt_tokens"],"raw_usage":"{\\"prompt_tokens\\":-1}","retry_af'
        b'ter_seconds":12.5,"error":"rate limited","cost":"0.0123","cost_status":"actual",'
        b'"cost_source":"genai-prices@0.2.3","cost_version":"0.2.3"}'
    ),
    "session.call_completed.v3": (
        b'{"call_id":"c3vd2xk7m4qa5bdh","outcome":"upstream_error","status":429,"latency_m'
        b's":64.25,"credential":"fp:b7e1","input_tokens":1200,"output_tokens":340,"cache_r'
        b'ead_tokens":800,"cache_write_tokens":64,"reasoning_tokens":120,"source":"estimat'
        b'ed","flags":["rejected:prompt_tokens"],"raw_usage":"{\\"prompt_tokens\\":-1}","ret'
        b'ry_after_seconds":3600.0,"error":"rate limited","cost":"0.0123","cost_status":"a'
        b'ctual","cost_source":"override","cost_version":"config","attempts":[{"credential'
        b'":"fp:9f2c","status":429,"error_class":"rate_limit"}],"error_class":"rate_limit"'
        b'}'
    ),
    "credential.added.v1": (
        b'{"type":"credential.added.v1","provider":"openai","ref":"env:OPENAI_API_KEY",'
        b'"fingerprint":"fp:1a2b","source":"cli"}'
    ),
    "credential.removed.v1": (
        b'{"type":"credential.removed.v1","provider":"openai","fingerprint":"fp:1a2b",'
        b'"reason":"revoked"}'
    ),
    "store.wal_checkpointed.v1": (
        b'{"type":"store.wal_checkpointed.v1","mode":"TRUNCATE","wal_frames":4096,'
        b'"checkpointed_frames":4096,"reason":"size"}'
    ),
}

ALL_TAGS = sorted(set(CODEC.classes) | CODEC.retired_tags)
CURRENT_TAGS = sorted(CODEC.classes)


def golden_path(tag: str) -> Path:
    return GOLDEN / f"{tag}.json"


def golden(tag: str) -> bytes:
    # Files are stored without a trailing newline; tolerate one added by an editor.
    return golden_path(tag).read_bytes().removesuffix(b"\n")


def test_every_tag_has_a_golden_file_and_every_golden_file_a_tag() -> None:
    on_disk = sorted(p.name.removesuffix(".json") for p in GOLDEN.glob("*.json"))
    # A golden file without a tag means a tag was dropped: stored events became unreadable.
    # The only exceptions are the withdrawn pre-release tags, whose logs are refused.
    assert on_disk == sorted([*ALL_TAGS, *WITHDRAWN_TAGS])


@pytest.mark.parametrize("tag", sorted(WITHDRAWN_TAGS))
def test_withdrawn_tags_keep_their_golden_file_and_are_not_read(tag: str) -> None:
    assert golden_path(tag).exists()
    assert tag not in ALL_TAGS
    with pytest.raises(UnknownEventType):
        CODEC.decode(tag, golden(tag))


def test_current_payloads_carry_no_tag_and_omit_defaults() -> None:
    encoded = CODEC.encode(CallCompleted(call_id="c1"))
    assert encoded.data == b'{"call_id":"c1"}'
    for tag in CURRENT_TAGS:
        assert b'"type"' not in golden(tag)


def test_every_tag_has_an_expected_value() -> None:
    assert sorted(EXPECTED) == ALL_TAGS


def test_all_events_is_the_codec_registry() -> None:
    assert {cls.type_tag(): cls for cls in ALL_EVENTS} == dict(CODEC.classes)


@pytest.mark.parametrize("tag", ALL_TAGS)
def test_tags_are_context_name_version(tag: str) -> None:
    assert TAG.match(tag), tag
    name, version = parse_tag(tag)
    assert tag == f"{name}.v{version}"


@pytest.mark.parametrize("tag", ALL_TAGS)
def test_golden_decodes_to_the_expected_event(tag: str) -> None:
    decoded = CODEC.decode(tag, golden(tag))
    assert decoded == EXPECTED[tag]
    assert type(decoded) is type(EXPECTED[tag])


@pytest.mark.parametrize("tag", CURRENT_TAGS)
def test_current_golden_reencodes_to_the_same_bytes(tag: str) -> None:
    encoded = CODEC.encode(CODEC.decode(tag, golden(tag)))
    assert encoded.type == tag
    assert encoded.schema_version == parse_tag(tag)[1]
    assert encoded.data == golden(tag)


@pytest.mark.parametrize("tag", CURRENT_TAGS)
def test_current_golden_sets_every_field(tag: str) -> None:
    """A field left at its default is not pinned by the golden bytes' values."""
    event = EXPECTED[tag]
    for field in msgspec.structs.fields(type(event)):
        if field.default is not msgspec.NODEFAULT:
            assert getattr(event, field.name) != field.default, f"{tag}.{field.name}"


@pytest.mark.parametrize("tag", sorted(CODEC.retired_tags))
def test_retired_tag_upcasts_to_a_newer_version_of_the_same_event(tag: str) -> None:
    assert golden(tag) == RETIRED_PAYLOADS[tag]
    decoded = CODEC.decode(tag, golden(tag))
    new_tag = type(decoded).type_tag()
    assert parse_tag(new_tag)[0] == parse_tag(tag)[0]
    assert parse_tag(new_tag)[1] > parse_tag(tag)[1]
    assert CODEC.encode(decoded).type == new_tag  # retired tags are never written


@pytest.mark.parametrize(
    "tag",
    ["session.exploded.v1", "session.started.v4", "session.started.v0", "nonsense", ""],
)
def test_unknown_tag_raises_unknown_event_type(tag: str) -> None:
    with pytest.raises(UnknownEventType) as info:
        CODEC.decode(tag, b"{}")
    assert info.value.type_tag == tag
    assert not CODEC.knows(tag)


MALFORMED = [
    ("session.started.v3", b"not json"),
    ("session.started.v3", b'{"model":"m"'),
    ("session.started.v3", b"[1, 2]"),
    ("session.started.v3", b'{"client":"c"}'),
    ("session.started.v3", b'{"model":1}'),
    ("session.call_completed.v1", b'{"outcome":"ok"}'),
    ("session.call_completed.v1", b'{"call_id":"c","input_tokens":"12"}'),
    ("store.wal_checkpointed.v2", b'{"mode":"FULL"}'),
    ("session.started.v1", b"not json"),
    ("session.started.v1", b"[1, 2]"),
    ("session.started.v1", b'{"type":"session.started.v1","session_id":"s","model":7}'),
]


@pytest.mark.parametrize(("tag", "payload"), MALFORMED)
def test_malformed_payload_raises_event_decode_error(tag: str, payload: bytes) -> None:
    with pytest.raises(EventDecodeError) as info:
        CODEC.decode(tag, payload)
    assert info.value.type_tag == tag


def write_missing_goldens() -> list[Path]:
    """Write golden files for tags that have none; never touch an existing one."""
    written = []
    GOLDEN.mkdir(exist_ok=True)
    for tag in ALL_TAGS:
        path = golden_path(tag)
        if path.exists():
            continue
        if tag in RETIRED_PAYLOADS:
            data = RETIRED_PAYLOADS[tag]
        else:
            encoded = CODEC.encode(EXPECTED[tag])
            assert encoded.type == tag
            data = encoded.data
        path.write_bytes(data)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_missing_goldens():
        print(f"wrote {path}", file=sys.stderr)


def test_tags_of_names_every_stored_tag_that_decodes_to_a_class() -> None:
    assert CODEC.tags_of(CallAdmitted) == {
            "session.call_admitted.v1", "session.call_admitted.v2", "session.call_admitted.v3",
        "session.call_admitted.v4", "session.call_admitted.v5"}
    assert CODEC.tags_of(CallCompleted) == {
        "session.call_completed.v1", "session.call_completed.v2",
        "session.call_completed.v3", "session.call_completed.v4"}
    for cls in ALL_EVENTS:
        for tag in CODEC.tags_of(cls):
            assert type(CODEC.decode(tag, golden(tag))) is cls
