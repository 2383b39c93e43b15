"""``usage --reprice``: what the recorded history costs under the current prices.

Read-only, like ``usage``: the log is opened read-only and nothing is written. Each
completed call is priced again at the current prices and put next to its recorded cost.

The *current prices* are those a daemon started now would use: the configuration
(``--config``, default ``$SESSIONWARDEN_CONFIG``, else the environment: its overrides
and ``billing``), the latest price listing the log holds for each provider that has a
``pricing_url``, and the bundled genai-prices data (``domain/cost/price_book.py``: override >
listing > library). Each completed call of the ledger (``view_ledger``) is priced again
from its recorded token counts, at its own time (a library price that depends on the
date or the hour stays the one of that time), and put next to its recorded cost, per
group (``--by``, ``--session``, ``--since``, ``--until`` as for ``usage``).

Per group: the recorded ``cost`` and ``cost_status`` (the ``usage`` rules), the
``repriced_cost`` and ``repriced_status`` (the same rules), their ``difference``
(repriced − recorded, when both are known), ``newly_priced`` (calls whose recorded cost
is unknown and that now have a price), ``unpriced`` (calls still, or now, without one)
and ``prices`` (how many calls each price source priced now). A provider-reported cost
(OpenRouter ``usage.cost``) was what the provider billed; repricing asks what *our*
prices say, so it is not carried over. ``--json`` gives exact decimal strings;
the table rounds and says so.

Limits: a call is repriced from the token sums the ledger keeps, so an Anthropic call
with several ``iterations`` is priced as one request (a long-context tier is judged on
the sum), the 1-hour cache-write split is not known to it, and neither are its web
searches: a call's web-search fees are not repriced (its recorded cost includes them).
"""

import argparse
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import apsw
from sessionwarden.cmd.cli.listing import print_listing
from sessionwarden.cmd.daemon.config import load_config
from sessionwarden.cmd.daemon.price_listings import recorded_listings
from sessionwarden.cmd.errors import CommandError
from sessionwarden.domain.cost.caps import display_usd
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import cost
from sessionwarden.domain.usage.canonical import CanonicalUsage
from sessionwarden.domain.usage.recorded import EXACT, exact_sum
from sessionwarden.store import EventLog
from sessionwarden.store.schema import translate
from sessionwarden.text import Column, render_table, terminal_width
from sessionwarden.views.usage import Group

__all__ = ["Repriced", "reprice_rows", "run_reprice"]

_ROUNDED_NOTE = "(costs rounded for display: ~; --json and --csv give the exact amounts)"
_COLUMNS = (
    Column("", 0, fixed=False), Column("REQUESTS", 1, right=True),
    Column("RECORDED", 2, right=True), Column("STATUS", 5),
    Column("REPRICED", 3, right=True), Column("NOW", 6),
    Column("DIFFERENCE", 4, right=True), Column("NEWLY_PRICED", 7, right=True),
    Column("UNPRICED", 8, right=True), Column("PRICES", 9, fixed=False),
)


@dataclass
class Repriced:
    """One group's recorded cost and its cost under the current prices."""

    key: str
    recorded: Group
    repriced: Group
    newly_priced: int = 0
    unpriced: int = 0
    prices: Counter[str] = field(default_factory=Counter)

    @property
    def difference(self) -> str | None:
        """Repriced minus recorded, exact; None unless both are known."""
        before, after = self.recorded.cost, self.repriced.cost
        return (None if before is None or after is None
                else str(EXACT.subtract(Decimal(after), Decimal(before))))

    def merge(self, other: "Repriced") -> None:
        """Add ``other``'s calls to this group."""
        self.recorded.merge(other.recorded)
        self.repriced.merge(other.repriced)
        self.newly_priced += other.newly_priced
        self.unpriced += other.unpriced
        self.prices.update(other.prices)

    def to_json(self, by: str) -> dict[str, Any]:
        """The group as a JSON object, its key named after ``by``."""
        return {by: self.key, "requests": self.recorded.requests,
                "cost": self.recorded.cost, "cost_status": self.recorded.cost_status,
                "repriced_cost": self.repriced.cost,
                "repriced_status": self.repriced.cost_status,
                "difference": self.difference, "newly_priced": self.newly_priced,
                "unpriced": self.unpriced, "prices": dict(sorted(self.prices.items())),
                "first_at": self.recorded.first_at, "last_at": self.recorded.last_at}


def _group(key: str) -> Repriced:
    return Repriced(key, Group(key), Group(key))


