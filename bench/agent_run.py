"""A fast agent reading large files through the daemon: compressions, window, prompt cache.

Run ``.venv/bin/python bench/agent_run.py [--calls N] [--window TOKENS]`` (issue 20, §2).

A scripted agent (this process, a plain HTTP client) plays ``--calls`` calls of one
session through a real ``sessionwarden daemon`` subprocess: each call adds an assistant
turn calling ``read_file`` and its result, a real 40-120 KB source file of the installed
packages, and sends the whole history, as a stateless client does. The model is
``gpt-test`` with a 128K window and the default threshold (0.5: a 64K trigger). The
upstream is the fake provider (``tests/support/fake_provider.py``) in this process, so
every forwarded body is read back byte for byte; like a real provider it answers a
prompt over the window with a context-length 400.

Printed, for the daemon and for the baseline in the same run — the same history sent as
is, which is what the agent would send without the daemon:

* compressions per 100 calls (``context.compressed`` events), and how many calls the
  upstream refused as too long;
* the largest forwarded prompt, in tokens (4 characters a token, as the fake counts)
  against the window;
* prompt-cache stability: for each forwarded prompt, the share of it that is an exact
  byte prefix of the one before (what a provider's prefix cache can reuse); the median,
  and how many calls kept less than half (each compression restarts the cache once).

Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from callsize import used_bytes
from proxy import SW_MODEL, TOKEN, Proc, loadavg, log, start_daemon

from tests.support.fake_provider import FakeProviderServer

WINDOW = 128_000


def source_files() -> list[Path]:
    """Real source files of 40-120 KB from the installed packages, in a fixed order."""
    root = Path(openai.__file__).resolve().parent.parent
    return [p for package in ("openai", "pydantic", "aiohttp", "hypothesis", "mypy", "rich")
            for p in sorted((root / package).rglob("*.py"))
            if 40_000 <= p.stat().st_size <= 120_000]


def turn(n: int, path: Path) -> list[dict[str, Any]]:
    call = f"call_{n:04d}"
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call, "type": "function",
         "function": {"name": "read_file", "arguments": json.dumps({"path": str(path)})}}]},
        {"role": "tool", "tool_call_id": call,
         "content": path.read_text(encoding="utf-8", errors="replace")}]


TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]


def prompt_tokens(body: dict[str, Any]) -> int:
    return sum(len(m.get("content") or "") for m in body["messages"]) // 4


def prefix_share(previous: bytes, current: bytes) -> float:
    """The share of ``current``'s conversation that is an exact prefix of ``previous``'s."""
    a, b = previous.split(b'],"', 1)[0], current.split(b'],"', 1)[0]  # the messages
    if not b:
        return 0.0
    same = 0
    step = 1 << 16
    while same < min(len(a), len(b)) and a[same:same + step] == b[same:same + step]:
        same += step
    same = min(same, len(a), len(b))
    while same and a[:same] != b[:same]:
        same -= 1
    return same / len(b)


def figures(name: str, bodies: list[bytes], compressions: int, refused: int,
            calls: int) -> None:
    decoded = [json.loads(b) for b in bodies]
    largest = max(prompt_tokens(b) for b in decoded)
    shares = [prefix_share(a, b) for a, b in itertools.pairwise(bodies)]
    low = sum(s < 0.5 for s in shares)
    log(f"{name:<14} {compressions * 100 / calls:>9.1f} {refused:>8} "
        f"{largest:>10,} {largest / WINDOW:>8.2f} {statistics.median(shares):>8.3f} "
        f"{low:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    files = source_files()
    log(f"agent_run: {args.calls} calls, each reading one of {len(files)} real 40-120 KB "
        f"files; window {WINDOW:,} tokens, threshold 0.5; {loadavg()}")
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="sw-agent-run-") as tmp, \
            FakeProviderServer() as fake:
        fake.state.by_model[SW_MODEL] = {"max_prompt_chars": WINDOW * 4}
        _, url, db = start_daemon(Path(tmp), fake.base_url, procs)
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent. Read what you need."},
            {"role": "user", "content": "Read the sources one by one and explain them."}]
        baseline: list[bytes] = []
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Session-Id": "reader"}
        started = time.perf_counter()
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
                for n in range(args.calls):
                    history += turn(n, files[n % len(files)])
                    body = {"messages": history, "model": SW_MODEL, "tools": TOOLS}
                    baseline.append(json.dumps(body, separators=(",", ":")).encode())
                    answer = client.post("/chat/completions", json=body)
                    if answer.status_code != 200:
                        log(f"  call {n}: {answer.status_code} {answer.text[:200]}")
        finally:
            elapsed = time.perf_counter() - started
            for proc in procs:
                proc.stop()
        sent = [r for r in fake.state.snapshot() if r.path.endswith("/chat/completions")]
        forwarded = [r.raw for r in sent if r.body and "messages" in r.body]
        _, by_type, _ = used_bytes(db)
    compressions = by_type.get("context.compressed.v2", 0)
    too_long = fake.state.counters["too_long"]
    refused_base = sum(prompt_tokens(json.loads(b)) > WINDOW for b in baseline)
    log(f"\n{'':<14} {'compr/100':>9} {'too long':>8} {'largest':>10} {'/window':>8} "
        f"{'prefix':>8} {'<50 %':>7}")
    figures("sessionwarden", forwarded, compressions, too_long, args.calls)
    figures("as sent", baseline, 0, refused_base, args.calls)
    log(f"\n{len(forwarded)} forwarded requests for {args.calls} calls in {elapsed:.1f} s "
        f"(resent after a 'too long': {len(forwarded) - args.calls}); 'as sent' is the "
        "history the agent sent, without the daemon (its 'too long' column: prompts over "
        "the window)")


if __name__ == "__main__":
    main()
