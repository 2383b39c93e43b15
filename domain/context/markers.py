"""Prompt-cache markers (``cache_control``): ignored when recognising, placed as the client does.

Anthropic clients (Claude Code, and chat-completions clients through OpenRouter, on content
parts) mark where the provider's prompt cache should end with ``"cache_control":
{"type": "ephemeral"}``, and move the marker onto the newest message every round: the
message that had it is resent without it. Recognising a resent history by the exact bytes
of each item would take that for an edit and reset the history at every call, so an
item's *identity* (:func:`identity`) is its digest without any ``cache_control`` member.

The items the daemon writes itself (a spill's stand-in, a summary) must not pile up stale
markers either (Anthropic refuses more than 4 per request): :func:`carry_markers` gives a
stand-in the marker its client item carries *now*, and none otherwise.
"""

from collections.abc import Sequence
from typing import Any

import msgspec
from sessionwarden.domain.context.history import digest

__all__ = ["MARKER_KEY", "carry_markers", "count_markers", "identities", "identity",
           "without_markers"]

#: The key of a prompt-cache marker, in Anthropic's format and OpenRouter's content parts.
MARKER_KEY = "cache_control"
_NEEDLE = b"cache_control"
_QUOTED = b'"cache_control"'
_SPACE = b" \t\r\n"


def identity(raw: bytes) -> bytes:
    """The digest that names a client item for recognition: its bytes without markers.

    Fast path: an item without the word is its own identity, so the common case costs one
    hash, and the digests of logs written before this existed stay valid.
    """
    if _NEEDLE not in raw:
        return digest(raw)
    return digest(without_markers(raw))


def identities(items: Sequence[bytes]) -> tuple[list[bytes], frozenset[int]]:
    """Each item's :func:`identity`, and the positions of the items that hold the word.

    One pass over a call's items: the positions tell the forwarding step which items may
    carry a marker, so it need not search every item's bytes again.
    """
    digests: list[bytes] = []
    marked: set[int] = set()
    for position, raw in enumerate(items):
        if _NEEDLE in raw:
            marked.add(position)
            digests.append(digest(without_markers(raw)))
        else:
            digests.append(digest(raw))
    return digests, frozenset(marked)


def without_markers(raw: bytes) -> bytes:
    """``raw`` with every ``cache_control`` member removed (``raw`` itself if none).

    The members are cut out of the bytes, so the rest is exactly as the client wrote it:
    the same item resent without its marker has the same bytes whatever the client's
    JSON style (spacing, escapes, key order). Re-encoding would not give that. Should the
    cut not decode to the item without markers (never for valid JSON), the item is
    re-encoded canonically instead.
    """
    if _NEEDLE not in raw:
        return raw
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw  # not JSON: the codec refuses it; its identity is its bytes
    stripped, changed = _strip(value)
    if not changed:
        return raw  # the word only inside strings
    cut = _cut(raw)
    if cut is not None:
        try:
            if msgspec.json.decode(cut) == stripped:
                return cut
        except msgspec.DecodeError:
            pass
    return msgspec.json.encode(stripped)


def count_markers(raw: bytes) -> int:
    """How many ``cache_control`` members ``raw`` (a JSON document) holds."""
    if _NEEDLE not in raw:
        return 0
    try:
        return _count(msgspec.json.decode(raw))
    except msgspec.DecodeError:
        return 0


def carry_markers(stand_in: bytes, client: bytes | None) -> bytes:
    """A stand-in as forwarded: with the marker its client item carries now, else none.

    ``client`` is the client's current version of the item the stand-in replaces (None:
    it has none, e.g. a summary). The client's last marker goes on the stand-in's last
    content block (where Anthropic clients and OpenRouter parts put it); a stand-in
    without a list of blocks gets none. So the daemon never forwards more markers than the
    client sent. Returns ``stand_in`` itself when nothing changes (the caller compares by
    identity to know whether its content key still holds).
    """
    marker = _last_marker(client) if client is not None and _NEEDLE in client else None
    if marker is None:
        return without_markers(stand_in)
    try:
        value = msgspec.json.decode(stand_in)
    except msgspec.DecodeError:
        return stand_in
    stripped, _ = _strip(value)
    content = stripped.get("content") if isinstance(stripped, dict) else None
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        content[-1][MARKER_KEY] = marker
    if stripped == value:
        return stand_in  # already marked so: the bytes (and content key) stay
    return msgspec.json.encode(stripped)


def _strip(value: Any) -> tuple[Any, bool]:
    """``value`` without ``cache_control`` keys at any depth, and whether any was found."""
    if isinstance(value, dict):
        changed = MARKER_KEY in value
        out = {}
        for key, item in value.items():
            if key == MARKER_KEY:
                continue
            out[key], inner = _strip(item)
            changed = changed or inner
        return out, changed
    if isinstance(value, list):
        items = [_strip(item) for item in value]
        return [item for item, _ in items], any(inner for _, inner in items)
    return value, False


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return (MARKER_KEY in value) + sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count(v) for v in value)
    return 0


def _last_marker(raw: bytes) -> Any:
    """The last ``cache_control`` value in ``raw`` (document order), or None."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                if key == MARKER_KEY:
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(value)
    return found[-1] if found else None


def _cut(raw: bytes) -> bytes | None:
    """``raw`` with each ``"cache_control": <value>`` member and one comma cut out.

    None when a match does not look like an object member (the caller re-encodes).
    """
    out = bytearray()
    start = 0
    position = raw.find(_QUOTED)
    while position >= 0:
        before = position - 1
        while before >= 0 and raw[before] in _SPACE:
            before -= 1
        after = position + len(_QUOTED)
        while after < len(raw) and raw[after] in _SPACE:
            after += 1
        if before < 0 or raw[before] not in b"{," or after >= len(raw) or raw[after] != 58:
            # Not a key (inside a string the quotes are escaped): keep it, look further.
            position = raw.find(_QUOTED, position + 1)
            continue
        after += 1
        while after < len(raw) and raw[after] in _SPACE:
            after += 1
        end = _value_end(raw, after)
        if end is None:
            return None
        if raw[before] == 44:  # a comma before: cut from it, the member is not the first
            out += raw[start:before]
            start = end
        else:  # the first member: cut it and the comma (and spaces) after it
            follow = end
            while follow < len(raw) and raw[follow] in _SPACE:
                follow += 1
            if follow < len(raw) and raw[follow] == 44:
                follow += 1
                while follow < len(raw) and raw[follow] in _SPACE:
                    follow += 1
                end = follow
            out += raw[start:position]
            start = end
        position = raw.find(_QUOTED, start)
    out += raw[start:]
    return bytes(out)


def _value_end(raw: bytes, index: int) -> int | None:
    """Where the JSON value starting at ``index`` ends (exclusive), or None."""
    if index >= len(raw):
        return None
    first = raw[index]
    if first == 34:  # a string
        return _string_end(raw, index)
    if first in b"{[":
        depth = 0
        while index < len(raw):
            byte = raw[index]
            if byte == 34:
                end = _string_end(raw, index)
                if end is None:
                    return None
                index = end
                continue
            if byte in b"{[":
                depth += 1
            elif byte in b"}]":
                depth -= 1
                if depth == 0:
                    return index + 1
            index += 1
        return None
    while index < len(raw) and raw[index] not in b",}] \t\r\n":
        index += 1  # a number or a literal
    return index


def _string_end(raw: bytes, index: int) -> int | None:
    index += 1
    while index < len(raw):
        byte = raw[index]
        if byte == 92:
            index += 2
            continue
        if byte == 34:
            return index + 1
        index += 1
    return None
