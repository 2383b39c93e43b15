"""Proxy overhead benchmark: sessionwarden against a direct upstream and LiteLLM's proxy.

Run ``.venv/bin/python bench/proxy.py [--quick] [--no-litellm]``. Three subprocesses share
this 2-core machine with the client (this process):

* the fake upstream ``tests/support/fake_provider.py`` (uvicorn, uvloop + httptools);
* ``sessionwarden daemon`` on a fresh temporary database, one provider ``fake`` with two
  keys (round robin) and one model ``gpt-test``;
* LiteLLM's proxy (``litellm --config … --num_workers 1``), one model ``fake-gpt`` →
  ``openai/fake-gpt`` at the fake upstream, with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` and
  ``LITELLM_MASTER_KEY`` (the setup of perf-baselines.md §7). LiteLLM lives in its own venv,
  ``bench/.litellm-venv`` (gitignored), created with ``pip install 'litellm[proxy]'`` on first
  use; if that fails the run goes on without it.

The client is one ``httpx.AsyncClient`` per target (keep-alive). Cells are concurrency 1 and 16
× plain and streaming (``"stream": true``, the whole SSE body read). Each round runs every cell
for every mode in turn (direct, sessionwarden, litellm; the order rotates per round), 50 warm-up
requests then N timed requests per cell. Per-round figures: added latency (proxy p50 − direct
p50, p99 likewise) and throughput ratios; the medians over rounds are reported.

Then the daemon's memory and threads: RSS and thread count idle after start, after the runs
and after 1,000 calls with distinct ``X-Session-Id``s, plus the peak thread count sampled
during the runs; LiteLLM's RSS for comparison. Finally the daemon's stderr is scanned for
warnings/errors and its ledger is counted against the calls sent.

Numbers only; nothing here asserts on time. Every process started here is stopped at the end,
also on error or Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import apsw
import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
LITELLM_VENV = BENCH / ".litellm-venv"
LITELLM_MARKER = LITELLM_VENV / ".installed"
FAKE_SCRIPT = ROOT / "tests" / "support" / "fake_provider.py"
SW_BIN = Path(sys.executable).with_name("sessionwarden")

TOKEN = "tok"
MASTER_KEY = "sk-bench-master"
SW_MODEL = "gpt-test"
LITELLM_MODEL = "fake-gpt"
WARMUP = 50
SESSIONS = 1000
MODES = ("direct", "sessionwarden", "litellm")
CELLS = ((1, False), (1, True), (16, False), (16, True))  # (concurrency, stream)
MESSAGES = [{"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": "Say hello to the benchmark."}]


def log(msg: str = "") -> None:
    print(msg, flush=True)


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (nproc {os.cpu_count()})"


# -- processes ----------------------------------------------------------------------------


class Proc:
    """A subprocess in its own process group, output to files, stopped with its children."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], workdir: Path,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, cwd=cwd or workdir,
                                          start_new_session=True)
        self.ps = psutil.Process(self.popen.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self, which: str = "err") -> str:
        path = self.err_path if which == "err" else self.out_path
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for(self, pattern: str, which: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            m = rx.search(self.text(which))
            if m:
                return m
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.popen.returncode} at start:\n"
                                   f"{self.text('err')[-3000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not print {pattern!r} within {timeout} s:\n"
                           f"{self.text('err')[-3000:]}")

    def tree(self) -> list[psutil.Process]:
        try:
            return [self.ps, *self.ps.children(recursive=True)]
        except psutil.Error:
            return []

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.tree():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def rss_mb(self) -> list[tuple[int, float, int]]:
        """(pid, RSS MB, threads) for the process and each descendant."""
        rows = []
        for p in self.tree():
            with contextlib.suppress(psutil.Error):
                rows.append((p.pid, p.memory_info().rss / 2**20, p.num_threads()))
        return rows

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the group, wait; SIGKILL the group if it lingers. Returns the exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"  {self.name} ignored SIGTERM for {timeout} s; killing")
        # children may outlive the leader: kill whatever is left of the group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        return self.popen.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float, proc: Proc, headers: dict[str, str] | None = None
              ) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited {proc.popen.returncode}:\n"
                               f"{proc.text('err')[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0, headers=headers).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name} never answered {url}:\n{proc.text('err')[-3000:]}")


