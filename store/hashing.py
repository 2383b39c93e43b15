"""The hash chain: each event's hash covers the previous hash and its exact stored bytes.

``hash_k = SHA-256(DOMAIN ‖ prev_hash ‖ seq ‖ version ‖ schema_version ‖ stream ‖ type ‖
recorded_at ‖ idempotency_key ‖ data)``, integers as 8-byte big-endian, every
variable-length field length-prefixed so no two different rows can encode to the same
bytes. The domain tag keeps these hashes from
ever colliding with hashes computed for another purpose. The chain starts from
:data:`GENESIS`, 32 zero bytes.

:func:`content_key` names a stored content. It is the same function as
``sessionwarden.domain.context.transcript.content_key`` (the store cannot import the domain; a
test holds the two equal).
"""

import hashlib
import struct

__all__ = ["DOMAIN", "GENESIS", "content_key", "event_hash"]

DOMAIN = b"sessionwarden.event.v1\x00"
GENESIS = bytes(32)

_INTS = struct.Struct(">qqq")
_LEN = struct.Struct(">I")


def _field(value: bytes) -> bytes:
    return _LEN.pack(len(value)) + value


def event_hash(
    prev_hash: bytes,
    seq: int,
    stream: str,
    version: int,
    type_tag: str,
    schema_version: int,
    recorded_at: str,
    idempotency_key: str | None,
    data: bytes,
) -> bytes:
    """Compute the chain hash of one event from its stored fields."""
    key = b"\x00" if idempotency_key is None else b"\x01" + _field(idempotency_key.encode())
    return hashlib.sha256(
        b"".join(
            (
                DOMAIN,
                prev_hash,
                _INTS.pack(seq, version, schema_version),
                _field(stream.encode()),
                _field(type_tag.encode()),
                _field(recorded_at.encode()),
                key,
                _field(data),
            )
        )
    ).digest()


def content_key(data: bytes) -> str:
    """The key ``data`` is stored under: SHA-256, first 16 bytes, as 32 hex characters."""
    return hashlib.sha256(data).digest()[:16].hex()
