"""The base class of every event and the rules for its type tag.

Every event is a frozen msgspec Struct with an explicit, stable tag of the form
``"<context>.<name>.v<N>"``, declared as the class variable ``TAG``. The tag, never the
class name, is what the log stores (in the row's ``type`` column), so a class may be
renamed or moved freely; the tag may never change. A new schema version is a new class
with tag ``….v<N+1>`` plus an upcaster from the old version (see
``sessionwarden.events.codec``).

Payloads are lean: the tag is not repeated inside them (the row has it), fields left at
their default are omitted (``omit_defaults``), and no event repeats what its stream's name
already says (a session's events do not carry the session id).
"""

import re
from typing import ClassVar

import msgspec

__all__ = ["Event", "parse_tag"]

_TAG = re.compile(r"^(?P<name>[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)\.v(?P<version>[1-9][0-9]*)$")


def parse_tag(tag: str) -> tuple[str, int]:
    """Split a type tag into its name and schema version.

    Args:
        tag: a tag such as ``"session.started.v3"``.

    Returns:
        ``("session.started", 3)``.

    Raises:
        ValueError: the tag does not follow ``<context>.<name>.v<N>``.
    """
    match = _TAG.match(tag)
    if match is None:
        raise ValueError(f"event tag {tag!r} does not match '<context>.<name>.v<N>'")
    return match["name"], int(match["version"])


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every event; subclasses set ``TAG`` to their stored type tag.

    Fields must use immutable types (tuples, not lists) because events are shared between
    actor threads without copying.
    """

    #: The stored type tag, ``"<context>.<name>.v<N>"``; set by every concrete subclass.
    TAG: ClassVar[str] = ""

    @classmethod
    def type_tag(cls) -> str:
        """The stored type tag of this class."""
        if not cls.TAG:
            raise TypeError(f"{cls.__name__} has no TAG")
        return cls.TAG
