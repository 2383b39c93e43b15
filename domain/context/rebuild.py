"""A session's governed history rebuilt from its log: a restart resumes where it was.

:class:`HistoryFold` folds a session's events in order into the history it forwarded
last, from each call's :class:`~sessionwarden.events.RequestRecord` (the first ``kept``
items of call ``base``, then ``appended``, each with its estimate and source);
:meth:`HistoryFold.result` adds the stand-ins' bytes and the summary state from the log's
contents. No item is decoded and no summary made again: the next resend is forwarded
byte for byte as it would have been without the restart.

Rules:
- The events a stage decided for a call (HistoryReset, ContextCompressed,
  SummariserFailed) count only once the call is admitted: a refused call's decisions
  were never adopted.
- A resend (CallResent without a provider) is a new record of the same call; a reroute
  (with one) changes only the fields sent, not the governed history.
- When the history cannot be rebuilt (a record from before CallAdmitted v5, a base that
  is not the last history, ``record_messages = false``, a content missing), ``result`` is
  the reason, and the session's next call resets with it.
"""

from collections.abc import Mapping
from typing import NamedTuple

from sessionwarden.domain.context.compression import decode_summary
from sessionwarden.domain.context.history import GovernedHistory, Item
from sessionwarden.domain.context.prepared import PreparedCompression
from sessionwarden.events import (
    CallAdmitted,
    CallRefused,
    CallResent,
    CompressionDropped,
    CompressionPrepared,
    ContentRef,
    ContextCompressed,
    Event,
    HistoryReset,
    RequestRecord,
    SummariserFailed,
)

__all__ = ["HistoryFold"]

#: The stage's events that wait for their call's admission.
_DECIDED = (HistoryReset, ContextCompressed, SummariserFailed)


class _Slot(NamedTuple):
    """One forwarded item as recorded: its content key, size, estimate and source."""

    key: str
    size: int
    tokens: int
    source: int


