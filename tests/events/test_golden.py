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
    CallAdmitted,
    CredentialAdded,
    CredentialRemoved,
    Event,
    EventDecodeError,
    LeaseAcquired,
    LeaseReleased,
    SessionStarted,
    UnknownEventType,
    UpstreamResponded,
    UsageRecorded,
    WalCheckpointed,
    parse_tag,
)
from sessionwarden.events.session import RateLimitBucketSeen

GOLDEN = Path(__file__).with_name("golden")
TAG = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.v[1-9][0-9]*$")

#: What each golden payload decodes to. Current versions set every field to a
#: non-default value, so the golden bytes pin the name and encoding of every field.
EXPECTED: dict[str, Event] = {
    "session.started.v1": SessionStarted(
        session_id="sess-v1", model="gpt-4o", client="", parent_session_id=None
    ),
    "session.started.v2": SessionStarted(
        session_id="sess-2", model="claude-sonnet", client="claude-code/1.2",
        parent_session_id="sess-1",
    ),
    "session.call_admitted.v1": CallAdmitted(
        call_id="call-1", session_id="sess-2", provider="anthropic", model="claude-sonnet",
        message_count=12, estimated_tokens=34567, stream=True,
    ),
    "session.upstream_responded.v1": UpstreamResponded(
        call_id="call-1", session_id="sess-2", status=429, latency_ms=812.5,
        credential="fp:9f2c",
        rate_limits=(
            RateLimitBucketSeen(name="requests", limit=50, remaining=0, reset_seconds=12.0),
            RateLimitBucketSeen(name="tokens"),
        ),
        retry_after_seconds=12.5, error="rate limited",
    ),
    "credential.added.v1": CredentialAdded(
        provider="openai", ref="env:OPENAI_API_KEY", fingerprint="fp:1a2b", source="cli"
    ),
    "credential.removed.v1": CredentialRemoved(
        provider="openai", fingerprint="fp:1a2b", reason="revoked"
    ),
    "credential.lease_acquired.v1": LeaseAcquired(
        provider="openai", fingerprint="fp:1a2b", call_id="call-7"
    ),
    "credential.lease_released.v1": LeaseReleased(
        provider="openai", fingerprint="fp:1a2b", call_id="call-7", status=200
    ),
    "usage.recorded.v1": UsageRecorded(
        call_id="call-7", session_id="sess-2", provider="openai", model="gpt-4o",
        credential="fp:1a2b", status=200, input_tokens=1200, output_tokens=340,
        cache_read_tokens=800, cache_write_tokens=64, reasoning_tokens=120,
        source="response", raw_usage='{"prompt_tokens":2064}', flags=("estimated",),
        cost="0.0123", cost_status="priced", stream=True, client_disconnected=True,
    ),
    "store.wal_checkpointed.v1": WalCheckpointed(
        mode="TRUNCATE", wal_frames=4096, checkpointed_frames=4096, reason="size"
    ),
}

#: Retired payloads cannot be produced by current code; they are written by hand, in the
#: shape the retired class encoded to (tag first, then fields in definition order).
RETIRED_PAYLOADS: dict[str, bytes] = {
    "session.started.v1": b'{"type":"session.started.v1","session_id":"sess-v1","model":"gpt-4o"}',
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
    assert on_disk == ALL_TAGS


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
    ["session.exploded.v1", "session.started.v3", "session.started.v0", "nonsense", ""],
)
def test_unknown_tag_raises_unknown_event_type(tag: str) -> None:
    with pytest.raises(UnknownEventType) as info:
        CODEC.decode(tag, b"{}")
    assert info.value.type_tag == tag
    assert not CODEC.knows(tag)


MALFORMED = [
    ("session.started.v2", b"not json"),
    ("session.started.v2", b'{"type":"session.started.v2","session_id":"s"'),
    ("session.started.v2", b"[1, 2]"),
    ("session.started.v2", b'{"type":"session.started.v2","model":"m"}'),
    ("session.started.v2", b'{"type":"session.started.v2","session_id":1,"model":"m"}'),
    ("session.started.v2", b'{"type":"credential.removed.v1","provider":"p","fingerprint":"f"}'),
    ("store.wal_checkpointed.v1", b'{"type":"store.wal_checkpointed.v1","mode":"FULL"}'),
    ("session.started.v1", b"not json"),
    ("session.started.v1", b"[1, 2]"),
    ("session.started.v1", b'{"type":"session.started.v1","session_id":"s"}'),
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
