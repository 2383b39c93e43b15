"""A provider's credit balance as one reading: from response headers or a balance endpoint.

The credits tracker (``sessionwarden.domain.credits.notices``) judges readings; this module only
makes them, strictly. Two sources, one shape (:class:`CreditReading`): response headers
and a balance endpoint, each read as below.

Rules:

**Response headers** (:func:`parse_credit_headers`, hermes-behaviour.md §6). Names are
case-insensitive: ``x-nous-credits-<field>``, the ``tool-pool`` fields
``x-nous-tool-pool-<field>``.

- ``version`` must be present and the integer 1; a higher version is a miss the caller
  may warn about once per process (:func:`unsupported_credit_version` says which).
- Required (a missing or malformed one makes the whole reading absent, never a guess):
  ``remaining-micros``, ``rollover-micros``, ``purchased-micros``, ``as-of-ms`` (integers
  ≥ 0), ``subscription-micros`` (signed: a debt may be negative), and the dollar strings
  ``remaining-usd``, ``subscription-usd``, ``purchased-usd``.
- Optional: ``paid-access`` (``true``/``false``, absent → true: fail open),
  ``x-nous-tool-pool-micros`` (0), ``x-nous-tool-pool-gated-off`` (false),
  ``denominator-kind`` (``subscription_cap`` or ``none``, absent → none; anything else is
  a miss), ``disabled-reason``, and the pair ``subscription-limit-micros`` +
  ``subscription-limit-usd``: half a pair counts as neither, a malformed one is a miss.

Integers are parsed exactly, never through a float (above 2**53 a float loses micros).
Decisions where §6 is silent, each stricter than Python's ``int()`` that Hermes uses:
ASCII digits only with at most one leading ``-`` and at most 19 digits (``"1_000"``,
``"+5"``, ``"1e6"``, ``"5.0"`` and non-ASCII digits are rejected); dollar strings must
match ``-?[0-9]+\\.[0-9]{2}`` in full, ASCII digits only (Hermes's ``\\d`` admits any
script's digits, which no amount display uses); a name present twice with different
values (case variants) is a miss rather than last-one-wins. Surrounding whitespace is
stripped. Parsing never raises.

**A balance endpoint** (:func:`parse_balance`): OpenRouter's ``GET /api/v1/key`` (or the
older ``/api/v1/auth/key``) answers ``{"data": {"limit": 100 | null, "limit_remaining":
74.5 | null, "usage": 25.5, "is_free_tier": false, ...}}`` in dollars. A key with a
``limit`` becomes a reading whose subscription cap is that limit and whose subscription
balance is what remains of it, so the same 50/75/90 % bands apply; a key without one
(``limit: null``) is a miss, as it gives the policy nothing to judge. ``paid_access``
stays true: §6 never infers depletion from a zero balance. Dollars become exact micros
through ``Decimal`` (a float is read by its repr).
"""

import re
from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Literal

import msgspec

__all__ = [
    "HEADER_VERSION",
    "CreditReading",
    "parse_balance",
    "parse_credit_headers",
    "unsupported_credit_version",
]

#: The only ``x-nous-credits-version`` this parser understands.
HEADER_VERSION = 1

_UNSIGNED = re.compile(r"[0-9]{1,19}")
_SIGNED = re.compile(r"-?[0-9]{1,19}")
_USD = re.compile(r"-?[0-9]{1,16}\.[0-9]{2}")
_DENOMINATOR_KINDS = ("subscription_cap", "none")
_MAX_REASON = 120
_MICROS = Decimal(1_000_000)
_CENT = Decimal("0.01")
#: A balance beyond a trillion dollars is a malformed answer, not a balance.
_MAX_USD = Decimal(10) ** 12
_VERSION = "x-nous-credits-version"


