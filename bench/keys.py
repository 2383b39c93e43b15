"""Keys and limits: what choosing a key and classifying an error cost, and a fast refusal.

Run ``.venv/bin/python bench/keys.py [--calls N] [--rounds R] [--in-process]``
(``--in-process``: part 1 only, no daemon). Three parts, one run:

1. In-process, medians of ``--rounds`` rounds of many iterations, in µs per call:
   * ``select``: what every call pays in the pool: the breaker's decision and the usable
     keys (``ProviderHealth.allowed``), the strategy's pick and the release
     (``Pool.lease``/``release``) — 4 keys, one benched;
   * ``classify``: what a *failed* call pays on top: ``domain.classify.classifier.classify`` of a
     real OpenAI 429 (headers and body) and its mapping to the key's failure;
   * baseline: ``parse_rate_limits`` of an OpenAI success's headers, which every call
     already pays in the rate guard; and of the 429's four headers (part of classify);
   * the ceiling of classify: the least any classifier must do with that 429 — decode
     the body (msgspec), lowercase its message, scan one phrase list (content policy,
     the first rule), read the four headers' values (names by prefix, numbers and the
     one duration) — with no walk, no normalising, no rules and no result.
2. Through a real daemon (subprocess) against the fake upstream, client p50 in ms of
   ``--calls`` plain calls, then of as many calls refused because every key is benched
   (one call answered 429 "2 h" by the upstream benched both keys): a refusal must cost
   less than a plain proxied call.
3. A failover's cost: against an in-process fake steered per key, the daemon's two keys
   taken in turn (round robin), ``--calls`` plain calls, then as many with key A
   answering 403 (a key failure that rotates without benching): the calls that start on
   A fail over to B. The difference of the means over the share of calls that failed
   over is one failover's cost, set against the upstream's own round trip (the fake
   called directly, same run).

Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
from proxy import TOKEN, Proc, start_daemon, start_fake
from sessionwarden.actors.key_health import ProviderHealth
from sessionwarden.domain.classify.classifier import classify
from sessionwarden.domain.classify.failover import key_failure
from sessionwarden.domain.classify.patterns import DEFAULT_PATTERNS
from sessionwarden.domain.keys.key_states import KeyFailure
from sessionwarden.domain.keys.pool import KeyState, Pool
from sessionwarden.domain.keys.ratelimits import parse_duration, parse_rate_limits

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
OK_HEADERS = {"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
              "x-ratelimit-reset-requests": "6ms", "x-ratelimit-limit-tokens": "2000000",
              "x-ratelimit-remaining-tokens": "1999000", "x-ratelimit-reset-tokens": "1ms"}
LIMIT_HEADERS = {"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "0",
                 "x-ratelimit-reset-requests": "2h0m0s", "retry-after": "7200"}
LIMIT_BODY = (b'{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on '
              b'requests per day (RPD): Limit 500, Used 500, Requested 1. Please try again '
              b'in 2h0m0s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}')
GENUINE = {"status": 429, "headers": {"x-ratelimit-remaining-requests": "0",
                                      "x-ratelimit-reset-requests": "2h0m0s"}}
MESSAGES = [{"role": "user", "content": "Say hello to the benchmark."}]


def per_call(fn: object, n: int, rounds: int) -> float:
    """The median over rounds of the µs per call of ``fn`` (a no-argument callable)."""
    assert callable(fn)
    medians = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        medians.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(medians)


def in_process(rounds: int) -> None:
    pool = Pool("round_robin", 4)
    pool.keys = [KeyState(f"env:K{i}", f"sk-bench-{i}-{'x' * 20}") for i in range(4)]
    fps = pool.fingerprints()
    health = ProviderHealth("bench")
    health.failed(fps, fps[0], KeyFailure(kind="genuine_limit", status=429,
                                          reset_at=NOW.replace(hour=14)), NOW)
    rng = random.Random(1)

    def select() -> None:
        key = pool.lease(rng, health.allowed(fps, (), NOW))
        pool.release(key.fingerprint)

    def judge() -> None:
        found = classify(429, LIMIT_HEADERS, LIMIT_BODY, now=NOW, provider="bench")
        key_failure(found, 429, NOW)

    def ceiling() -> None:
        decoded = msgspec.json.decode(LIMIT_BODY)
        text = decoded["error"]["message"].lower()
        for phrase in DEFAULT_PATTERNS.content_policy:
            if phrase in text:
                break
        for name, value in LIMIT_HEADERS.items():
            if name.startswith(("x-ratelimit-", "retry-after")):
                int(value) if value.isdecimal() else parse_duration(value)

    base = per_call(lambda: parse_rate_limits(OK_HEADERS, NOW), 20_000, rounds)
    limit = per_call(lambda: parse_rate_limits(LIMIT_HEADERS, NOW), 20_000, rounds)
    sel = per_call(select, 20_000, rounds)
    cls = per_call(judge, 5_000, rounds)
    floor = per_call(ceiling, 20_000, rounds)
    print(f"in-process, µs per call (median of {rounds} rounds):")
    print(f"  baseline parse_rate_limits (every call)  {base:8.2f}")
    print(f"  parse_rate_limits, the 429's 4 headers   {limit:8.2f}")
    print(f"  select a key (every call)                {sel:8.2f}  = {sel / base:.2f}x baseline")
    print(f"  classify a 429 (failed calls only)       {cls:8.2f}  = {cls / base:.2f}x baseline")
    print(f"  ceiling: the least a classify must do    {floor:8.2f}  (classify is "
          f"{cls / floor:.2f}x it)")
    print(f"  select + classify                        {sel + cls:8.2f}")


def through_daemon(calls: int) -> None:
    procs: list[Proc] = []
    workdir = Path(tempfile.mkdtemp(prefix="sw-keys-"))
    try:
        _, fake_url = start_fake(workdir, procs)
        _, url, _ = start_daemon(workdir, fake_url, procs)
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Session-Id": "bench-keys"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            def timed(body: dict[str, object], n: int, want: int) -> list[float]:
                times = []
                for _ in range(n):
                    start = time.perf_counter()
                    got = client.post("/chat/completions", json=body).status_code
                    times.append((time.perf_counter() - start) * 1000)
                    assert got == want, got
                return times
            body = {"model": "gpt-test", "messages": MESSAGES}
            timed(body, 50, 200)
            plain = timed(body, calls, 200)
            timed({**body, "fake": GENUINE}, 1, 429)  # both keys tried, both benched
            timed(body, 50, 429)
            refused = timed(body, calls, 429)
        p_plain, p_refused = statistics.median(plain), statistics.median(refused)
        print(f"through the daemon, client p50 over {calls} calls:")
        print(f"  plain proxied call                       {p_plain:8.3f} ms")
        print(f"  refused, every key benched (not sent)    {p_refused:8.3f} ms"
              f"  = {p_refused / p_plain:.2f}x the plain call")
    finally:
        for proc in reversed(procs):
            proc.stop()


def failover(calls: int) -> None:
    from tests.support.fake_provider import FakeProviderServer

    procs: list[Proc] = []
    workdir = Path(tempfile.mkdtemp(prefix="sw-failover-"))
    with FakeProviderServer() as fake:
        try:
            _, url, _ = start_daemon(workdir, fake.base_url, procs)
            body = {"model": "gpt-test", "messages": MESSAGES}
            headers = {"Authorization": f"Bearer {TOKEN}", "X-Session-Id": "bench-failover"}

            def timed(client: httpx.Client, path: str, n: int) -> list[float]:
                times = []
                for _ in range(n):
                    start = time.perf_counter()
                    assert client.post(path, json=body).status_code == 200
                    times.append((time.perf_counter() - start) * 1000)
                return times

            with httpx.Client(base_url=fake.base_url, timeout=30) as direct, \
                    httpx.Client(base_url=url, headers=headers, timeout=30) as client:
                timed(client, "/chat/completions", 50)
                upstream = timed(direct, "/chat/completions", calls)
                plain = timed(client, "/chat/completions", calls)
                before = len(fake.state.snapshot())
                fake.state.by_key["sk-bench-a-1111"] = {
                    "status": 403, "error_code": "permission_denied",
                    "error_message": "This key is not allowed to use this model"}
                mixed = timed(client, "/chat/completions", calls)
        finally:
            for proc in reversed(procs):
                proc.stop()
    failed_over = sum(1 for r in fake.state.snapshot()[before:] if r.headers.get(
        "authorization") == "Bearer sk-bench-a-1111")
    share = max(failed_over, 1) / calls  # the calls that failed over (each tried A once)
    cost = (statistics.mean(mixed) - statistics.mean(plain)) / share
    print(f"failover, means over {calls} calls ({share:.0%} of the second set fail over):")
    print(f"  the upstream called directly (one round trip)  {statistics.mean(upstream):8.3f} ms")
    print(f"  plain proxied call                             {statistics.mean(plain):8.3f} ms")
    print(f"  calls failing over from A to B                 {statistics.mean(mixed):8.3f} ms"
          f"  ({failed_over} attempts on A)")
    print(f"  one failover's cost (difference / share)       {cost:8.3f} ms"
          f"  = {cost / statistics.mean(upstream):.2f}x the upstream round trip")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per kind (part 2)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (part 1)")
    parser.add_argument("--in-process", action="store_true",
                        help="part 1 only (no daemon, no fake upstream)")
    args = parser.parse_args()
    in_process(args.rounds)
    if args.in_process:
        return
    through_daemon(args.calls)
    failover(args.calls)


if __name__ == "__main__":
    main()
