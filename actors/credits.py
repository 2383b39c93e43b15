"""The credits tracker inside the rate guard, and the board the proxy reads notices from.

The :class:`~sessionwarden.actors.rateguard.RateGuardActor` owns one
:class:`CreditTracker`: every completion passes through the guard, and the credit
headers (``x-nous-credits-*``) ride with the rate-limit headers in
``CallOutcome.rate_limit_headers``, so the guard is where a response's credits are read,
at no extra message.

The tracker keeps a
:class:`~sessionwarden.domain.credits.notices.CreditState` per (provider, key fingerprint) — a
balance belongs to the account behind a key — folds each reading with the pure policy
(``domain/credit_events.track``) and returns the events to append on
``credits-<provider>``: in the completion's own append, or, for a polled balance
endpoint (``cmd/daemon/credit_poll.py``, message :class:`ObserveCredits`), in an append of the
guard's own.

State survives a restart: :meth:`CreditTracker.load` reads the last recorded state of
every key from ``view_credits`` (``views/credits.py``).

:class:`CreditBoard` is how notices reach clients without a message per call: the tracker
publishes each key's notices there (under a lock; a few hundred nanoseconds), and the
proxy reads them when it sends a response's headers (``x-sessionwarden-notice``).
"""

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import apsw
import msgspec
from loguru import logger
from sessionwarden.actors.messages import new_event
from sessionwarden.domain.calls import CallOutcome
from sessionwarden.domain.credits.events import state_of, track
from sessionwarden.domain.credits.notices import CreditState, Notice, header_value, shown
from sessionwarden.domain.credits.readings import (
    CreditReading,
    parse_credit_headers,
    unsupported_credit_version,
)
from sessionwarden.events import CODEC, CreditsObserved
from sessionwarden.store import ANY, StreamAppend
from sessionwarden.views.credits import credits_stream

__all__ = ["CreditBoard", "CreditTracker", "ObserveCredits"]

#: Tells whether a (provider, model) costs nothing (suppresses the depleted notice).
IsFree = Callable[[str, str], bool]
_Key = tuple[str, str]


class ObserveCredits(msgspec.Struct, frozen=True):
    """A polled balance of the key ``credential`` of ``provider`` (to the rate guard).

    Reply, once the events it caused are durable: the append parts written (empty when
    the reading changed nothing worth recording).
    """

    provider: str
    credential: str
    reading: CreditReading


class CreditBoard:
    """The credit notices up for each key, published by the tracker, read by the proxy."""

    def __init__(self) -> None:
        """No notice yet."""
        self._lock = threading.Lock()
        self._up: dict[_Key, tuple[Notice, ...]] = {}

    def publish(self, provider: str, credential: str, notices: tuple[Notice, ...]) -> None:
        """Replace the notices of a key (sticky ones and passing ones with their expiry)."""
        with self._lock:
            if notices:
                self._up[(provider, credential)] = notices
            else:
                self._up.pop((provider, credential), None)

    def clear(self) -> None:
        """Forget every notice (a tracker about to publish what it loaded)."""
        with self._lock:
            self._up = {}

    def notices(self, provider: str, credential: str, now: datetime) -> tuple[Notice, ...]:
        """The notices of a key up at ``now`` (a passing one lapses at its expiry)."""
        with self._lock:
            up = self._up.get((provider, credential), ())
        return tuple(n for n in up if n.expires_at is None or n.expires_at > now)

    def header(self, provider: str, credential: str, now: datetime) -> bytes | None:
        """The ``x-sessionwarden-notice`` value for a response served by this key, if any."""
        value = header_value(self.notices(provider, credential, now)) if self._up else None
        return None if value is None else value.encode("ascii", "replace")


