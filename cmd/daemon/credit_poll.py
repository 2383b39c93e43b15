"""The balance poller: a background task that reads each key's credit balance endpoint.

For a provider with ``credits_url`` (an OpenRouter-style key endpoint, ``GET`` with the
key, ``{"data": {"limit": …, "limit_remaining": …, "usage": …}}``), every usable key is
polled at once when the daemon starts, then at most once per
:data:`~sessionwarden.domain.credits.notices.POLL_INTERVAL` (``domain/credits.next_poll``; a
minute: notices move in bands of 15 to 25 points, and each poll counts against the key's
own rate limit).

The answer is read by ``domain/credit_readings.parse_balance`` and sent
to the rate guard (:class:`~sessionwarden.actors.credits.ObserveCredits`), which owns the
credits tracker and records what changed. The first balance of a key the log knows
nothing of is a seed: a key already deep in a band is announced at once.

Bounded and quiet: each poll has :data:`POLL_TIMEOUT_S` in all and reads at most
:data:`MAX_ANSWER_BYTES`; redirects are not followed (the key would follow them). A
failure (unreachable, a non-200 status, an oversized or unreadable answer, a key without
a credit limit) is logged once per key until a poll succeeds again, and never stops the
task; the key is never logged, only its fingerprint. The task runs beside the server
(started and cancelled by the daemon's lifespan, ``cmd/daemon/start.py``).
"""

import asyncio
from datetime import datetime

import aiohttp
import msgspec
from loguru import logger
from sessionwarden.actors.bridge import ask
from sessionwarden.actors.credits import ObserveCredits
from sessionwarden.cmd.daemon.runtime import Runtime
from sessionwarden.config import ConfigError, ProviderConfig, resolve_key
from sessionwarden.domain.credits.notices import next_poll
from sessionwarden.domain.credits.readings import parse_balance
from sessionwarden.redact import default_redactor, fingerprint
from sessionwarden.upstream import adapter_for

__all__ = ["MAX_ANSWER_BYTES", "POLL_TIMEOUT_S", "TICK_S", "BalancePoller", "PollTarget",
           "poll_targets"]

#: The longest a poll may take, connection included.
POLL_TIMEOUT_S = 10.0
#: The largest answer read (OpenRouter's is under 1 KiB).
MAX_ANSWER_BYTES = 64 * 1024
#: How often the task wakes to see what is due (a clock set forward is noticed then).
TICK_S = 1.0


class _Failed(Exception):
    """A poll failed; the message is safe to log (no key, no answer body)."""


class PollTarget:
    """One key of one provider to poll; the secret is never in its repr."""

    __slots__ = ("credential", "due", "failing", "provider", "secret")

    def __init__(self, provider: ProviderConfig, secret: str) -> None:
        """Poll ``secret``'s balance at ``provider.credits_url``, first at once."""
        self.provider = provider
        self.secret = secret
        self.credential = fingerprint(secret)
        self.due: datetime | None = None  # None: now
        self.failing = False

    def __repr__(self) -> str:
        return f"PollTarget({self.provider.name!r}, {self.credential!r})"


def poll_targets(rt: Runtime) -> list[PollTarget]:
    """Every usable key of every provider with a ``credits_url``."""
    targets: list[PollTarget] = []
    for provider in rt.config.usable_providers:
        if not provider.credits_url or provider.simulated:
            continue
        for ref in provider.keys:
            try:
                secret = resolve_key(ref, rt.environ)
                default_redactor.add(secret)  # already there: the pool registered it
            except (ConfigError, ValueError):
                continue  # the pool skipped it too, and said why
            targets.append(PollTarget(provider, secret))
    return targets


class BalancePoller:
    """Polls every target's balance endpoint at its bounded rate, until cancelled."""

    def __init__(self, rt: Runtime, *, tick_s: float | None = None) -> None:
        """Poll the keys of ``rt``'s providers; wake every ``tick_s`` (:data:`TICK_S`) s.

        The tick lets a clock set forward (or a test's fake clock) bring a poll due
        without waiting out a whole interval; it costs one wake-up per tick.
        """
        self.rt = rt
        self.targets = poll_targets(rt)
        self.tick_s = TICK_S if tick_s is None else tick_s
        #: Polls made (tests count them).
        self.polls = 0

    async def run(self) -> None:
        """Poll what is due, sleep until the next is (at most a tick); never returns."""
        while True:
            for target in self.targets:
                now = self.rt.clock.now()
                if target.due is None or target.due <= now:
                    await self.poll(target)
                    target.due = next_poll(now, self.rt.clock.now())
            await asyncio.sleep(self.tick_s)

    async def poll(self, target: PollTarget) -> None:
        """Poll one key once; a failure is logged (once until the next success)."""
        self.polls += 1
        try:
            reading = parse_balance(msgspec.json.decode(await self._fetch(target)))
            if reading is None:
                raise _Failed("the answer holds no credit limit to watch")
            await ask(self.rt.rateguard, ObserveCredits(
                target.provider.name, target.credential, reading), timeout=POLL_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not target.failing:
                target.failing = True
                reason = str(exc) if isinstance(exc, _Failed) else type(exc).__name__
                logger.warning("provider {}: the credit balance of key {} could not be read "
                               "({}); retrying every minute", target.provider.name,
                               target.credential, reason)
            return
        if target.failing:
            target.failing = False
            logger.info("provider {}: the credit balance of key {} is read again",
                        target.provider.name, target.credential)

    async def _fetch(self, target: PollTarget) -> bytes:
        provider = target.provider
        adapter = adapter_for(provider.api_mode)
        auth = (adapter.auth_headers(target.secret) if adapter is not None
                else {"authorization": f"Bearer {target.secret}"})
        session = self.rt.upstream.session(provider)
        try:
            async with asyncio.timeout(POLL_TIMEOUT_S):
                async with session.get(provider.credits_url, headers=auth,
                                       allow_redirects=False) as response:
                    if response.status != 200:
                        raise _Failed(f"HTTP {response.status}")
                    body = bytearray()
                    async for chunk in response.content.iter_any():
                        body += chunk
                        if len(body) > MAX_ANSWER_BYTES:
                            raise _Failed(f"the answer is over {MAX_ANSWER_BYTES // 1024} KiB")
        except TimeoutError:
            raise _Failed(f"no answer within {POLL_TIMEOUT_S:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Failed(f"unreachable: {type(exc).__name__}") from None
        return bytes(body)
