"""Signing in to the live page: one-time codes, and the cookie a code buys.

The daemon's token must never sit in a URL (URLs land in history, in logs, in a
referrer). So ``sessionwarden ui`` asks the daemon, with the token, for a one-time code
(``POST /v1/ui/codes``) and opens ``/ui/signin?code=…``; the daemon exchanges the code
for a cookie and redirects to ``/ui``. The code is then spent: a used, unknown or expired
code is refused.

Rules:

- A code is 192 random bits, lives :data:`CODE_TTL` and is redeemed once; the daemon
  keeps only its SHA-256, in memory (a restart voids the codes not yet used), and at
  most :data:`MAX_PENDING` of them (the oldest is dropped first).
- The cookie is ``<expiry>.<nonce>.<mac>``: an HMAC-SHA256, under a key derived from the
  daemon's token, of the expiry and a nonce. Nothing is stored: it holds across a
  restart of the daemon with the same token, and changing the token signs every page
  out. It is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
  sends it), ``Path=/ui``, and named after the daemon's port (two daemons on one machine
  share a cookie jar, not a cookie).
- Time is the runtime's injected clock.
"""

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from sessionwarden.clock import Clock

__all__ = ["CODE_TTL", "COOKIE_TTL", "MAX_PENDING", "SignIn"]

#: How long a one-time code may wait for its sign-in.
CODE_TTL = timedelta(minutes=2)
#: How long a signed-in page stays signed in.
COOKIE_TTL = timedelta(hours=12)
#: Codes waiting at most; a new one beyond drops the oldest.
MAX_PENDING = 16


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode("ascii", "replace")).digest()


class SignIn:
    """The one-time codes waiting, and the cookies' key (module docstring)."""

    def __init__(self, token: str, clock: Clock) -> None:
        """Sign pages in to the daemon holding ``token``."""
        self._key = hmac.new(token.encode(), b"sessionwarden ui cookie v1",
                             hashlib.sha256).digest()
        self._clock = clock
        self._codes: dict[bytes, datetime] = {}

    def issue(self) -> tuple[str, datetime]:
        """A new one-time code and when it expires."""
        now = self._clock.now()
        for digest, expires in list(self._codes.items()):
            if expires <= now:
                del self._codes[digest]
        while len(self._codes) >= MAX_PENDING:
            del self._codes[next(iter(self._codes))]  # dicts keep order: the oldest
        code = secrets.token_urlsafe(24)
        expires = now + CODE_TTL
        self._codes[_digest(code)] = expires
        return code, expires

    def redeem(self, code: str) -> str | None:
        """The cookie's value for ``code``, spending it; None if used, unknown or expired."""
        expires = self._codes.pop(_digest(code), None)
        now = self._clock.now()
        if expires is None or expires <= now:
            return None
        until = int((now + COOKIE_TTL).timestamp())
        nonce = secrets.token_urlsafe(12)
        return f"{until}.{nonce}.{self._mac(until, nonce)}"

    def valid(self, cookie: str) -> bool:
        """Whether ``cookie`` is one this daemon's key made, not yet expired."""
        until, _, rest = cookie.partition(".")
        nonce, _, mac = rest.partition(".")
        if not until.isdigit() or not nonce or len(until) > 12:
            return False
        # Compared in constant time before the expiry is looked at: a forged cookie
        # learns nothing from the time a refusal takes.
        good = hmac.compare_digest(mac.encode("ascii", "replace"),
                                   self._mac(int(until), nonce).encode())
        return good and int(until) > self._clock.now().timestamp()

    def _mac(self, until: int, nonce: str) -> str:
        return hmac.new(self._key, f"{until}.{nonce}".encode("ascii", "replace"),
                        hashlib.sha256).hexdigest()

    @staticmethod
    def cookie_name(port: int | None) -> str:
        """The cookie's name on ``port``: two daemons' pages do not sign each other out."""
        return f"sessionwarden_ui_{port or 0}"

    def max_age(self) -> int:
        """The cookie's ``Max-Age``, in seconds."""
        return int(COOKIE_TTL.total_seconds())