class CreditTracker:
    """The per-key credit states of every provider (owned by the rate guard's thread)."""

    def __init__(self, board: CreditBoard | None = None, is_free: IsFree | None = None) -> None:
        """Publish to ``board``; ``is_free`` says which models cost nothing."""
        self.board = board or CreditBoard()
        self._is_free = is_free or (lambda provider, model: False)
        self._states: dict[_Key, CreditState] = {}
        self._passing: dict[_Key, tuple[Notice, ...]] = {}
        self._warned: set[str] = set()

    def load(self, conn: apsw.Connection, now: datetime) -> None:
        """The one loader: every key's last recorded state and passing notices, from the views."""
        self._states.clear()
        self._passing.clear()
        # A predecessor may have published what never reached the log (its append failed).
        self.board.clear()
        for provider, credential, observed_at, tag, data in conn.execute(
                "SELECT provider, credential, observed_at, type, data FROM view_credits"):
            event = CODEC.decode(tag, bytes(data))
            assert isinstance(event, CreditsObserved)
            self._states[(provider, credential)] = state_of(event, _parse_time(observed_at))
        for provider, credential, key, level, message, band, ttl_ms, raised_at in conn.execute(
                "SELECT provider, credential, key, level, message, band, ttl_ms, raised_at"
                " FROM view_credit_notices WHERE ttl_ms > 0"):
            expires = _parse_time(raised_at) + timedelta(milliseconds=ttl_ms)
            if expires > now:
                self._passing[(provider, credential)] = (Notice(
                    kind="restored", action="show", key=key, level=level, message=message,
                    band=band, expires_at=expires),)
        for key in self._states.keys() | self._passing.keys():
            self._publish(key, now)

    def state(self, provider: str, credential: str) -> CreditState:
        """The state of a key (a fresh one when nothing is known)."""
        return self._states.get((provider, credential), CreditState())

    def from_outcome(self, outcome: CallOutcome, now: datetime) -> tuple[StreamAppend, ...]:
        """The credits part of a completion's append (none without credit headers)."""
        headers = outcome.rate_limit_headers
        if not outcome.credential or not any(n.startswith("x-nous-") for n, _ in headers):
            return ()
        fields = dict(headers)
        reading = parse_credit_headers(fields)
        if reading is None:
            version = unsupported_credit_version(fields)
            if version is not None and outcome.provider not in self._warned:
                self._warned.add(outcome.provider)
                logger.warning("provider {} sends credit headers of version {}, newer than "
                               "this sessionwarden understands; credit notices are off for "
                               "it", outcome.provider, version)
            return ()
        free = self._is_free(outcome.provider, outcome.model)
        return self.observe(outcome.provider, outcome.credential, reading, model_is_free=free,
                            now=now)

    def observe(self, provider: str, credential: str, reading: CreditReading, *,
                model_is_free: bool, now: datetime) -> tuple[StreamAppend, ...]:
        """Fold one reading; the append part of the events it caused (empty: none).

        A polled balance (``source == "balance"``) of a key with no state yet is a seed
        (§6): it primes the crossing latch, so a daemon that starts with the key already
        in a band says so at once; a response's headers never seed.
        """
        key = (provider, credential)
        before = self._states.get(key, CreditState())
        seed = reading.source == "balance" and before.reading is None
        state, notices, events = track(before, credential, reading,
                                       model_is_free=model_is_free, now=now, seed=seed)
        self._states[key] = state
        if notices:
            raised = {n.key for n in notices}
            self._passing[key] = (
                *(n for n in self._passing.get(key, ()) if n.key not in raised),
                *(n for n in notices if n.action == "show" and n.expires_at is not None),
            )
            self._publish(key, now)
        if not events:
            return ()
        return (StreamAppend(credits_stream(provider), tuple(new_event(e) for e in events),
                             ANY),)

    def _publish(self, key: _Key, now: datetime) -> None:
        passing = tuple(n for n in self._passing.get(key, ())
                        if n.expires_at is not None and n.expires_at > now)
        self.board.publish(*key, (*shown(self._states.get(key, CreditState())), *passing))


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