class CreditReading(msgspec.Struct, frozen=True, kw_only=True):
    """One observation of an account's credits; money in integer micros (1e-6 USD).

    Attributes:
        remaining_micros: everything the account can still spend.
        remaining_usd: the provider's own display string for it (``"30.34"``), verbatim.
        subscription_micros: what is left of the subscription grant; negative is debt.
        subscription_usd: its display string.
        rollover_micros: credit carried over from an earlier period.
        purchased_micros: top-up credit bought on top of the grant.
        purchased_usd: its display string.
        as_of_ms: the provider's time of the figures, Unix milliseconds (0: unknown).
        subscription_limit_micros: the grant's cap, the gauge's denominator (None: none).
        subscription_limit_usd: its display string (set exactly when the micros are).
        tool_pool_micros: the separate tool-call pool.
        tool_pool_gated_off: whether that pool is switched off.
        denominator_kind: ``"subscription_cap"`` or ``"none"``.
        paid_access: whether paid models are served; False is the one sign of depletion.
        disabled_reason: the provider's short reason when access is off (not shown).
        source: ``"header"`` or ``"balance"`` (a polled endpoint).
        version: the header contract's version.
    """

    remaining_micros: int
    remaining_usd: str
    subscription_micros: int
    subscription_usd: str
    rollover_micros: int
    purchased_micros: int
    purchased_usd: str
    as_of_ms: int
    subscription_limit_micros: int | None = None
    subscription_limit_usd: str | None = None
    tool_pool_micros: int = 0
    tool_pool_gated_off: bool = False
    denominator_kind: Literal["subscription_cap", "none"] = "none"
    paid_access: bool = True
    disabled_reason: str | None = None
    source: Literal["header", "balance"] = "header"
    version: int = HEADER_VERSION

    @property
    def depleted(self) -> bool:
        """Paid access is off. Never inferred from a zero balance (§6: renewal pending)."""
        return not self.paid_access

    @property
    def used_fraction(self) -> Fraction | None:
        """Share of the cap spent, exactly, clamped to [0, 1]; None without a cap > 0.

        Exact (a :class:`~fractions.Fraction`) so that a band boundary such as 90 % is
        met exactly at 90 %, whatever the cap.
        """
        limit = self.subscription_limit_micros
        if limit is None or limit <= 0:
            return None
        used = Fraction(limit - self.subscription_micros, limit)
        return min(Fraction(1), max(Fraction(0), used))

    @property
    def used_micros(self) -> int | None:
        """Micros spent of the cap, clamped to [0, cap]; None without a cap > 0."""
        limit = self.subscription_limit_micros
        if limit is None or limit <= 0:
            return None
        return max(0, min(limit, limit - self.subscription_micros))


