"""Encode events to stored bytes and decode them back, upcasting older schema versions.

Payloads are msgspec JSON: barely slower than msgpack here, and the audit log stays
readable by any SQLite client. The codec keeps one typed decoder per current tag (msgspec
advises reusing decoders), and a chain of upcasters per retired tag: a stored
``session.started.v1`` is decoded to a dict, stepped through ``v1 → v2``, then converted
into the current class. An unknown tag fails loudly with :class:`UnknownEventType`.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
from sessionwarden.events.base import Event, parse_tag
from sessionwarden.events.errors import EventDecodeError, UnknownEventType

__all__ = ["EncodedEvent", "EventCodec", "Upcaster"]

UpcastFn = Callable[[dict[str, Any]], dict[str, Any]]


class EncodedEvent(NamedTuple):
    """An event ready to store: its tag, schema version and JSON payload."""

    type: str
    schema_version: int
    data: bytes


@dataclass(frozen=True)
class Upcaster:
    """Turns the payload of ``source`` (a retired tag) into the payload of ``target``.

    ``fn`` receives the decoded JSON object without its ``type`` key and returns the
    fields of the target version.
    """

    source: str
    target: str
    fn: UpcastFn


class EventCodec:
    """Encoder and decoder for a fixed set of event classes and upcasters."""

    def __init__(self, classes: Iterable[type[Event]], upcasters: Iterable[Upcaster] = ()) -> None:
        """Build decoders for ``classes`` and index ``upcasters`` by their source tag."""
        self._classes: dict[str, type[Event]] = {}
        for cls in classes:
            tag = cls.type_tag()
            parse_tag(tag)
            if tag in self._classes:
                raise ValueError(f"two event classes share the tag {tag!r}")
            self._classes[tag] = cls
        # Parsed once here: encode runs on every append, in the appender's thread.
        self._versions = {tag: parse_tag(tag)[1] for tag in self._classes}
        self._decoders = {
            tag: msgspec.json.Decoder(cls) for tag, cls in self._classes.items()
        }
        self._upcasters: dict[str, Upcaster] = {}
        for up in upcasters:
            if up.source in self._classes:
                raise ValueError(f"{up.source!r} is a current tag and cannot be upcast")
            self._upcasters[up.source] = up
        for up in self._upcasters.values():
            self._chain(up.source)  # fail at start-up, not at replay, on a broken chain
        self._encoder = msgspec.json.Encoder(order="deterministic")
        self._generic = msgspec.json.Decoder(dict[str, Any])

    @property
    def classes(self) -> Mapping[str, type[Event]]:
        """The current event classes by tag."""
        return self._classes

    @property
    def retired_tags(self) -> frozenset[str]:
        """Tags that are only read (and upcast), never written."""
        return frozenset(self._upcasters)

    def tags_of(self, cls: type[Event]) -> frozenset[str]:
        """Every stored tag that decodes to ``cls``: its own and the retired ones upcast to it.

        A projection filtering rows by tag must match them all, or a view rebuilt from an
        older log would miss the events written before the last schema change.
        """
        current = cls.type_tag()
        tags = {current}
        for tag in self._upcasters:
            try:
                chain = self._chain(tag)
            except UnknownEventType:
                continue
            if chain and chain[-1].target == current:
                tags.add(tag)
        return frozenset(tags)

    def knows(self, type_tag: str) -> bool:
        """Whether ``type_tag`` can be decoded, directly or through upcasters."""
        return type_tag in self._classes or type_tag in self._upcasters

    def encode(self, event: Event) -> EncodedEvent:
        """Encode a current event into its stored form."""
        tag = type(event).type_tag()
        version = self._versions.get(tag)
        if version is None:
            raise UnknownEventType(tag)
        return EncodedEvent(tag, version, self._encoder.encode(event))

    def decode(self, type_tag: str, data: bytes) -> Event:
        """Decode a stored payload, upcasting it when its tag is retired.

        Raises:
            UnknownEventType: no class or upcaster knows ``type_tag``.
            EventDecodeError: the payload does not fit the type.
        """
        decoder = self._decoders.get(type_tag)
        try:
            if decoder is not None:
                return decoder.decode(data)
            chain = self._chain(type_tag)
            fields = self._generic.decode(data)
            fields.pop("type", None)  # the tag pre-release payloads carried inside
            for up in chain:
                fields = up.fn(fields)
            return msgspec.convert(fields, self._classes[chain[-1].target])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise EventDecodeError(type_tag, str(exc)) from None

    def _chain(self, type_tag: str) -> list[Upcaster]:
        chain: list[Upcaster] = []
        tag = type_tag
        while tag not in self._classes:
            up = self._upcasters.get(tag)
            if up is None or len(chain) > len(self._upcasters):
                raise UnknownEventType(type_tag)
            chain.append(up)
            tag = up.target
        return chain
