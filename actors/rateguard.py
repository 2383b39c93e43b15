"""RateGuardActor: reads each response's rate-limit headers and records what changed.

Every completion passes through here on its way to the session's actor: the guard reads
the response's rate-limit headers (``sessionwarden.domain.keys.ratelimits``, at
``clock.now()``), and when the buckets of that key changed in a way worth recording it
adds a RateLimitsObserved on ``ratelimits-<provider>`` to the completion's parts, so
the completion and the buckets commit in one append.

It does not append itself: the
session's actor, which owns the completion, does, and a completion lost here (the guard
died with it in its mailbox) is simply retried by the proxy, which this step tolerates.

State: the last buckets recorded per (provider, key), recovered by :meth:`load` from
``view_ratelimits``. The provider breaker is not here: it is the CredentialPoolActor's
(``actors/key_health.py``), judged from key states; a 429's classification reads these
observations back from ``view_ratelimits``.

The guard also owns the credits tracker (``actors/credits.py``): the credit headers ride
with the rate-limit headers, and their events (``credits-<provider>``) join the same
append. A polled balance (:class:`~sessionwarden.actors.credits.ObserveCredits`) is the
one thing the guard appends itself; should that append fail, the tracker reloads from
the log, so its memory is never ahead of what is written.
"""

from collections.abc import Callable
from typing import Any

import pykka
from sessionwarden.actors.bridge import PENDING, Call, GovernedActor, Reply, tell
from sessionwarden.actors.credits import CreditBoard, CreditTracker, IsFree, ObserveCredits
from sessionwarden.actors.messages import Complete, new_event
from sessionwarden.clock import Clock, SystemClock
from sessionwarden.domain.keys.ratelimits import buckets_seen, parse_rate_limits, worth_recording
from sessionwarden.events import RateLimitBucketSeen, RateLimitsObserved
from sessionwarden.store import ANY, EventLog, StreamAppend
from sessionwarden.store.errors import StoreError
from sessionwarden.store.writer import AppendRequest

__all__ = ["RateGuardActor", "ratelimits_stream"]

Buckets = tuple[RateLimitBucketSeen, ...]


def ratelimits_stream(provider: str) -> str:
    """The stream of a provider's rate-limit observations."""
    return f"ratelimits-{provider}"


class RateGuardActor(GovernedActor):
    """Decides which rate-limit observations are recorded; forwards completions."""

    def __init__(
        self,
        log: EventLog,
        session_ref: Callable[[str], "pykka.ActorRef[Any]"],
        *,
        clock: Clock | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        credit_board: CreditBoard | None = None,
        is_free: IsFree | None = None,
    ) -> None:
        """Read state from ``log``; ``session_ref`` finds the actor owning a session.

        The credits tracker publishes its notices to ``credit_board``; ``is_free`` says
        which (provider, model) costs nothing.
        """
        super().__init__(on_failure)
        self._log = log
        self._session_ref = session_ref
        self._clock = clock or SystemClock()
        self._last: dict[tuple[str, str], Buckets] = {}
        self._credits = CreditTracker(credit_board, is_free)

    def on_start(self) -> None:
        """Recover the last recorded buckets and the credit states."""
        self._last = self.load()
        self._credits.load(self._log.read_connection(), self._clock.now())

    def load(self) -> dict[tuple[str, str], Buckets]:
        """The one loader: the last recorded buckets per (provider, key), from the view."""
        found: dict[tuple[str, str], list[RateLimitBucketSeen]] = {}
        for provider, credential, name, limit, remaining, reset in self._log.read_connection(
        ).execute(
            "SELECT provider, credential, bucket, lim, remaining, reset_seconds"
            " FROM view_ratelimits ORDER BY provider, credential, bucket"
        ):
            found.setdefault((provider, credential), []).append(
                RateLimitBucketSeen(name, limit, remaining, reset))
        return {key: tuple(buckets) for key, buckets in found.items()}

    def handle(self, message: object, reply: Reply) -> object:
        """Read a completion's headers, add the buckets worth recording, pass it on."""
        if isinstance(message, ObserveCredits):
            return self._observe_credits(message, reply)
        if isinstance(message, _CreditsNotWritten):
            self._credits.load(self._log.read_connection(), self._clock.now())
            return None
        if not isinstance(message, Complete):
            raise TypeError(f"RateGuardActor cannot handle {type(message).__name__}")
        outcome = message.outcome
        limits = message.limits
        parts = message.parts
        if outcome.rate_limit_headers:
            limits = parse_rate_limits(dict(outcome.rate_limit_headers), self._clock.now())
            seen = buckets_seen(limits)
            key = (outcome.provider, outcome.credential)
            if outcome.credential and worth_recording(self._last.get(key), seen):
                # Remembered now, not after the commit: the next call of this key must
                # compare against it even if it arrives before this append commits.
                self._last[key] = seen
                observed = RateLimitsObserved(credential=outcome.credential, buckets=seen)
                parts = (*parts, StreamAppend(ratelimits_stream(outcome.provider),
                                              (new_event(observed),), ANY))
            parts = (*parts, *self._credits.from_outcome(outcome, self._clock.now()))
        tell(self._session_ref(outcome.session_id),
             Call(Complete(outcome, limits, parts), reply))
        return PENDING

    def _observe_credits(self, message: ObserveCredits, reply: Reply) -> object:
        """Fold a polled balance; append its events and reply once they are durable."""
        parts = self._credits.observe(message.provider, message.credential, message.reading,
                                      model_is_free=False, now=self._clock.now())
        if not parts:
            return ()
        ref = self.actor_ref

        def committed(request: AppendRequest) -> None:
            # The writer's thread: reply at once; a failure also makes the tracker reload
            # in the guard's own thread, so it forgets what was never written.
            if request.error is None:
                reply(parts, None)
                return
            try:
                ref.tell(_CreditsNotWritten())
            except Exception:
                pass  # stopped: its successor loads from the log anyway
            reply(None, request.error)

        try:
            self._log.submit(list(parts), callback=committed)
        except StoreError:
            self._credits.load(self._log.read_connection(), self._clock.now())
            raise
        return PENDING


class _CreditsNotWritten:
    """An append of the guard's own failed: reload the credits tracker from the log."""
