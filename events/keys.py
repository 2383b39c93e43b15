"""Events of key health and of the provider breaker: every transition is a fact in the log.

- :class:`KeyStateChanged` (stream ``credentials-<provider>``, next to the keys' own
  ``credential.added``/``removed``): one key, identified by its fingerprint, moved between
  ``ok``, ``cooling``, ``exhausted`` and ``dead``. Two pool entries holding the same secret
  share a fingerprint, so one event moves both.
- :class:`BreakerChanged` (stream ``ratelimits-<provider>``): the provider's breaker opened
  (no usable key, or sustained overload) or closed.

Times are absolute ISO 8601 UTC strings with milliseconds (``"2026-12-02T12:00:05.250+00:00"``)
so that a fold needs no clock and no ``recorded_at``: a daemon restarted while a key is
benched reads the same ``until`` and keeps refusing until then. Both are decided in
``sessionwarden.domain.keys.key_states`` and ``sessionwarden.domain.keys.breaker``.
"""

from typing import ClassVar

from sessionwarden.events.base import Event

__all__ = ["BreakerChanged", "KeyStateChanged"]


class KeyStateChanged(Event, frozen=True):
    """The key ``fingerprint`` of ``provider`` moved from ``previous`` to ``state``.

    Attributes:
        state: ``ok``, ``cooling``, ``exhausted`` or ``dead``.
        previous: the state it left. For a new bench, as it stood at ``at`` (a bench whose
            time was up reads ``ok``); for a return to ``ok``, the bench that ended.
        at: when the transition was decided (ISO 8601 UTC).
        until: when the bench ends (ISO 8601 UTC); None for ``ok`` and ``dead``.
        reason: why, e.g. ``transient_limit``, ``genuine_limit``, ``billing``, ``auth``,
            ``auth_revoked``, ``shared_limit``, ``recovered``, ``operator_reset``.
        status: the upstream HTTP status behind it, if any.
    """

    TAG: ClassVar[str] = "credential.state_changed.v1"

    provider: str
    fingerprint: str
    state: str
    previous: str = "ok"
    at: str = ""
    until: str | None = None
    reason: str = ""
    status: int | None = None


class BreakerChanged(Event, frozen=True):
    """The breaker of ``provider`` is now ``state`` (``open`` or ``closed``).

    Attributes:
        until: when an open breaker lets one probe call through (ISO 8601 UTC); None when
            closed, or open with no foreseeable end (every key dead).
        reason: ``no_usable_key`` or ``overload`` when opening; ``recovered`` (a call
            succeeded), ``key_available`` or ``operator_reset`` when closing.
    """

    TAG: ClassVar[str] = "ratelimit.breaker_changed.v1"

    provider: str
    state: str
    until: str | None = None
    reason: str = ""