def _recorded_cost(text: str | None, status: str) -> Decimal | None:
    if text is None or status == "unknown":
        return None
    # "NaN", "Infinity" or an absurd amount: unknown, as ``usage`` counts them.
    amount, junk = exact_sum([text])
    return None if junk else amount


def reprice_rows(rows: Iterable[Any], book: PriceBook) -> dict[str, Repriced]:
    """Group ledger rows and price each again with ``book``.

    A row is (group key, provider, model, usage source, cost, cost status, input,
    output, cache read and cache write tokens, recorded_at).
    """
    groups: dict[str, Repriced] = {}
    for key, provider, model, source, text, status, inp, out, cr, cw, at in rows:
        group = groups.get(key)
        if group is None:
            group = groups[key] = _group(str(key))
            group.recorded.first_at = at
        before, after = group.recorded, group.repriced
        before.requests += 1
        after.requests += 1
        before.last_at = at  # rows come in log order
        amount = _recorded_cost(text, status)
        if amount is None:
            before.statuses.add("unknown")
        else:
            before.statuses.add(status)
            before.cost_sum = EXACT.add(before.cost_sum, amount)
        usage = CanonicalUsage(source=source, input_tokens=inp, output_tokens=out,
                               cache_read_tokens=cr, cache_write_tokens=cw)
        now = cost(usage, book.lookup(provider, model, at=datetime.fromisoformat(at)))
        after.statuses.add(now.status)
        if now.amount is None:
            group.unpriced += 1
            continue
        after.cost_sum = EXACT.add(after.cost_sum, now.amount)
        group.prices[now.source] += 1
        group.newly_priced += amount is None
    return groups


def _signed(amount: str | None) -> str:
    if amount is None:
        return "-"
    value = Decimal(amount)
    return display_usd(value) if value >= 0 else "-" + display_usd(-value)


def _shown(amount: str | None) -> str:
    return "unknown" if amount is None else display_usd(Decimal(amount))


def run_reprice(args: argparse.Namespace, db: Path, column: str, where: str,
                params: tuple[object, ...]) -> int:
    """Print ``usage --reprice`` for the ledger rows matching ``where`` grouped by ``column``."""
    config = load_config(args.config, os.environ)
    with EventLog(db, readonly=True) as log:
        conn = log.read_connection()
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if "view_ledger" not in tables:
                raise CommandError(f"{db}: no view_ledger in this database "
                                   "(not written by sessionwarden, or without its views)")
            rows = conn.execute(
                f"SELECT {column}, provider, model, source, cost, cost_status, input_tokens,"
                " output_tokens, cache_read_tokens, cache_write_tokens, recorded_at"
                f" FROM view_ledger WHERE {where} ORDER BY seq", params).fetchall()
            book = PriceBook(config)
            for provider, listing in recorded_listings(log, config).items():
                book.adopt(provider, listing)
        except apsw.Error as exc:
            raise translate(exc, db) from None
    groups = reprice_rows(rows, book)
    ordered = sorted(groups.values(), key=lambda g: (g.recorded.first_at, g.key))
    total = _group("total")
    for g in ordered:
        total.merge(g)
    if print_listing(args, [g.to_json(args.by) for g in ordered], total.to_json(args.by),
                     lambda row: [row | {"prices": ", ".join(
                         f"{s}: {n}" for s, n in row["prices"].items())}]):
        return 0
    if not ordered:
        print("no calls recorded" + (" matching the filters" if where != "1" else ""))
        return 0
    columns = (replace(_COLUMNS[0], header=args.by.upper()), *_COLUMNS[1:])
    table = [
        [g.key, str(g.recorded.requests), _shown(g.recorded.cost), g.recorded.cost_status,
         _shown(g.repriced.cost), g.repriced.cost_status, _signed(g.difference),
         str(g.newly_priced), str(g.unpriced),
         ", ".join(f"{s}: {n}" for s, n in sorted(g.prices.items())) or "-"]
        for g in [*ordered, total]
    ]
    width = terminal_width()
    print(render_table(columns, table, width).text(width, rule_before_last=True))
    print("(repriced with the current prices: the configuration, the latest price listings "
          "in the log, genai-prices; the log is unchanged)")
    shown = [c for g in ordered for c in (g.recorded.cost, g.repriced.cost, g.difference)]
    if any(c is not None and "~" in _signed(c) for c in shown):
        print(_ROUNDED_NOTE)
    return 0
