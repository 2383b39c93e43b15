"""A Hypothesis state machine: random appends against the log and a tiny in-memory model.

Rules append to a few streams with an expected version that is right, wrong, ANY,
NO_STREAM or EXISTS, with or without idempotency keys (fresh, retried with the same
events, retried with different content). The model predicts every outcome; the
invariants check that global positions are gap-free, per-stream versions run 1..n,
``read_stream`` equals the model and the hash chain verifies.
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)
from sessionwarden.store import ANY, EXISTS, NO_STREAM, EventLog, NewEvent, StreamAppend
from sessionwarden.store.errors import IdempotencyConflict, WrongExpectedVersion
from sessionwarden.store.verify import verify_chain

STREAMS = ("alpha", "beta", "gamma")
PAYLOADS = st.binary(min_size=0, max_size=12)
EXPECTATIONS = st.sampled_from(["correct", "wrong", "any", "no_stream", "exists"])


@dataclass(frozen=True)
class Stored:
    seq: int
    stream: str
    version: int
    type: str
    data: bytes
    key: str | None


@dataclass(frozen=True)
class KeyedAppend:
    """An append made with idempotency keys, kept so that it can be retried."""

    stream: str
    events: tuple[NewEvent, ...]
    first_seq: int
    last_seq: int
    version: int


class EventLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sw-state-machine-"))
        self.log = EventLog(self.dir / "events.db")
        self.events: list[Stored] = []
        self.keyed: list[KeyedAppend] = []
        self.next_key = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model ---------------------------------------------------------------------

    def head(self, stream: str) -> int:
        return sum(1 for e in self.events if e.stream == stream)

    def expected(self, stream: str, how: str, wrong_by: int) -> object:
        head = self.head(stream)
        return {
            "correct": head,
            "wrong": head + wrong_by if head + wrong_by >= 0 and wrong_by else head + 1,
            "any": ANY,
            "no_stream": NO_STREAM,
            "exists": EXISTS,
        }[how]

    @staticmethod
    def accepted(expected: object, head: int) -> bool:
        if expected is ANY:
            return True
        if expected is NO_STREAM:
            return head == 0
        if expected is EXISTS:
            return head > 0
        return expected == head

    def record(self, stream: str, events: list[NewEvent]) -> tuple[int, int, int]:
        first_seq = len(self.events) + 1
        version = self.head(stream)
        for event in events:
            version += 1
            self.events.append(
                Stored(
                    len(self.events) + 1, stream, version, event.type, event.data,
                    event.idempotency_key,
                )
            )
        return first_seq, len(self.events), version

    def fresh_key(self) -> str:
        self.next_key += 1
        return f"key-{self.next_key}"

    # -- rules -------------------------------------------------------------------------

    @initialize()
    def start_empty(self) -> None:
        assert self.log.head()[0] == 0

    @rule(
        stream=st.sampled_from(STREAMS),
        payloads=st.lists(PAYLOADS, min_size=1, max_size=3),
        how=EXPECTATIONS,
        wrong_by=st.integers(-2, 2),
        keyed=st.booleans(),
    )
    def append(
        self, stream: str, payloads: list[bytes], how: str, wrong_by: int, keyed: bool
    ) -> None:
        expected = self.expected(stream, how, wrong_by)
        events = [
            NewEvent("test.appended.v1", data, idempotency_key=self.fresh_key() if keyed else None)
            for data in payloads
        ]
        head = self.head(stream)
        if self.accepted(expected, head):
            result = self.log.append(stream, events, expected_version=expected)  # type: ignore[arg-type]
            first_seq, last_seq, version = self.record(stream, events)
            assert (result.first_seq, result.last_seq, result.version) == (
                first_seq, last_seq, version,
            )
            assert not result.duplicate
            if keyed:
                self.keyed.append(KeyedAppend(stream, tuple(events), first_seq, last_seq, version))
        else:
            try:
                self.log.append(stream, events, expected_version=expected)  # type: ignore[arg-type]
            except WrongExpectedVersion as exc:
                assert exc.actual == head
            else:
                raise AssertionError(f"append to {stream} at {expected} (head {head}) succeeded")

    @rule(data=st.data(), how=EXPECTATIONS, wrong_by=st.integers(-2, 2))
    def retry_same(self, data: st.DataObject, how: str, wrong_by: int) -> None:
        """A retry returns the original positions whatever the stream's head is now."""
        if not self.keyed:  # a no-op rather than a precondition: fewer rejected examples
            return
        original = data.draw(st.sampled_from(self.keyed))
        expected = self.expected(original.stream, how, wrong_by)
        before = len(self.events)
        result = self.log.append(original.stream, original.events, expected_version=expected)  # type: ignore[arg-type]
        assert result.duplicate
        assert (result.first_seq, result.last_seq, result.version) == (
            original.first_seq, original.last_seq, original.version,
        )
        assert len(self.events) == before

    @rule(
        data=st.data(),
        change=st.sampled_from(["data", "type", "stream", "add_new_key", "add_unkeyed"]),
    )
    def retry_different(self, data: st.DataObject, change: str) -> None:
        if not self.keyed:
            return
        original = data.draw(st.sampled_from(self.keyed))
        events = list(original.events)
        stream = original.stream
        first = events[0]
        key = first.idempotency_key
        if change == "data":
            events[0] = NewEvent(first.type, first.data + b"!", idempotency_key=key)
        elif change == "type":
            events[0] = NewEvent("test.other.v1", first.data, idempotency_key=key)
        elif change == "stream":
            stream = next(s for s in STREAMS if s != stream)
        elif change == "add_new_key":
            events.append(NewEvent("test.appended.v1", b"new", idempotency_key=self.fresh_key()))
        else:
            events.append(NewEvent("test.appended.v1", b"unkeyed"))
        try:
            self.log.append(stream, events)
        except IdempotencyConflict:
            pass
        else:
            raise AssertionError(f"retry with changed {change} was accepted")

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def global_positions_are_gap_free(self) -> None:
        seqs = [e.seq for e in self.log.read_all()]
        assert seqs == list(range(1, len(self.events) + 1))
        assert self.log.head()[0] == len(self.events)

    @invariant()
    def streams_equal_the_model(self) -> None:
        for stream in STREAMS:
            stored = [
                Stored(e.seq, e.stream, e.version, e.type, e.data, e.idempotency_key)
                for e in self.log.read_stream(stream)
            ]
            assert stored == [e for e in self.events if e.stream == stream]
            assert [e.version for e in stored] == list(range(1, len(stored) + 1))
            assert self.log.stream_version(stream) == len(stored)

    @invariant()
    def chain_verifies(self) -> None:
        report = verify_chain(self.log.read_all())
        assert report.ok, report
        assert report.events == len(self.events)

    @invariant()
    def batches_are_atomic(self) -> None:
        """A failing multi-stream batch never leaves part of itself behind."""
        if len(self.events) % 5:
            return
        before = self.log.head()
        with pytest.raises(WrongExpectedVersion):
            self.log.append_batch(
                [
                    StreamAppend("alpha", (NewEvent("test.appended.v1", b"p"),), ANY),
                    StreamAppend("beta", (NewEvent("test.appended.v1", b"q"),), 10_000),
                ]
            )
        assert self.log.head() == before


EventLogMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEventLogStateMachine = EventLogMachine.TestCase
