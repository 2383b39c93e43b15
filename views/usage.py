"""The ledger's rows grouped for ``usage`` and ``reprice``: tokens, exact cost sums, status.

A group's cost and status follow the one rule of ``domain.usage.recorded``: any unknown
row makes the group unknown; one status is kept; several make it ``partial``.
"""

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sessionwarden.domain.usage.recorded import EXACT, combined_status

__all__ = ["KINDS", "Group"]

KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")


@dataclass
class Group:
    """The aggregate of the ledger rows of one group."""

    key: str
    requests: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    statuses: set[str] = field(default_factory=set)
    cost_sum: Decimal = Decimal(0)
    sources: dict[str, int] = field(default_factory=dict)
    first_at: str = ""
    last_at: str = ""

    @property
    def cost_status(self) -> str:
        """The group's cost status under the module's rules."""
        return combined_status(self.statuses)

    @property
    def cost(self) -> str | None:
        """The summed cost as a decimal string, or None when it is unknown."""
        return None if self.cost_status == "unknown" else str(self.cost_sum)

    def merge(self, other: "Group") -> None:
        """Add ``other``'s rows to this group."""
        self.requests += other.requests
        for kind in KINDS:
            self.tokens[kind] += other.tokens[kind]
        self.statuses |= other.statuses
        self.cost_sum = EXACT.add(self.cost_sum, other.cost_sum)
        for source, n in other.sources.items():
            self.sources[source] = self.sources.get(source, 0) + n
        self.first_at = min(filter(None, (self.first_at, other.first_at)), default="")
        self.last_at = max(self.last_at, other.last_at)

    def to_json(self, by: str) -> dict[str, Any]:
        """The group as a JSON object, its key named after ``by``."""
        tokens = {f"{k}_tokens": v for k, v in self.tokens.items()}
        return {by: self.key, "requests": self.requests, **tokens, "cost": self.cost,
                "cost_status": self.cost_status, "sources": self.sources,
                "first_at": self.first_at, "last_at": self.last_at}
