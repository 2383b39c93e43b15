"""CompressorActor and UsageLedgerActor: started and supervised, filled by later issues.

They exist now so the runtime (start order, supervision, shutdown) is the one they will
live in; until then they answer pings and refuse everything else. The ledger's rows are
already there: ``view_ledger`` folds every CallCompleted; the UsageLedgerActor will own
prices, costs and spend caps.
"""

from sessionwarden.actors.bridge import GovernedActor, Reply

__all__ = ["CompressorActor", "UsageLedgerActor"]


class CompressorActor(GovernedActor):
    """Will own compression policy, summariser routing and anti-thrashing."""

    def handle(self, message: object, reply: Reply) -> object:
        """Refuse messages: compression is not implemented yet."""
        raise NotImplementedError("compression is not implemented yet")


class UsageLedgerActor(GovernedActor):
    """Will own prices, costs, spend caps and credit notices."""

    def handle(self, message: object, reply: Reply) -> object:
        """Refuse messages: pricing is not implemented yet."""
        raise NotImplementedError("pricing is not implemented yet")
