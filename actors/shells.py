"""CompressorActor and RateGuardActor: started and supervised, filled by later issues.

They exist now so the runtime (start order, supervision, shutdown) is the one they will
live in; until then they answer pings and refuse everything else.
"""

from sessionwarden.actors.bridge import GovernedActor, Reply

__all__ = ["CompressorActor", "RateGuardActor"]


class CompressorActor(GovernedActor):
    """Will own compression policy, summariser routing and anti-thrashing."""

    def handle(self, message: object, reply: Reply) -> object:
        """Refuse messages: compression is not implemented yet."""
        raise NotImplementedError("compression is not implemented yet")


class RateGuardActor(GovernedActor):
    """Will own the per-provider breaker and last-known rate-limit buckets."""

    def handle(self, message: object, reply: Reply) -> object:
        """Refuse messages: the breaker is not implemented yet."""
        raise NotImplementedError("the rate-limit breaker is not implemented yet")
