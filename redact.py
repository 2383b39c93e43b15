"""Scrubs secrets out of text before it reaches any sink (logs, events, files, HTTP bodies).

Two scrubbers run in one call, as reliability-and-security.md §4.3 recommends:

1. an **exact-value** scrubber seeded with every live secret (the key pool registers each
   resolved key with :meth:`Redactor.add`), and
2. **patterns** for secrets nobody registered: ``sk-…`` / ``sk-ant-…`` style API keys,
   ``Bearer <token>`` and ``api_key=<value>`` / ``x-api-key: <value>``.

Every match becomes ``[REDACTED:fp:<12 hex>]``, the secret's :func:`fingerprint`, so an
operator can still tell which key was involved without seeing it. All regular
expressions are single character classes with a fixed prefix, so they run in linear time
even on huge inputs (redaction must never become a denial-of-service vector).

Regex redaction is best effort: the design keeps secret values out of text in the first
place; this module is the safety net.
"""

import hashlib
import re
import threading
from collections.abc import Iterable

__all__ = [
    "MIN_SECRET_LENGTH",
    "Redactor",
    "default_redactor",
    "fingerprint",
    "placeholder",
]

#: Secrets shorter than this are refused: redacting every occurrence of a two-letter
#: "secret" would shred the logs and still protect nothing.
MIN_SECRET_LENGTH = 8

_FINGERPRINT_DOMAIN = b"sessionwarden.key.v1\0"

# Token alphabets: base64/url-safe characters; never spaces, quotes or brackets, so a
# placeholder such as "[REDACTED:fp:…]" is never matched again.
_TOKEN = r"[A-Za-z0-9_\-]"
_BEARER_TOKEN = r"[A-Za-z0-9._~+/=\-]"
_PATTERN_TEXT = (
    rf"(?P<sk>\bsk-{_TOKEN}{{16,}})"
    rf"|(?P<bearer_prefix>\b[Bb]earer[ \t]+)(?P<bearer>{_BEARER_TOKEN}{{8,}})"
    rf"|(?P<kv_prefix>\b(?i:x-api-key|api[_-]?key)[\"']?[ \t]*[:=][ \t]*[\"']?)"
    rf"(?P<kv>{_BEARER_TOKEN}{{16,}})"
)
_PATTERNS = re.compile(_PATTERN_TEXT)
_PATTERNS_BYTES = re.compile(_PATTERN_TEXT.encode("ascii"))


def fingerprint(secret: str) -> str:
    """Return a short, stable, non-reversible name for a secret.

    ``"fp:"`` followed by the first 12 hex characters of SHA-256 over the domain tag
    ``b"sessionwarden.key.v1\\0"`` and the secret's UTF-8 bytes. Safe to log and to store
    in events; API keys have far too much entropy for the prefix to be brute-forced.
    """
    digest = hashlib.sha256(_FINGERPRINT_DOMAIN + secret.encode("utf-8", "surrogatepass"))
    return "fp:" + digest.hexdigest()[:12]


def placeholder(secret: str) -> str:
    """Return the text that replaces ``secret``: ``[REDACTED:fp:<12 hex>]``."""
    return f"[REDACTED:{fingerprint(secret)}]"


def _pattern_sub(match: re.Match[str]) -> str:
    group = match.lastgroup
    if group == "sk":
        return placeholder(match["sk"])
    if group == "bearer":
        return match["bearer_prefix"] + placeholder(match["bearer"])
    return match["kv_prefix"] + placeholder(match["kv"])


def _pattern_sub_bytes(match: re.Match[bytes]) -> bytes:
    group = match.lastgroup
    if group == "sk":
        return placeholder(match["sk"].decode("ascii")).encode("ascii")
    if group == "bearer":
        return match["bearer_prefix"] + placeholder(match["bearer"].decode("ascii")).encode()
    return match["kv_prefix"] + placeholder(match["kv"].decode("ascii")).encode("ascii")


