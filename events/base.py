"""The base class of every event and the rules for its type tag.

Every event is a frozen msgspec Struct with an explicit, stable tag of the form
``"<context>.<name>.v<N>"``. The tag, never the class name, is what the log stores, so a
class may be renamed or moved freely; the tag may never change. A new schema version is
a new class with tag ``….v<N+1>`` plus an upcaster from the old version (see
``sessionwarden.events.codec``).
"""

import re
from typing import ClassVar

import msgspec

__all__ = ["Event", "parse_tag"]

_TAG = re.compile(r"^(?P<name>[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)\.v(?P<version>[1-9][0-9]*)$")


def parse_tag(tag: str) -> tuple[str, int]:
    """Split a type tag into its name and schema version.

    Args:
        tag: a tag such as ``"session.started.v2"``.

    Returns:
        ``("session.started", 2)``.

    Raises:
        ValueError: the tag does not follow ``<context>.<name>.v<N>``.
    """
    match = _TAG.match(tag)
    if match is None:
        raise ValueError(f"event tag {tag!r} does not match '<context>.<name>.v<N>'")
    return match["name"], int(match["version"])


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event; subclasses must pass an explicit ``tag=`` in the class header.

    Fields must use immutable types (tuples, not lists) because events are shared between
    actor threads without copying.
    """

    # Filled by msgspec from the class header; mirrored here so type checkers see it.
    __struct_config__: ClassVar[msgspec.structs.StructConfig]

    @classmethod
    def type_tag(cls) -> str:
        """The stored type tag of this class."""
        tag = cls.__struct_config__.tag
        if not isinstance(tag, str):
            raise TypeError(f"{cls.__name__} has no explicit string tag")
        return tag