def base_env() -> dict[str, str]:
    drop = ("SESSIONWARDEN_", "OPENAI_", "ANTHROPIC_", "OPENROUTER_", "FAKE_KEY", "LITELLM_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def start_fake(workdir: Path, procs: list[Proc]) -> tuple[Proc, str]:
    proc = Proc("fake", [sys.executable, str(FAKE_SCRIPT), "--port", "0"], base_env(),
                workdir, cwd=ROOT)
    procs.append(proc)
    m = proc.wait_for(r"listening (http://127\.0\.0\.1:\d+/v1)", "out", 30)
    return proc, m.group(1)


def start_daemon(workdir: Path, fake_url: str, procs: list[Proc], exe: Path = SW_BIN,
                 name: str = "sessionwarden", reuse: bool = False) -> tuple[Proc, str, Path]:
    """The daemon (``exe``: another checkout's, to compare two versions) on a fresh db.

    ``reuse``: on the db an earlier start on ``workdir`` made (a restart).
    """
    home = workdir if name == "sessionwarden" else workdir / name
    home.mkdir(exist_ok=True)
    config = home / "sessionwarden.toml"
    config.write_text(
        "[[providers]]\n"
        'name = "fake"\n'
        f'base_url = "{fake_url}"\n'
        'keys = ["env:BENCH_FAKE_KEY_A", "env:BENCH_FAKE_KEY_B"]\n'
        'strategy = "round_robin"\n'
        "[[models]]\n"
        f'name = "{SW_MODEL}"\n'
        'provider = "fake"\n'
        "context_length = 128000\n"
    )
    db = home / "db" / "events.db"
    db.parent.mkdir(exist_ok=reuse)
    env = base_env() | {"SESSIONWARDEN_TOKEN": TOKEN, "BENCH_FAKE_KEY_A": "sk-bench-a-1111",
                        "BENCH_FAKE_KEY_B": "sk-bench-b-2222"}
    cmd = [str(exe) if exe.exists() else sys.executable]
    if not exe.exists():
        cmd += ["-m", "sessionwarden.cmd.cli.main"]
    cmd += ["daemon", "--config", str(config), "--db", str(db), "--port", "0"]
    proc = Proc(name, cmd, env, workdir)
    procs.append(proc)
    m = proc.wait_for(r"sessionwarden listening on (http://127\.0\.0\.1:\d+/v1)", "err", 60)
    url = m.group(1)
    wait_http(url.removesuffix("/v1") + "/healthz", 30, proc)
    return proc, url, db


def ensure_litellm() -> Path | None:
    """The litellm executable in bench/.litellm-venv, installing it if missing; None on failure."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if LITELLM_MARKER.exists() and exe.exists():
        return exe
    log(f"installing litellm[proxy] into {LITELLM_VENV.relative_to(ROOT)} (about a minute) …")
    t0 = time.monotonic()
    try:
        if not (LITELLM_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True,
                           timeout=300)
        pip = subprocess.run([str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install",
                              "-q", "--disable-pip-version-check", "litellm[proxy]"],
                             capture_output=True, text=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"NOTE: litellm install failed ({exc}); continuing without LiteLLM")
        return None
    if pip.returncode != 0:
        tail = "\n".join((pip.stdout + pip.stderr).splitlines()[-15:])
        log(f"NOTE: pip install 'litellm[proxy]' exited {pip.returncode}; continuing without "
            f"LiteLLM. Last lines:\n{tail}")
        return None
    if not exe.exists():
        log("NOTE: litellm installed but no `litellm` executable; continuing without LiteLLM")
        return None
    LITELLM_MARKER.write_text("litellm[proxy]\n")
    log(f"  installed in {time.monotonic() - t0:.0f} s")
    return exe


def litellm_version() -> str:
    py = LITELLM_VENV / "bin" / "python"
    try:
        out = subprocess.run(
            [str(py), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "?"
    except (subprocess.SubprocessError, OSError):
        return "?"


def start_litellm(exe: Path, workdir: Path, fake_url: str, procs: list[Proc]
                  ) -> tuple[Proc, str, float]:
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {LITELLM_MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{LITELLM_MODEL}\n"
        f"      api_base: {fake_url}\n"
        "      api_key: sk-fake-upstream\n"
    )
    port = free_port()
    env = base_env() | {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": MASTER_KEY}
    t0 = time.monotonic()
    proc = Proc("litellm", [str(exe), "--config", str(config), "--host", "127.0.0.1",
                            "--port", str(port), "--num_workers", "1"], env, workdir)
    procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health/liveliness", 180, proc)
    return proc, url + "/v1", time.monotonic() - t0


# -- client -------------------------------------------------------------------------------


@dataclass
class Target:
    mode: str
    url: str  # .../v1/chat/completions
    headers: dict[str, str]
    model: str
    proc: Proc | None
    client: httpx.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0),
                                        headers=self.headers)

    def body(self, stream: bool) -> bytes:
        return json.dumps({"model": self.model, "messages": MESSAGES, "stream": stream,
                           "max_tokens": 32}).encode()


@dataclass
class Cell:
    mode: str
    conc: int
    stream: bool
    n: int
    wall: float
    lat: list[float]  # seconds, sorted
    statuses: Counter[str]
    cpu_s: float  # CPU seconds the proxy's process tree used during the timed part

    @property
    def rps(self) -> float:
        return len(self.lat) / self.wall if self.wall else 0.0

    def pct(self, q: float) -> float:
        if not self.lat:
            return math.nan
        return self.lat[min(len(self.lat) - 1, max(0, math.ceil(q * len(self.lat)) - 1))] * 1e3

    @property
    def errors(self) -> int:
        return sum(v for k, v in self.statuses.items() if k != "200")


async def one_call(t: Target, body: bytes, stream: bool,
                   headers: dict[str, str] | None = None) -> str:
    """One request; returns "200" when the body is complete, else a status or error name."""
    try:
        if not stream:
            r = await t.client.post(t.url, content=body, headers=headers)
            if r.status_code != 200:
                return str(r.status_code)
            return "200" if b'"choices"' in r.content else "200-bad-body"
        async with t.client.stream("POST", t.url, content=body, headers=headers) as r:
            buf = bytearray()
            async for chunk in r.aiter_raw():
                buf += chunk
            if r.status_code != 200:
                return str(r.status_code)
            return "200" if b"[DONE]" in buf else "200-no-done"
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def run_batch(t: Target, conc: int, stream: bool, n: int,
                    per_call_headers: list[dict[str, str]] | None = None
                    ) -> tuple[float, list[float], Counter[str]]:
    body = t.body(stream)
    lat: list[float] = []
    statuses: Counter[str] = Counter()
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            hdr = per_call_headers[i] if per_call_headers else None
            t0 = time.perf_counter()
            status = await one_call(t, body, stream, hdr)
            lat.append(time.perf_counter() - t0)
            statuses[status] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return time.perf_counter() - t0, sorted(lat), statuses


async def run_cell(t: Target, conc: int, stream: bool, n: int) -> Cell:
    _, _, warm = await run_batch(t, conc, stream, WARMUP)
    cpu0 = t.proc.cpu_seconds() if t.proc else 0.0
    wall, lat, statuses = await run_batch(t, conc, stream, n)
    cpu = (t.proc.cpu_seconds() - cpu0) if t.proc else 0.0
    statuses.update({f"warmup-{k}": v for k, v in warm.items() if k != "200"})
    return Cell(t.mode, conc, stream, n, wall, lat, statuses, cpu)


# -- sampling -----------------------------------------------------------------------------


class Sampler:
    """Samples a process's threads and RSS once a second in a background thread."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.max_threads = 0
        self.max_rss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(psutil.Error):
                self.max_threads = max(self.max_threads, self.proc.ps.num_threads())
                self.max_rss = max(self.max_rss, self.proc.ps.memory_info().rss / 2**20)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def mem_point(proc: Proc) -> tuple[float, int]:
    p = proc.ps
    return p.memory_info().rss / 2**20, p.num_threads()


# -- report -------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def cell_name(conc: int, stream: bool) -> str:
    return f"c={conc:<2} {'stream' if stream else 'plain '}"


def fmt(x: float, spec: str = ".2f") -> str:
    return "–" if math.isnan(x) else format(x, spec)


def report(results: dict[tuple[int, int, bool, str], Cell], rounds: int, modes: list[str]
           ) -> dict[str, Any]:
    """Print the per-cell medians and per-round comparisons; return the key figures."""
    key: dict[str, Any] = {}
    log("\n== per cell, medians over rounds ==")
    log(f"{'cell':<10} {'mode':<14} {'req/s':>8} {'(min – max)':>17} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'proxy CPU ms/req':>17} {'non-200':>8}")
    for conc, stream in CELLS:
        for mode in modes:
            cs = [results[(r, conc, stream, mode)] for r in range(rounds)
                  if (r, conc, stream, mode) in results]
            if not cs:
                continue
            rps = [c.rps for c in cs]
            cpu = med([c.cpu_s * 1e3 / c.n for c in cs]) if mode != "direct" else math.nan
            errors = sum(c.errors for c in cs)
            log(f"{cell_name(conc, stream):<10} {mode:<14} {med(rps):>8.1f} "
                f"{f'({min(rps):.1f} – {max(rps):.1f})':>17} {med([c.pct(.5) for c in cs]):>8.2f} "
                f"{med([c.pct(.99) for c in cs]):>8.2f} {fmt(cpu):>17} {errors:>8}")
            key[f"{mode} {cell_name(conc, stream).strip()}"] = {
                "rps": med(rps), "p50": med([c.pct(.5) for c in cs]),
                "p99": med([c.pct(.99) for c in cs]), "cpu_ms": cpu, "errors": errors}
    log("\n== per-round comparisons (medians of per-round values) ==")
    log(f"{'cell':<10} {'proxy':<14} {'+p50 ms':>8} {'+p99 ms':>8} {'× direct req/s':>15} "
        f"{'sw / litellm req/s':>19}")
    for conc, stream in CELLS:
        for mode in [m for m in modes if m != "direct"]:
            add50, add99, vs_direct, vs_litellm = [], [], [], []
            for r in range(rounds):
                d = results.get((r, conc, stream, "direct"))
                p = results.get((r, conc, stream, mode))
                if not d or not p:
                    continue
                add50.append(p.pct(.5) - d.pct(.5))
                add99.append(p.pct(.99) - d.pct(.99))
                vs_direct.append(p.rps / d.rps)
                lt = results.get((r, conc, stream, "litellm"))
                if mode == "sessionwarden" and lt and lt.rps:
                    vs_litellm.append(p.rps / lt.rps)
            ratio = med(vs_litellm) if vs_litellm else math.nan
            log(f"{cell_name(conc, stream):<10} {mode:<14} {fmt(med(add50)):>8} "
                f"{fmt(med(add99)):>8} {fmt(med(vs_direct), '.3f'):>15} "
                f"{fmt(ratio) if mode == 'sessionwarden' else '':>19}")
            name = f"{mode} {cell_name(conc, stream).strip()}"
            key.setdefault(name, {}).update(add_p50=med(add50), add_p99=med(add99),
                                            vs_direct=med(vs_direct))
            if mode == "sessionwarden":
                key[name]["vs_litellm"] = ratio
                key[name]["vs_litellm_rounds"] = vs_litellm
    return key


# -- main ---------------------------------------------------------------------------------


def on_signal(signum: int, frame: FrameType | None) -> None:
    # Raised wherever the main thread is, also inside blocking start-up waits; asyncio.run
    # keeps a handler installed before it (its own one would only cancel the main task).
    raise KeyboardInterrupt


async def bench(args: argparse.Namespace, procs: list[Proc], workdir: Path) -> None:
    n = args.requests or (200 if args.quick else 2000)
    rounds = args.rounds or 3
    log(f"sessionwarden proxy benchmark: {n} requests per cell after {WARMUP} warm-up, "
        f"{rounds} rounds, cells {', '.join(cell_name(*c).strip() for c in CELLS)}")
    log(f"start: {loadavg()}")
    t_start = time.monotonic()

    exe = None if args.no_litellm else ensure_litellm()
    if args.no_litellm:
        log("LiteLLM skipped (--no-litellm)")

    fake, fake_url = start_fake(workdir, procs)
    log(f"fake upstream  pid {fake.pid} at {fake_url}")
    sw, sw_url, db = start_daemon(workdir, fake_url, procs)
    log(f"sessionwarden  pid {sw.pid} at {sw_url} (db {db})")
    time.sleep(1.0)
    idle = mem_point(sw)
    log(f"  daemon idle after start: RSS {idle[0]:.1f} MB, {idle[1]} threads")

    lt = None
    lt_url = ""
    lt_idle: list[tuple[int, float, int]] = []
    if exe is not None:
        n_procs = len(procs)
        try:
            lt, lt_url, lt_start = start_litellm(exe, workdir, fake_url, procs)
        except RuntimeError as exc:
            log(f"NOTE: LiteLLM failed to start; continuing without it:\n{exc}")
            for proc in procs[n_procs:]:
                proc.stop()
            del procs[n_procs:]
            lt = None
        else:
            time.sleep(1.0)
            lt_idle = lt.rss_mb()
            log(f"litellm {litellm_version()} pid {lt.pid} at {lt_url}, ready in {lt_start:.1f} s;"
                f" idle RSS " + ", ".join(f"pid {p} {r:.0f} MB/{th} thr" for p, r, th in lt_idle))

    targets = {
        "direct": Target("direct", fake_url + "/chat/completions",
                         {"Authorization": "Bearer sk-direct"}, SW_MODEL, None),
        "sessionwarden": Target("sessionwarden", sw_url + "/chat/completions",
                                {"Authorization": f"Bearer {TOKEN}",
                                 "X-Session-Id": "bench-main"}, SW_MODEL, sw),
    }
    if lt is not None:
        targets["litellm"] = Target("litellm", lt_url + "/chat/completions",
                                    {"Authorization": f"Bearer {MASTER_KEY}"}, LITELLM_MODEL, lt)
    modes = [m for m in MODES if m in targets]

    # smoke check: one plain and one streaming call per target
    for t in targets.values():
        for stream in (False, True):
            status = await one_call(t, t.body(stream), stream)
            if status != "200":
                raise RuntimeError(f"smoke call to {t.mode} (stream={stream}) gave {status}")
    sw_calls = 2

    results: dict[tuple[int, int, bool, str], Cell] = {}
    try:
        with Sampler(sw) as sampler:
            for r in range(rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                log(f"\n-- round {r + 1}/{rounds} (order {' '.join(order)}); {loadavg()}")
                for conc, stream in CELLS:
                    for mode in order:
                        c = await run_cell(targets[mode], conc, stream, n)
                        results[(r, conc, stream, mode)] = c
                        if mode == "sessionwarden":
                            sw_calls += WARMUP + n
                        bad = {k: v for k, v in c.statuses.items() if k != "200"}
                        cpu = f"{c.cpu_s * 1e3 / n:6.2f}" if mode != "direct" else "     –"
                        log(f"  {cell_name(conc, stream)} {mode:<14} {c.rps:8.1f} req/s  "
                            f"p50 {c.pct(.5):7.2f} ms  p99 {c.pct(.99):7.2f} ms  "
                            f"proxy CPU {cpu} ms/req" + (f"  NON-200: {bad}" if bad else ""))
            log(f"\nruns done in {time.monotonic() - t_start:.0f} s since start; {loadavg()}")
            after_runs = mem_point(sw)
            lt_after = lt.rss_mb() if lt else []

            # 1,000 distinct sessions, plain calls at concurrency 16
            sess_hdrs = [{"X-Session-Id": f"bench-s-{i:05d}"} for i in range(SESSIONS)]
            wall, lat, statuses = await run_batch(targets["sessionwarden"], 16, False,
                                                  SESSIONS, sess_hdrs)
            sw_calls += SESSIONS
            after_sessions = mem_point(sw)
            await asyncio.sleep(5.0)
            settled = mem_point(sw)
            peak_threads, peak_rss = sampler.max_threads, sampler.max_rss
    finally:
        for t in targets.values():
            await t.client.aclose()

    key = report(results, rounds, modes)
    sess_ok = statuses.get("200", 0)
    log(f"\n== {SESSIONS} distinct sessions (plain, c=16) ==\n"
        f"  {SESSIONS / wall:.1f} req/s, p50 {lat[len(lat) // 2] * 1e3:.2f} ms, "
        f"{sess_ok} × 200, other: {dict((k, v) for k, v in statuses.items() if k != '200')}")

    log("\n== memory and threads ==")
    log(f"{'process / point':<44} {'RSS MB':>8} {'threads':>8}")
    log(f"{'sessionwarden idle after start':<44} {idle[0]:>8.1f} {idle[1]:>8}")
    log(f"{'sessionwarden after the runs':<44} {after_runs[0]:>8.1f} {after_runs[1]:>8}")
    log(f"{'sessionwarden after 1,000 sessions':<44} {after_sessions[0]:>8.1f} "
        f"{after_sessions[1]:>8}")
    log(f"{'sessionwarden 5 s later':<44} {settled[0]:>8.1f} {settled[1]:>8}")
    log(f"{'sessionwarden peak sampled (1/s) in runs':<44} {peak_rss:>8.1f} {peak_threads:>8}")
    for label, rows in (("litellm idle after start", lt_idle), ("litellm after the runs",
                                                                 lt_after)):
        for pid, rss, th in rows:
            log(f"{f'{label} (pid {pid})':<44} {rss:>8.1f} {th:>8}")

    # stop the daemon now so its log and database are final
    rc = sw.stop()
    procs.remove(sw)
    err = sw.text("err")
    levels = Counter(m.group(1) for m in re.finditer(r"\|\s*(WARNING|ERROR|CRITICAL)\s*\|", err))
    tracebacks = err.count("Traceback")
    log(f"\n== daemon health ==\n  exit code after SIGTERM: {rc}")
    log(f"  stderr: {len(err.splitlines())} lines, {dict(levels) or 'no WARNING/ERROR lines'}, "
        f"{tracebacks} tracebacks")
    for line in [ln for ln in err.splitlines()
                 if re.search(r"WARNING|ERROR|CRITICAL|Traceback", ln)][:10]:
        log(f"    {line[:200]}")
    ledger = events = -1
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            ledger = next(iter(conn.execute("SELECT count(*) FROM view_ledger")))[0]
            events = next(iter(conn.execute("SELECT count(*) FROM events")))[0]
        finally:
            conn.close()
    except apsw.Error as exc:
        log(f"  could not read the database: {exc}")
    size = sum(p.stat().st_size for p in db.parent.glob("events.db*"))
    log(f"  calls sent to the daemon (incl. warm-up and smoke): {sw_calls}; ledger rows: {ledger};"
        f" events: {events}; database {size / 2**20:.1f} MB")

    # final summary
    log("\n== SUMMARY ==")
    log(f"  {loadavg()}; total {time.monotonic() - t_start:.0f} s; "
        f"{n} req/cell × {rounds} rounds; client, upstream and proxies share {os.cpu_count()} "
        "cores")
    for conc, stream in CELLS:
        name = cell_name(conc, stream).strip()
        d, s = key.get(f"direct {name}", {}), key.get(f"sessionwarden {name}", {})
        li = key.get(f"litellm {name}", {})
        log(f"  {name:<10} direct {d.get('rps', math.nan):7.1f}/s | sessionwarden "
            f"{s.get('rps', math.nan):7.1f}/s +p50 {fmt(s.get('add_p50', math.nan))} ms "
            f"+p99 {fmt(s.get('add_p99', math.nan))} ms | litellm "
            f"{fmt(li.get('rps', math.nan), '.1f')}/s +p50 {fmt(li.get('add_p50', math.nan))} ms"
            f" | sw/litellm {fmt(s.get('vs_litellm', math.nan))}×")
    for stream in (False, True):
        name = cell_name(16, stream).strip()
        per_round = key.get(f"sessionwarden {name}", {}).get("vs_litellm_rounds") or []
        if per_round:
            log(f"  sw/litellm req/s per round at {name}: "
                + ", ".join(f"{x:.2f}" for x in per_round))
    log("  targets:")
    for stream in (False, True):
        name = cell_name(16, stream).strip()
        ratio = key.get(f"sessionwarden {name}", {}).get("vs_litellm", math.nan)
        verdict = "n/a" if math.isnan(ratio) else ("met" if ratio >= 3 else "MISSED")
        log(f"    sw/litellm req/s at {name} ≥ 3×: {fmt(ratio)}× — {verdict}")
    for stream in (False, True):
        name = cell_name(1, stream).strip()
        add = key.get(f"sessionwarden {name}", {}).get("add_p50", math.nan)
        log(f"    added p50 at {name} ≤ 3 ms: {fmt(add)} ms — {'met' if add <= 3 else 'MISSED'}")
    log(f"    daemon RSS idle ≤ 120 MB: {idle[0]:.1f} MB — {'met' if idle[0] <= 120 else 'MISSED'}")
    log(f"    daemon RSS after 1,000 sessions ≤ 250 MB: {after_sessions[0]:.1f} MB — "
        f"{'met' if after_sessions[0] <= 250 else 'MISSED'}")
    log(f"    daemon threads: idle {idle[1]}, after runs {after_runs[1]}, after sessions "
        f"{after_sessions[1]}, peak sampled {peak_threads}")
    total_errors = sum(c.errors for c in results.values()) + SESSIONS - sess_ok
    log(f"    non-200 / failed calls in all runs: {total_errors}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="200 requests per cell (about 2 minutes)")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM")
    parser.add_argument("--requests", type=int, default=0, help="override requests per cell")
    parser.add_argument("--rounds", type=int, default=0, help="override rounds (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    workdir = Path(tempfile.mkdtemp(prefix="sw-bench-proxy-"))
    procs: list[Proc] = []
    try:
        asyncio.run(bench(args, procs, workdir))
    except KeyboardInterrupt:
        log("\ninterrupted; stopping everything")
    except Exception:
        log(f"\nFAILED; process logs in {workdir}")
        args.keep = True
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in reversed(procs):
            proc.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if args.keep:
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
