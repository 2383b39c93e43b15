"""The floor of a proxied call's CPU on this stack, next to sessionwarden and LiteLLM.

Run ``.venv/bin/python bench/floor.py [--requests N] [--rounds R] [--no-litellm]``. In one
run, against one fake upstream, plain calls at concurrency 1 go to:

* ``direct``: the fake upstream itself (its CPU column is the upstream's own work), the
  baseline of the added p50;
* ``floor``: ``bench/floor_relay.py``, a raw ASGI relay on the daemon's stack (uvicorn with
  uvloop and httptools, one aiohttp session): token check, body read, POST upstream,
  response relayed. No log, no actors, no policy: what any implementation on this stack
  pays per call;
* ``floor+log``: the same relay appending two events per call to an ``EventLog``, one
  before sending and one after the response, each awaited until durable: the floor of a
  relay that records a call before it is sent and after it ends;
* ``sessionwarden``: the daemon, set up as in ``bench/proxy.py``;
* ``baseline`` (with ``--compare-with CHECKOUT``): that checkout's daemon, set up the same;
* ``litellm``: LiteLLM's proxy, as in ``bench/proxy.py`` (skipped with ``--no-litellm``).

``--scrape S`` scrapes sessionwarden's ``/metrics`` every S seconds during the run;
``--ui`` keeps its live page open in headless Chromium (signed in, its event stream live);
``--otel`` exports its spans to an OTLP sink on 127.0.0.1.

Each round runs every target in turn (the order rotates), 50 warm-up calls then N timed
ones. Printed per target: the process's CPU per call (user + system, its whole process
tree) and the client's p50, medians over rounds; each relay's added p50 (median of per-round
differences from direct); then sessionwarden's CPU as a multiple of each floor and
LiteLLM's as a multiple of sessionwarden's, medians of per-round ratios.
Numbers only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy import (
    LITELLM_MODEL,
    MASTER_KEY,
    SW_MODEL,
    TOKEN,
    Proc,
    Target,
    base_env,
    ensure_litellm,
    loadavg,
    log,
    run_cell,
    start_daemon,
    start_fake,
    start_litellm,
    wait_http,
)

RELAY = Path(__file__).resolve().parent / "floor_relay.py"


def start_floor(workdir: Path, fake_url: str, procs: list[Proc], name: str,
                logged: bool) -> tuple[Proc, str]:
    cmd = [sys.executable, str(RELAY), fake_url]
    if logged:
        (workdir / name).mkdir()
        cmd += ["--log", str(workdir / name / "events.db")]
    proc = Proc(name, cmd, base_env(), workdir)
    procs.append(proc)
    m = proc.wait_for(r"floor listening on (http://127\.0\.0\.1:\d+/v1)", "err", 30)
    wait_http(m.group(1).removesuffix("/v1") + "/healthz", 30, proc)
    return proc, m.group(1)


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that takes every export and keeps nothing."""

    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        _Sink.received += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def start_otlp_sink() -> http.server.ThreadingHTTPServer:
    """A receiver on 127.0.0.1 for the daemon's spans (``--otel``), in a thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


#: Scrapes made by :func:`scrape_every`: how many, and their median time.
SCRAPES: dict[str, float] = {"count": 0, "median_ms": 0.0}


async def scrape_every(url: str, period_s: float) -> None:
    """GET ``url`` every ``period_s`` seconds (a Prometheus scraper) until cancelled."""
    times: list[float] = []
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        while True:
            await asyncio.sleep(period_s)
            began = time.perf_counter()
            response = await client.get(url)
            response.raise_for_status()
            times.append((time.perf_counter() - began) * 1000)
            SCRAPES.update(count=len(times), median_ms=round(statistics.median(times), 2))


async def open_page(base_url: str) -> tuple[object, object]:
    """Sign in as ``sessionwarden ui`` does and open the live page in headless Chromium.

    The page stays open (its event stream live) until the browser is closed. Chromium is
    the system's (``chromium`` on PATH), driven by Playwright (the test extra).
    """
    import shutil

    from playwright.async_api import async_playwright

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        code = (await client.post(base_url + "/v1/ui/codes")).json()["path"]
    pw = await async_playwright().start()
    browser = await pw.chromium.launch(executable_path=shutil.which("chromium"),
                                       args=["--no-sandbox"])
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(base_url + code)
    await page.wait_for_selector("#link.on")
    return pw, page


async def bench(args: argparse.Namespace, procs: list[Proc], workdir: Path) -> None:
    fake, fake_url = start_fake(workdir, procs)
    floor, floor_url = start_floor(workdir, fake_url, procs, "floor", logged=False)
    floor_log, floor_log_url = start_floor(workdir, fake_url, procs, "floor-log", logged=True)
    sink = start_otlp_sink() if args.otel else None
    extra = (f'[otel]\nendpoint = "http://127.0.0.1:{sink.server_address[1]}"\n'
             if sink is not None else "")
    sw, sw_url, _ = start_daemon(workdir, fake_url, procs, extra=extra)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    targets = [
        Target("direct", fake_url + "/chat/completions", auth, SW_MODEL, fake),
        Target("floor", floor_url + "/chat/completions", auth, SW_MODEL, floor),
        Target("floor+log", floor_log_url + "/chat/completions", auth, SW_MODEL, floor_log),
        Target("sessionwarden", sw_url + "/chat/completions",
               auth | {"X-Session-Id": "bench-floor"}, SW_MODEL, sw),
    ]
    if args.compare_with is not None:
        other = args.compare_with.resolve() / ".venv" / "bin" / "sessionwarden"
        if not other.exists():
            raise SystemExit(f"{other} does not exist: --compare-with names a checkout "
                             "with its own .venv")
        base, base_url, _ = start_daemon(workdir, fake_url, procs, exe=other, name="baseline")
        targets.append(Target("baseline", base_url + "/chat/completions",
                              auth | {"X-Session-Id": "bench-floor"}, SW_MODEL, base))
    exe = None if args.no_litellm else ensure_litellm()
    if exe is not None:
        lt, lt_url, _ = start_litellm(exe, workdir, fake_url, procs)
        targets.append(Target("litellm", lt_url + "/chat/completions",
                              {"Authorization": f"Bearer {MASTER_KEY}"}, LITELLM_MODEL, lt))
    time.sleep(1.0)
    log(f"{args.requests} plain calls at c=1 per target and round, {args.rounds} rounds; "
        f"{loadavg()}")
    cpu: dict[str, list[float]] = {t.mode: [] for t in targets}
    p50: dict[str, list[float]] = {t.mode: [] for t in targets}
    scraper = (asyncio.create_task(scrape_every(sw_url.removesuffix("/v1") + "/metrics",
                                                args.scrape))
               if args.scrape else None)
    viewer = await open_page(sw_url.removesuffix("/v1")) if args.ui else None
    for r in range(args.rounds):
        order = targets[r % len(targets):] + targets[: r % len(targets)]
        for t in order:
            cell = await run_cell(t, 1, False, args.requests)
            if cell.errors:
                raise RuntimeError(f"{t.mode}: {dict(cell.statuses)}")
            cpu[t.mode].append(cell.cpu_s / cell.n * 1e3)
            p50[t.mode].append(cell.pct(0.5))
            log(f"  round {r + 1} {t.mode:13s} CPU {cpu[t.mode][-1]:.3f} ms/call  "
                f"p50 {p50[t.mode][-1]:.3f} ms")
        log(f"  after round {r + 1}: {loadavg()}")
    for t in targets:
        await t.client.aclose()
    if scraper is not None:
        scraper.cancel()
        await asyncio.gather(scraper, return_exceptions=True)
        log(f"scrapes of sessionwarden's /metrics during the run: {SCRAPES}")
    if viewer is not None:
        pw, page = viewer
        shown = await page.inner_text("#sessions")  # type: ignore[attr-defined]
        log(f"the live page was open all along; it shows: {' '.join(shown.split())[:120]}")
        await pw.stop()  # type: ignore[attr-defined]
    if sink is not None:
        log(f"OTLP exports the sink received: {_Sink.received}")
        sink.shutdown()

    log("\ntarget          CPU ms/call (median)   p50 ms (median)")
    for t in targets:
        log(f"{t.mode:15s} {statistics.median(cpu[t.mode]):10.3f}"
            f"             {statistics.median(p50[t.mode]):8.3f}")

    def ratio(a: str, b: str) -> float:
        # CPU times tick in 10 ms: a short round can read 0 (the smoke test's 20 calls).
        pairs = [x / y for x, y in zip(cpu[a], cpu[b], strict=True) if y > 0]
        return statistics.median(pairs) if pairs else float("nan")

    def added(a: str) -> float:
        return statistics.median(x - y for x, y in zip(p50[a], p50["direct"], strict=True))

    log("\nadded p50 over direct (median of per-round differences):")
    for t in targets[1:]:
        log(f"  {t.mode:15s} +{added(t.mode):.3f} ms")
    log(f"\nsessionwarden / floor      CPU {ratio('sessionwarden', 'floor'):.2f}x")
    log(f"sessionwarden / floor+log  CPU {ratio('sessionwarden', 'floor+log'):.2f}x")
    log(f"floor+log / floor          CPU {ratio('floor+log', 'floor'):.2f}x")
    if "baseline" in cpu:
        log(f"sessionwarden / baseline   CPU {ratio('sessionwarden', 'baseline'):.2f}x")
    if "litellm" in cpu:
        log(f"litellm / sessionwarden    CPU {ratio('litellm', 'sessionwarden'):.2f}x")
        log(f"litellm / floor            CPU {ratio('litellm', 'floor'):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="timed calls per cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM")
    parser.add_argument("--otel", action="store_true",
                        help="export sessionwarden's spans to an OTLP sink on 127.0.0.1")
    parser.add_argument("--scrape", type=float, default=0.0, metavar="SECONDS",
                        help="scrape sessionwarden's /metrics this often during the run")
    parser.add_argument("--ui", action="store_true",
                        help="keep sessionwarden's live page open in headless Chromium "
                             "during the run (its event stream live)")
    parser.add_argument("--compare-with", type=Path, metavar="CHECKOUT",
                        help="also run the daemon of another checkout (its .venv), as "
                             "'baseline': an A/B of two versions in one run")
    args = parser.parse_args()
    procs: list[Proc] = []
    workdir = Path(tempfile.mkdtemp(prefix="sw-floor-"))
    try:
        asyncio.run(bench(args, procs, workdir))
    finally:
        for proc in reversed(procs):
            proc.stop()


if __name__ == "__main__":
    main()
