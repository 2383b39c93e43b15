"""Reading one field of a provider's usage block, which a hostile provider controls.

``sessionwarden.domain.usage.canonical`` applies these readers to every shape; a value
they do not accept raises :class:`~sessionwarden.domain.errors.UsageRejected`.

The rules: a token counter is absent (None) or a non-negative integer up to
:data:`MAX_TOKENS_PER_FIELD` (an integral float such as ``10.0`` is accepted); a cost is
a non-negative JSON number up to :data:`MAX_REPORTED_COST`, kept exact as a Decimal; a
nested object is a mapping; a label (an iteration's ``type`` or ``model``) is a short
printable string. Anything else raises :class:`~sessionwarden.domain.errors.UsageRejected`
naming the dotted field and never repeating the value (the provider controls it, and it
could be a secret echoed back).
"""

import math
from collections.abc import Mapping
from decimal import Decimal

from sessionwarden.domain.errors import UsageRejected

__all__ = [
    "MAX_ITERATIONS",
    "MAX_REPORTED_COST",
    "MAX_TOKENS_PER_FIELD",
    "Block",
    "cache_split",
    "count",
    "details",
    "either",
    "label",
    "money",
    "reported_cost",
]

#: No single request plausibly uses more tokens than this in one bucket.
MAX_TOKENS_PER_FIELD = 10_000_000
#: No single request plausibly reports more sampling iterations than this.
MAX_ITERATIONS = 256
#: No single request plausibly costs more than this many dollars (credits).
MAX_REPORTED_COST = Decimal(10_000)
_MAX_LABEL_CHARS = 200

#: A decoded JSON object, as the readers see it.
Block = Mapping[object, object]


def count(block: Block, key: str, where: str) -> int | None:
    """Read one counter: None when absent or null, else a validated non-negative int."""
    value = block.get(key)
    path = f"{where}{key}"
    if value is None:
        return None
    if isinstance(value, bool):
        raise UsageRejected(path, "expected an integer, got bool")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise UsageRejected(path, "expected an integer, got a fractional or non-finite number")
        number = int(value)
    else:
        raise UsageRejected(path, f"expected an integer, got {type(value).__name__}")
    if number < 0:
        raise UsageRejected(path, "negative")
    if number > MAX_TOKENS_PER_FIELD:
        raise UsageRejected(path, f"absurd (above {MAX_TOKENS_PER_FIELD:,})")
    return number


def either(*values: int | None) -> int | None:
    """The first non-zero value, else 0 if any was reported, else None."""
    reported = [value for value in values if value is not None]
    return next((value for value in reported if value), 0 if reported else None)


def details(block: Block, key: str, where: str = "") -> Block:
    """Read a nested ``*_details`` object; absent or null reads as empty."""
    value = block.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageRejected(f"{where}{key}", f"expected an object, got {type(value).__name__}")
    return value


def label(block: Block, key: str, where: str) -> str:
    """Read a short printable string (an iteration's ``type`` or ``model``); absent is ``""``."""
    value = block.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageRejected(f"{where}{key}", f"expected a string, got {type(value).__name__}")
    if len(value) > _MAX_LABEL_CHARS or not value.isprintable():
        raise UsageRejected(f"{where}{key}", "not a short printable string")
    return value


def money(value: object, path: str) -> Decimal:
    """A non-negative USD amount from a JSON number, exactly as written (no float maths)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageRejected(path, f"expected a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageRejected(path, "not a finite number")
    # repr() is the shortest text that reads back as the same float: the JSON's digits.
    amount = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    if amount < 0:
        raise UsageRejected(path, "negative")
    if amount > MAX_REPORTED_COST:
        raise UsageRejected(path, f"absurd (above ${MAX_REPORTED_COST:,})")
    return amount + 0  # + 0 turns -0.0 into 0


def reported_cost(block: Block) -> str | None:
    """OpenRouter's ``cost`` (plus the upstream's share for BYOK) as a Decimal string."""
    cost = block.get("cost")
    if cost is None:
        return None
    amount = money(cost, "cost")
    if block.get("is_byok") is True:
        upstream = details(block, "cost_details").get("upstream_inference_cost")
        if upstream is not None:
            amount += money(upstream, "cost_details.upstream_inference_cost")
    return format(amount, "f")


def cache_split(block: Block, where: str) -> tuple[int | None, int | None]:
    """Anthropic's ``cache_creation`` split: (5-minute, 1-hour) write tokens."""
    split = details(block, "cache_creation", where)
    inner = f"{where}cache_creation."
    return (count(split, "ephemeral_5m_input_tokens", inner),
            count(split, "ephemeral_1h_input_tokens", inner))