class _Compiled:
    """An immutable snapshot of the registered secrets, swapped atomically on ``add``."""

    __slots__ = ("_bytes_re", "bytes_repl", "ordered", "raw", "text_re", "text_repl")

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is replaced as a whole.
        ordered = sorted(set(secrets), key=lambda s: (-len(s), s))
        self.text_repl = {s: placeholder(s) for s in ordered}
        # The bytes pattern names each secret's group: its replacement, by group name.
        self.bytes_repl = {f"s{i}": placeholder(s).encode("ascii")
                           for i, s in enumerate(ordered)}
        self.ordered = tuple(ordered)
        self.text_re: re.Pattern[str] | None = None
        self._bytes_re: re.Pattern[bytes] | None = None
        if ordered:
            self.text_re = re.compile("|".join(re.escape(s) for s in ordered))
        self.raw = tuple(s.encode("utf-8", "surrogatepass") for s in ordered)

    def bytes_re(self) -> re.Pattern[bytes]:
        """The escape-aware pattern of every secret, compiled on first use.

        Bytes are what crosses the wire, where JSON may spell any character of a key as
        a ``\\uXXXX`` escape (``"\\u0073k-…"``): each secret matches in any mix of raw and
        escaped characters, and the group says which secret it was. Compiling it costs
        ~20 ms per secret, and every :meth:`Redactor.add` makes a new snapshot, so it is
        built only when some bytes do hold a secret — rarely, and never at start. Two
        threads may both build it; either result is the same pattern.
        """
        if self._bytes_re is None:
            self._bytes_re = re.compile(b"|".join(
                b"(?P<s%d>%s)" % (i, _escapable(s)) for i, s in enumerate(self.ordered)))
        return self._bytes_re

    def sub_bytes(self, data: bytes) -> bytes:
        """``data`` with every registered secret, raw or JSON-escaped, replaced."""
        if not self.raw:
            return data
        # The escape-aware pattern is slow (about 80 µs per KiB); every answer passes
        # here, and almost none holds a key. Substring searches over the bytes, with
        # ASCII escapes undone first if there are any, decide whether it must run.
        probe = _ASCII_ESCAPE.sub(_unescape, data) if b"\\u" in data else data
        if not any(secret in probe for secret in self.raw):
            return data
        repl = self.bytes_repl
        return self.bytes_re().sub(lambda m: repl[m.lastgroup or ""], data)


_ASCII_ESCAPE = re.compile(rb"\\u00([2-7][0-9A-Fa-f])")


def _unescape(match: re.Match[bytes]) -> bytes:
    return bytes((int(match[1], 16),))


def _escapable(secret: str) -> bytes:
    """A bytes pattern for ``secret`` where any character may be a JSON ``\\uXXXX``."""
    parts = []
    for char in secret:
        hex4 = f"{ord(char):04x}" if ord(char) < 0x10000 else None
        raw = re.escape(char.encode("utf-8", "surrogatepass"))
        if hex4 is None:
            parts.append(raw)
            continue
        escaped = b"".join(b"[%s%s]" % (h.encode(), h.upper().encode()) if h.isalpha()
                           else h.encode() for h in hex4)
        parts.append(b"(?:%s|\\\\u%s)" % (raw, escaped))
    return b"".join(parts)


class Redactor:
    """Replaces registered secrets and secret-looking tokens with their fingerprints.

    Thread-safe: :meth:`add` builds a new compiled snapshot under a lock and publishes it
    with one assignment; :meth:`redact` reads whichever snapshot is current and never
    blocks. Secrets are never removed: a key taken out of the pool must stay scrubbed.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        """Create a redactor, optionally seeded with ``secrets`` (see :meth:`add`)."""
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()
        self._compiled = _Compiled(())
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> str:
        """Register a secret value to be scrubbed from now on; return its fingerprint.

        Raises:
            ValueError: ``secret`` is shorter than :data:`MIN_SECRET_LENGTH` characters
                (the message does not contain the secret).
        """
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"refusing to register a secret shorter than {MIN_SECRET_LENGTH} characters"
            )
        with self._lock:
            if secret not in self._secrets:
                self._secrets = self._secrets | {secret}
                self._compiled = _Compiled(self._secrets)
        return fingerprint(secret)

    def __contains__(self, secret: object) -> bool:
        """Whether ``secret`` is a registered secret value."""
        return secret in self._secrets

    def __len__(self) -> int:
        """The number of registered secret values."""
        return len(self._secrets)

    def redact(self, text: str) -> str:
        """Return ``text`` with every registered secret and secret-looking token replaced."""
        compiled = self._compiled
        if compiled.text_re is not None:
            repl = compiled.text_repl
            text = compiled.text_re.sub(lambda m: repl[m.group()], text)
        return _PATTERNS.sub(_pattern_sub, text)

    def redact_bytes(self, data: bytes) -> bytes:
        """Like :meth:`redact` for raw bytes; secrets also when JSON-escaped."""
        return _PATTERNS_BYTES.sub(_pattern_sub_bytes, self._compiled.sub_bytes(data))

    def scrub_secrets(self, data: bytes) -> bytes:
        """Only the registered secrets (raw or JSON-escaped) replaced, no patterns.

        For a model's answer on its way to the client: a key-shaped string there may be
        the content the user asked for, but a key of ours never is.
        """
        return self._compiled.sub_bytes(data)


#: The process-wide redactor: the key pool registers resolved keys here, and every sink
#: (the loguru patcher, event payloads, spill files, HTTP error bodies) scrubs through it.
default_redactor = Redactor()