class HistoryFold:
    """Folds one session's events, in log order, into the history it forwarded last."""

    __slots__ = ("_decided", "_segments", "_size", "broken", "call_id", "client",
                 "compressed", "fields", "prepared", "state_key", "system", "unstored")

    def __init__(self) -> None:
        """An empty fold: no history yet."""
        self._decided: dict[str, list[Event]] = {}
        # The history's items as the records that appended them, each with how many of its
        # items still count: no item is built before :meth:`result` (most are dropped by a
        # later compression first).
        self._segments: list[tuple[RequestRecord, int]] = []
        self._size = 0
        self.client: list[bytes] = []
        self.call_id = ""
        self.compressed = 0
        self.state_key = ""
        self.fields: ContentRef | None = None
        self.system: tuple[ContentRef, ...] | None = None
        #: Why the history cannot be rebuilt ("": it can).
        self.broken = ""
        #: Whether a record since the last reset was made with recording off.
        self.unstored = False
        #: The compression prepared ahead and not yet applied or dropped.
        self.prepared: CompressionPrepared | None = None

    def fold(self, event: Event) -> tuple[Event, ...]:
        """Apply one event; returns the stage's events a call's admission made count."""
        if isinstance(event, SummariserFailed) and event.action == "dropped":
            return (event,)  # a preparation's: its call was admitted long before
        if isinstance(event, _DECIDED):
            self._decided.setdefault(event.call_id, []).append(event)
            return ()
        if isinstance(event, CallRefused):
            self._decided.pop(event.call_id, None)
            return ()
        if isinstance(event, CompressionPrepared):
            self.prepared = event
            return ()
        if isinstance(event, CompressionDropped):
            if self.prepared is not None and self.prepared.call_id == event.call_id:
                self.prepared = None
            return ()
        if isinstance(event, CallAdmitted):
            if event.purpose:  # a side call of the daemon's: not governed
                return ()
            return self._admit(event.call_id, event.request)
        if isinstance(event, CallResent) and not event.provider:
            return self._admit(event.call_id, event.request)
        return ()

    def _admit(self, call_id: str, record: RequestRecord | None) -> tuple[Event, ...]:
        decided = tuple(self._decided.pop(call_id, ()))
        for event in decided:
            if isinstance(event, HistoryReset):
                self._reset()
            elif isinstance(event, ContextCompressed):
                self.prepared = None  # applied, or made stale by this compression
                self.compressed += 1
                self.state_key = event.state[0]
                if not self.state_key:
                    self._break("a compression recorded before ContextCompressed v2")
        if record is not None:
            self._extend(call_id, record)
        return decided

    def _reset(self) -> None:
        self.prepared = None
        self._segments, self._size, self.client = [], 0, []
        self.call_id, self.compressed, self.state_key = "", 0, ""
        self.fields = self.system = None
        self.broken, self.unstored = "", False

    def _break(self, reason: str) -> None:
        if not self.broken:  # the first reason is the one that explains
            self.broken = reason

    def _extend(self, call_id: str, record: RequestRecord) -> None:
        appended = record.appended
        if len(record.tokens) != len(appended) or len(record.sources) != len(appended) or (
                appended and not record.covers):
            self._break("a call recorded before CallAdmitted v5")
            return
        if record.base:
            if record.base != self.call_id or record.kept > self._size:
                self._break(f"call {call_id}'s record does not extend the last history")
                return
            self._keep(record.kept)
        else:
            self._segments, self._size = [], 0
        covered = len(self.client)
        # A client item forwarded with a cache marker is recognised by its identity (its
        # bytes without markers), not by the content key it was stored under.
        identities = dict(record.marked)
        sourced = {source: identities.get(position, key)
                   for position, ((key, _), source) in enumerate(zip(appended, record.sources,
                                                                     strict=True))
                   if source >= covered}
        replaced = iter(record.replaced)
        for index in range(covered, record.covers):
            key = sourced.get(index) or next(replaced, "")
            if not key:
                self._break(f"call {call_id}'s record misses a covered message")
                return
            self.client.append(bytes.fromhex(key))
        if len(self.client) != record.covers:
            self._break(f"call {call_id}'s record covers fewer messages than before")
            return
        if appended:
            self._segments.append((record, len(appended)))
            self._size += len(appended)
        self.fields = record.fields if record.fields is not None else self.fields
        self.system = record.system if record.system is not None else self.system
        self.unstored = self.unstored or not record.stored
        self.call_id = call_id

    def _keep(self, kept: int) -> None:
        """Keep the history's first ``kept`` items."""
        segments = self._segments
        while self._size > kept:
            record, count = segments[-1]
            over = self._size - kept
            if count <= over:
                segments.pop()
                self._size -= count
            else:
                segments[-1] = (record, count - over)
                self._size = kept

    @property
    def slots(self) -> list[_Slot]:
        """The history's items as recorded, in order."""
        return [_Slot(key, size, tokens, source)
                for record, count in self._segments
                for (key, size), tokens, source in zip(record.appended[:count],
                                                       record.tokens[:count],
                                                       record.sources[:count], strict=True)]

    def needs(self) -> set[str]:
        """The content keys :meth:`result` reads: the stand-ins and the summary state."""
        slots = self.slots
        keys = {slot.key for slot in slots if slot.source < 0}
        if self.compressed and self.state_key:
            keys.add(self.state_key)
        prepared = self.prepared
        if prepared is not None:
            keys.update(key for (key, _), source in zip(
                prepared.compacted.appended, prepared.compacted.sources, strict=False)
                if source < 0)
            keys.update((prepared.summary[0], prepared.state[0]))
        return keys

    def result(self, contents: Mapping[str, bytes]) -> GovernedHistory | str:
        """The history forwarded last, or why it cannot be rebuilt (module doc).

        ``contents``: the stored contents among :meth:`needs`, by key.
        """
        if self.broken:
            return self.broken
        missing = [key for key in self.needs() if key not in contents]
        if missing:
            if self.unstored:
                return "record_messages was off: the stand-ins sent were not stored"
            return f"{len(missing)} content(s) it sent are missing from the log"
        if any(slot.source >= len(self.client) for slot in self.slots):
            return "a recorded item forwards a message the history does not cover"
        items = tuple(self._item(slot, contents) for slot in self.slots)
        summary = decode_summary(contents[self.state_key]) if self.compressed else None
        return GovernedHistory(
            client=tuple(self.client), items=items, call_id=self.call_id,
            tokens=sum(item.tokens for item in items), compressed=self.compressed,
            summary=summary, fields=self.fields, system=self.system)

    def _item(self, slot: _Slot, contents: Mapping[str, bytes]) -> Item:
        """One item of the history, as :meth:`result` rebuilds it."""
        key = bytes.fromhex(slot.key)
        if slot.source < 0:
            # A stand-in's origin is not recorded: it is forwarded without a marker.
            return Item(key, slot.size, slot.tokens, contents[slot.key], slot.source)
        # A client item's digest is its identity; the key names the bytes sent last.
        name = self.client[slot.source]
        return Item(name, slot.size, slot.tokens, None, slot.source,
                    key=b"" if key == name else key)

    def prepared_result(self, history: GovernedHistory, contents: Mapping[str, bytes]
                        ) -> PreparedCompression | None:
        """The compression prepared ahead for ``history`` (:meth:`result`'s), if any."""
        event = self.prepared
        if event is None:
            return None
        record = event.compacted
        if (len(record.tokens) != len(record.appended)
                or len(record.sources) != len(record.appended)
                or record.covers > len(history.client)
                or event.summary[0] not in contents or event.state[0] not in contents):
            return None
        items = []
        for (key, size), tokens, source in zip(record.appended, record.tokens,
                                               record.sources, strict=True):
            raw = contents.get(key) if source < 0 else None
            if source < 0 and raw is None:
                return None
            if source >= len(history.client):
                return None
            digest = bytes.fromhex(key)
            if source >= 0 and digest != history.client[source]:
                # A client item recorded with a cache marker: named by its identity, its
                # content key kept as the bytes last sent (as :meth:`_item`).
                items.append(Item(history.client[source], size, tokens, None, source,
                                  key=digest))
                continue
            items.append(Item(digest, size, tokens, raw, source))
        compacted = GovernedHistory(
            client=history.client[:record.covers], items=tuple(items),
            tokens=sum(item.tokens for item in items),
            summary=decode_summary(contents[event.state[0]]))
        return PreparedCompression(
            call_id=event.call_id, messages=event.messages_before,
            prefix=bytes.fromhex(event.prefix), history=compacted, model=event.model,
            summarised=event.summarised, pruned=event.pruned,
            tokens_before=event.tokens_before, summary_raw=contents[event.summary[0]])