def _lowered(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The ``x-nous-`` headers by lowercase name; None if a name repeats with two values."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        # the first letter alone turns away most headers cheaply (this runs on every response)
        if not isinstance(name, str) or name[:1] not in "xX" or name[:7].lower() != "x-nous-":
            continue
        low = name.lower()
        if not isinstance(value, str):
            return None
        value = value.strip()
        if found.get(low, value) != value:
            return None
        found[low] = value
    return found


def unsupported_credit_version(headers: Mapping[str, str]) -> int | None:
    """The credits header version when it is an integer above the one understood, else None.

    Such a reading is a miss; the caller warns once per process that the provider speaks a
    newer contract (the domain keeps no process-wide latch).
    """
    fields = _lowered(headers)
    raw = None if fields is None else fields.get(_VERSION)
    if raw is None or not _UNSIGNED.fullmatch(raw):
        return None
    version = int(raw)
    return version if version > HEADER_VERSION else None


class _Miss(Exception):
    """A field broke the contract: the whole reading is absent."""


def _int(fields: dict[str, str], name: str, *, signed: bool = False) -> int:
    raw = fields.get(name)
    if raw is None or not (_SIGNED if signed else _UNSIGNED).fullmatch(raw):
        raise _Miss(name)
    return int(raw)


def _usd(fields: dict[str, str], name: str) -> str:
    raw = fields.get(name)
    if raw is None or not _USD.fullmatch(raw):
        raise _Miss(name)
    return raw


def _bool(fields: dict[str, str], name: str, default: bool) -> bool:
    raw = fields.get(name)
    if raw is None:
        return default
    flag = raw.lower()
    if flag not in ("true", "false"):
        raise _Miss(name)
    return flag == "true"


def _reason(raw: str | None) -> str | None:
    """The provider's reason, printable ASCII only and short (it is logged, never trusted)."""
    if raw is None:
        return None
    kept = "".join(ch for ch in raw if " " <= ch <= "~")[:_MAX_REASON]
    return kept or None


def parse_credit_headers(headers: Mapping[str, str]) -> CreditReading | None:
    """Read the ``x-nous-credits-*`` headers of a response into a :class:`CreditReading`.

    Returns None (a miss) when the version header is absent or not 1, or when any field
    breaks the contract of the module docstring. Never raises.
    """
    fields = _lowered(headers)
    if fields is None or _VERSION not in fields:
        return None
    c = "x-nous-credits-"
    try:
        if _int(fields, _VERSION) != HEADER_VERSION:
            return None
        limit_micros = limit_usd = None
        if c + "subscription-limit-micros" in fields and c + "subscription-limit-usd" in fields:
            limit_micros = _int(fields, c + "subscription-limit-micros")
            limit_usd = _usd(fields, c + "subscription-limit-usd")
        kind = fields.get(c + "denominator-kind", "none")
        if kind not in _DENOMINATOR_KINDS:
            return None
        return CreditReading(
            remaining_micros=_int(fields, c + "remaining-micros"),
            remaining_usd=_usd(fields, c + "remaining-usd"),
            subscription_micros=_int(fields, c + "subscription-micros", signed=True),
            subscription_usd=_usd(fields, c + "subscription-usd"),
            rollover_micros=_int(fields, c + "rollover-micros"),
            purchased_micros=_int(fields, c + "purchased-micros"),
            purchased_usd=_usd(fields, c + "purchased-usd"),
            as_of_ms=_int(fields, c + "as-of-ms"),
            subscription_limit_micros=limit_micros,
            subscription_limit_usd=limit_usd,
            tool_pool_micros=(
                _int(fields, "x-nous-tool-pool-micros")
                if "x-nous-tool-pool-micros" in fields
                else 0
            ),
            tool_pool_gated_off=_bool(fields, "x-nous-tool-pool-gated-off", False),
            denominator_kind="subscription_cap" if kind == "subscription_cap" else "none",
            paid_access=_bool(fields, c + "paid-access", True),
            disabled_reason=_reason(fields.get(c + "disabled-reason")),
        )
    except _Miss:
        return None


def _micros(value: object) -> int | None:
    """A JSON number of dollars as exact integer micros; None if absent, odd or absurd.

    Numbers only (a decoder's int, float or Decimal): a string is not an amount.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        # A float is read by its shortest repr: 74.5 is "74.5", not 74.5000000000000000001.
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if not amount.is_finite() or abs(amount) > _MAX_USD:
            return None
        return int((amount * _MICROS).to_integral_value(ROUND_HALF_EVEN))
    except ArithmeticError:  # an exponent beyond what Decimal's context allows
        return None


def _display(micros: int) -> str:
    return f"{(Decimal(micros) / _MICROS).quantize(_CENT, ROUND_HALF_EVEN):f}"


def parse_balance(body: object) -> CreditReading | None:
    """Read an OpenRouter key-endpoint answer (``{"data": {...}}``) as a :class:`CreditReading`.

    ``limit`` (dollars) becomes the subscription cap and ``limit_remaining`` (or, if
    absent, ``limit - usage``) the subscription balance. A miss (None): a key without a
    limit (null: nothing to gauge, and no sign of depletion either), a body of another
    shape, a non-numeric or absurd amount, or a cap without a way to know what remains.
    ``as_of_ms`` is 0: the endpoint does not date its figures (the caller knows when it
    polled). Never raises.
    """
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        return None
    usage_raw, remaining_raw = data.get("usage"), data.get("limit_remaining")
    usage = None if usage_raw is None else _micros(usage_raw)
    if usage_raw is not None and usage is None:
        return None
    limit = _micros(data.get("limit"))  # null (no limit) is a miss like any non-number
    if limit is None or limit < 0:
        return None
    if remaining_raw is not None:
        remaining = _micros(remaining_raw)
    else:
        remaining = None if usage is None else limit - usage
    if remaining is None:
        return None
    return CreditReading(
        remaining_micros=max(0, remaining),
        remaining_usd=_display(max(0, remaining)),
        subscription_micros=remaining,
        subscription_usd=_display(remaining),
        rollover_micros=0,
        purchased_micros=0,
        purchased_usd="0.00",
        as_of_ms=0,
        subscription_limit_micros=limit,
        subscription_limit_usd=_display(limit),
        denominator_kind="subscription_cap",
        source="balance",
    )
