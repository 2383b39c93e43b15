"""Benchmark of pricing and reservation per call, in-process (issue 12: ≤ 50 µs, median).

Run ``.venv/bin/python bench/pricing.py [--calls N] [--rounds R] [--sessions S]``. What a
call pays for its money, as the daemon does it for one typical call (a Claude Sonnet call
through the price book, genai-prices' bundled data, 3,000 prompt tokens of which 2,000
cached, 400 out):

pricing   ``PriceBook.lookup`` + ``pricing.cost`` of the response's canonical usage
reserve   the worst case (``worst_input_price``, ``output_bound``, ``worst_case``) and
          ``budgets.reserve`` (session, provider-day and day caps), then ``budgets.settle``
total     both, one after the other: the figure the target is about
decode    (baseline) ``msgspec.json.decode`` of the response's usage block and
          ``normalise_usage`` of it: what every call already paid before pricing existed
compacted (information) ``pricing.cost`` of an Anthropic usage block with two
          iterations (a compaction and a message), each priced on its own

Modes run in turn in each round (A B C…, A B C…), N calls each, over S sessions (the
reservation state holds one tally per session, and more sessions make it dearer); the
table prints the median CPU µs per call (this process's ``process_time``: on a shared
machine wall time counts the other processes too) over rounds, the min–max, and
per-round ratios to ``decode``. Numbers only; nothing here asserts on time.
"""

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import msgspec
from sessionwarden.config import Config, ProviderConfig
from sessionwarden.domain.cost.caps import BudgetCall, Caps, Reserved, Spend, reserve, settle
from sessionwarden.domain.cost.price_book import PriceBook
from sessionwarden.domain.cost.pricing import cost
from sessionwarden.domain.cost.worst_case import output_bound, worst_case, worst_input_price
from sessionwarden.domain.usage.canonical import normalise_usage

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PROVIDER, MODEL = "anthropic", "claude-sonnet-4-5"
USAGE_BLOCK = msgspec.json.encode({
    "prompt_tokens": 3000, "completion_tokens": 400,
    "prompt_tokens_details": {"cached_tokens": 2000},
    "completion_tokens_details": {"reasoning_tokens": 120},
})
COMPACTED = normalise_usage("anthropic_messages", {
    "input_tokens": 900, "output_tokens": 400, "cache_read_input_tokens": 2000,
    "iterations": [
        {"type": "compaction", "input_tokens": 150000, "output_tokens": 3000},
        {"type": "message", "input_tokens": 900, "cache_read_input_tokens": 2000,
         "output_tokens": 400},
    ],
})


def setup() -> tuple[PriceBook, Caps]:
    config = Config(providers=(ProviderConfig(
        name=PROVIDER, base_url="https://api.anthropic.com/v1",
        api_mode="anthropic_messages"),))
    caps = Caps(session_usd=Decimal("1000000"), daily_usd=Decimal("1000000000"),
                provider_daily_usd={PROVIDER: Decimal("1000000000")})
    return PriceBook(config), caps


def modes(book: PriceBook, caps: Caps, sessions: int) -> dict[str, Callable[[int], None]]:
    usage = normalise_usage("chat_completions", msgspec.json.decode(USAGE_BLOCK))
    state = {"spend": Spend()}

    def pricing(n: int) -> None:
        for _ in range(n):
            cost(usage, book.lookup(PROVIDER, MODEL, at=NOW))

    def reservation(n: int, priced: bool = False) -> None:
        spend = state["spend"]
        for i in range(n):
            lookup = book.lookup(PROVIDER, MODEL, at=NOW)
            price = lookup.price
            assert price is not None and price.input is not None and price.output is not None
            worst = worst_case(3000, output_bound(1024, None),
                               worst_input_price(price.input, price.cache_write,
                                                 price.cache_write_1h), price.output)
            call = BudgetCall(call_id=f"c{i}", session_id=f"s{i % sessions}",
                              provider=PROVIDER, worst_case=worst)
            done = reserve(spend, caps, call, NOW)
            assert isinstance(done, Reserved)
            amount = cost(usage, lookup).amount if priced else worst
            spend = settle(done.spend, done.reservation, amount)
        state["spend"] = spend

    def decode(n: int) -> None:
        for _ in range(n):
            normalise_usage("chat_completions", msgspec.json.decode(USAGE_BLOCK))

    def compacted(n: int) -> None:
        for _ in range(n):
            cost(COMPACTED, book.lookup(PROVIDER, MODEL, at=NOW))

    return {"decode": decode, "pricing": pricing, "reserve": reservation,
            "total": lambda n: reservation(n, priced=True), "compacted": compacted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per mode and round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=1000,
                        help="sessions the calls are spread over")
    args = parser.parse_args()
    started = time.perf_counter()
    book, caps = setup()
    print(f"setup (the bundled genai-prices data): {time.perf_counter() - started:.2f} s")
    runs = modes(book, caps, args.sessions)
    for run in runs.values():
        run(min(args.calls, 2000))  # warm-up: caches, the sessions' tallies
    per_call: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            t0 = time.process_time()
            run(args.calls)
            per_call[name].append((time.process_time() - t0) / args.calls * 1e6)
    print(f"{args.rounds} rounds x {args.calls:,} calls over {args.sessions:,} sessions; CPU"
          f" µs per call (median, min-max), and per-round ratio to decode; load average"
          f" {os.getloadavg()[0]:.2f}:")
    for name, values in per_call.items():
        ratios = [v / d for v, d in zip(values, per_call["decode"], strict=True)]
        print(f"{name:<10} {statistics.median(values):8.2f} µs  "
              f"({min(values):.2f}-{max(values):.2f})  {statistics.median(ratios):5.2f}x decode")
    total = statistics.median(per_call["total"])
    print(f"target: pricing + reservation (total) <= 50 µs per call: {total:.2f} µs, "
          + ("met" if total <= 50 else "MISSED"))


if __name__ == "__main__":
    main()
