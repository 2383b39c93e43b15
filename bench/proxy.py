"""Proxy overhead benchmark: sessionwarden against a direct upstream and LiteLLM's proxy.

Run ``.venv/bin/python bench/proxy.py [--quick] [--no-litellm] [--formats chat,messages,…]``.
Three subprocesses share this 2-core machine with the client (this process):

* the fake upstream ``tests/support/fake_provider.py`` (uvicorn, uvloop + httptools);
* ``sessionwarden daemon`` on a fresh temporary database, three providers at the fake, one per
  ``api_mode`` (``fake`` chat_completions, ``fake-anthropic`` anthropic_messages,
  ``fake-responses`` codex_responses), each with two keys (round robin), and one model each
  (``gpt-test``, ``claude-test``, ``resp-test``);
* LiteLLM's proxy (``litellm --config … --num_workers 1``), one model ``fake-gpt`` →
  ``openai/fake-gpt`` at the fake upstream (chat completions and /v1/responses) and
  ``fake-claude`` → ``anthropic/fake-claude`` (/v1/messages), with
  ``LITELLM_LOCAL_MODEL_COST_MAP=True`` and ``LITELLM_MASTER_KEY`` (the setup of
  perf-baselines.md §7). LiteLLM lives in its own venv, ``bench/.litellm-venv`` (gitignored),
  created with ``pip install 'litellm[proxy]'`` on first use; if that fails the run goes on
  without it.

The client is one ``httpx.AsyncClient`` per target (keep-alive). Formats (``--formats``,
default all three): ``chat`` (POST /v1/chat/completions), ``messages`` (POST /v1/messages,
``x-api-key``) and ``responses`` (POST /v1/responses, ``store: false``), each a small call
(system prompt + one user line, 32 tokens max). Cells are concurrency 1 and 16 × plain and
streaming (``"stream": true``, the whole SSE body read). Each round runs every cell for every
format and mode in turn (direct, sessionwarden, litellm; the orders of formats and modes rotate
per round), 50 warm-up requests then N timed requests per cell. Per-round figures: added
latency (proxy p50 − direct p50, p99 likewise) and throughput ratios; the medians over rounds
are reported, per format. Then each format against chat in the same round: added p50/p90 over
chat's, the daemon's CPU per call over chat's, its req/s over chat's; medians of the per-round
ratios, ``met``/``MISSED`` against 10 %. A format LiteLLM cannot serve against the fake (its
smoke call fails) is named and left out for LiteLLM only.

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
SYSTEM = "You are a terse assistant."
PROMPT = "Say hello to the benchmark."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
SW_CLAUDE = "claude-test"  # the daemon's model on the anthropic_messages provider
SW_RESP = "resp-test"  # the daemon's model on the codex_responses provider
LITELLM_CLAUDE = "fake-claude"  # LiteLLM's anthropic/ model at the fake


@dataclass(frozen=True)
class Format:
    """One wire format: its path under /v1, request body and what a complete answer holds."""

    name: str
    path: str
    plain_mark: bytes
    stream_mark: bytes

    def body(self, model: str, stream: bool) -> bytes:
        if self.name == "messages":
            obj: dict[str, Any] = {"model": model, "max_tokens": 32, "system": SYSTEM,
                                   "messages": [{"role": "user", "content": PROMPT}]}
        elif self.name == "responses":
            obj = {"model": model, "instructions": SYSTEM, "input": PROMPT,
                   "max_output_tokens": 32, "store": False}
        else:
            obj = {"model": model, "messages": MESSAGES, "max_tokens": 32}
        return json.dumps(obj | {"stream": stream}).encode()


FORMATS = {
    "chat": Format("chat", "/chat/completions", b'"choices"', b"[DONE]"),
    "messages": Format("messages", "/messages", b'"content"', b"message_stop"),
    "responses": Format("responses", "/responses", b'"output"', b"response.completed"),
}
TARGET_RATIO = 1.10  # each format within 10 % of chat's figure in the same run


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
                 name: str = "sessionwarden", reuse: bool = False,
                 extra: str = "") -> tuple[Proc, str, Path]:
    """The daemon (``exe``: another checkout's, to compare two versions) on a fresh db.

    ``reuse``: on the db an earlier start on ``workdir`` made (a restart); ``extra``:
    configuration before the providers (a section of its own, e.g. ``[otel]``).
    """
    home = workdir if name == "sessionwarden" else workdir / name
    home.mkdir(exist_ok=True)
    config = home / "sessionwarden.toml"
    config.write_text(
        extra +
        "[[providers]]\n"
        'name = "fake"\n'
        f'base_url = "{fake_url}"\n'
        'keys = ["env:BENCH_FAKE_KEY_A", "env:BENCH_FAKE_KEY_B"]\n'
        'strategy = "round_robin"\n'
        "[[models]]\n"
        f'name = "{SW_MODEL}"\n'
        'provider = "fake"\n'
        "context_length = 128000\n"
        "[[providers]]\n"
        'name = "fake-anthropic"\n'
        f'base_url = "{fake_url}"\n'
        'api_mode = "anthropic_messages"\n'
        'keys = ["env:BENCH_FAKE_KEY_A", "env:BENCH_FAKE_KEY_B"]\n'
        'strategy = "round_robin"\n'
        "[[models]]\n"
        f'name = "{SW_CLAUDE}"\n'
        'provider = "fake-anthropic"\n'
        "context_length = 128000\n"
        "[[providers]]\n"
        'name = "fake-responses"\n'
        f'base_url = "{fake_url}"\n'
        'api_mode = "codex_responses"\n'
        'keys = ["env:BENCH_FAKE_KEY_A", "env:BENCH_FAKE_KEY_B"]\n'
        'strategy = "round_robin"\n'
        "[[models]]\n"
        f'name = "{SW_RESP}"\n'
        'provider = "fake-responses"\n'
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
        f"  - model_name: {LITELLM_CLAUDE}\n"
        "    litellm_params:\n"
        f"      model: anthropic/{LITELLM_CLAUDE}\n"
        f"      api_base: {fake_url.removesuffix('/v1')}\n"
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
    url: str  # .../v1/chat/completions, /v1/messages or /v1/responses
    headers: dict[str, str]
    model: str
    proc: Proc | None
    fmt: Format = FORMATS["chat"]
    client: httpx.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0),
                                        headers=self.headers)

    def body(self, stream: bool) -> bytes:
        return self.fmt.body(self.model, stream)


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
            return "200" if t.fmt.plain_mark in r.content else "200-bad-body"
        async with t.client.stream("POST", t.url, content=body, headers=headers) as r:
            buf = bytearray()
            async for chunk in r.aiter_raw():
                buf += chunk
            if r.status_code != 200:
                return str(r.status_code)
            return "200" if t.fmt.stream_mark in buf else "200-no-done"
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


def format_ratios(results: dict[tuple[int, str, int, bool, str], Cell], rounds: int,
                  fnames: list[str]) -> list[str]:
    """Each format's sessionwarden figures over chat's in the same round; medians over rounds.

    Added latency is the format's proxy p50 − its own direct p50 (the fake's cost per format
    differs), over chat's; CPU is the daemon's CPU ms per call over chat's; throughput is the
    daemon's req/s at c=16 over chat's (and, for reading, the same over direct's ratio).
    Returns the verdict lines against the 10 % target.
    """
    base = "chat" if "chat" in fnames else fnames[0]
    log(f"\n== each format / {base}, sessionwarden, medians of per-round ratios "
        f"(target: within {TARGET_RATIO - 1:.0%}) ==")
    log(f"{'format':<10} {'cell':<10} {'+p50 ms':>8} {base + ' +p50':>10} {'+p50 ×':>7} "
        f"{'+p90 ms':>8} {'+p90 ×':>7} {'CPU ms':>7} {base + ' CPU':>9} {'CPU ×':>6} "
        f"{'req/s ×':>8} {'(÷direct)':>9}  verdict")
    verdicts: list[str] = []

    def added(r: int, f: str, conc: int, stream: bool, q: float) -> float:
        d = results.get((r, f, conc, stream, "direct"))
        p = results.get((r, f, conc, stream, "sessionwarden"))
        return p.pct(q) - d.pct(q) if d and p else math.nan

    for fname in [f for f in fnames if f != base]:
        for conc, stream in CELLS:
            a50, a90, b50, r50, r90, cpu, bcpu, rcpu, rrps, rnorm = ([] for _ in range(10))
            for r in range(rounds):
                p = results.get((r, fname, conc, stream, "sessionwarden"))
                b = results.get((r, base, conc, stream, "sessionwarden"))
                d = results.get((r, fname, conc, stream, "direct"))
                bd = results.get((r, base, conc, stream, "direct"))
                if not (p and b and d and bd):
                    continue
                x50, y50 = added(r, fname, conc, stream, .5), added(r, base, conc, stream, .5)
                x90, y90 = added(r, fname, conc, stream, .9), added(r, base, conc, stream, .9)
                a50.append(x50)
                b50.append(y50)
                a90.append(x90)
                r50.append(x50 / y50 if y50 > 0 else math.nan)
                r90.append(x90 / y90 if y90 > 0 else math.nan)
                cpu.append(p.cpu_s * 1e3 / p.n)
                bcpu.append(b.cpu_s * 1e3 / b.n)
                rcpu.append(p.cpu_s / b.cpu_s if b.cpu_s else math.nan)
                rrps.append(p.rps / b.rps if b.rps else math.nan)
                rnorm.append((p.rps / d.rps) / (b.rps / bd.rps) if b.rps and d.rps else math.nan)
            if not a50:
                continue
            checks = [("CPU", med(rcpu) <= TARGET_RATIO)]
            if conc == 1:
                checks.append(("added p50", med(r50) <= TARGET_RATIO))
            else:
                checks.append(("req/s", med(rrps) >= 1 / TARGET_RATIO))
            missed = [n for n, ok in checks if not ok]
            verdict = "met" if not missed else "MISSED (" + ", ".join(missed) + ")"
            cname = cell_name(conc, stream)
            log(f"{fname:<10} {cname:<10} {fmt(med(a50)):>8} {fmt(med(b50)):>10} "
                f"{fmt(med(r50)):>7} {fmt(med(a90)):>8} {fmt(med(r90)):>7} {fmt(med(cpu)):>7} "
                f"{fmt(med(bcpu)):>9} {fmt(med(rcpu)):>6} {fmt(med(rrps)):>8} "
                f"{fmt(med(rnorm)):>9}  {verdict}")
            what = (f"+p50 {fmt(med(r50))}×" if conc == 1 else f"req/s {fmt(med(rrps))}×")
            verdicts.append(f"{fname} / {base} at {cname.strip()}: {what}, CPU "
                            f"{fmt(med(rcpu))}× — {verdict}")
            if conc == 1:
                log(f"{'':<21} per-round +p50 ×: " + ", ".join(fmt(x) for x in r50)
                    + "; CPU ×: " + ", ".join(fmt(x) for x in rcpu))
            else:
                log(f"{'':<21} per-round req/s ×: " + ", ".join(fmt(x) for x in rrps)
                    + "; CPU ×: " + ", ".join(fmt(x) for x in rcpu))
    return verdicts


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

    formats = [FORMATS[f] for f in args.formats]
    ant = {"anthropic-version": "2023-06-01"}
    all_targets: dict[tuple[str, str], Target] = {}
    lt_missing: dict[str, str] = {}
    for f in formats:
        sw_model = {"messages": SW_CLAUDE, "responses": SW_RESP}.get(f.name, SW_MODEL)
        direct_hdr = ({"x-api-key": "sk-direct"} | ant if f.name == "messages"
                      else {"Authorization": "Bearer sk-direct"})
        sw_auth = ({"x-api-key": TOKEN} | ant if f.name == "messages"
                   else {"Authorization": f"Bearer {TOKEN}"})
        all_targets[(f.name, "direct")] = Target("direct", fake_url + f.path, direct_hdr,
                                                 sw_model, None, f)
        all_targets[(f.name, "sessionwarden")] = Target(
            "sessionwarden", sw_url + f.path, sw_auth | {"X-Session-Id": f"bench-{f.name}"},
            sw_model, sw, f)
        if lt is not None:
            lt_model = LITELLM_CLAUDE if f.name == "messages" else LITELLM_MODEL
            lt_hdr = {"Authorization": f"Bearer {MASTER_KEY}"} | (
                ant if f.name == "messages" else {})
            all_targets[(f.name, "litellm")] = Target("litellm", lt_url + f.path, lt_hdr,
                                                      lt_model, lt, f)

    # smoke check: one plain and one streaming call per target; LiteLLM may not serve a format
    sw_calls = 0
    for (fname, mode), t in list(all_targets.items()):
        for stream in (False, True):
            status = await one_call(t, t.body(stream), stream)
            if mode == "sessionwarden":
                sw_calls += 1
            if status == "200":
                continue
            if mode == "litellm":
                lt_missing[fname] = f"smoke call (stream={stream}) gave {status}"
                await all_targets.pop((fname, mode)).client.aclose()
                log(f"NOTE: LiteLLM does not serve {fname} against the fake here: "
                    f"{lt_missing[fname]}; its {fname} cells are left out")
                break
            raise RuntimeError(f"smoke call to {mode} {fname} (stream={stream}) gave {status}")
    targets = {m: t for (f, m), t in all_targets.items() if f == formats[0].name}
    modes = [m for m in MODES if any(m == mm for _, mm in all_targets)]

    results: dict[tuple[int, str, int, bool, str], Cell] = {}
    fnames = [f.name for f in formats]
    try:
        with Sampler(sw) as sampler:
            for r in range(rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                forder = fnames[r % len(fnames):] + fnames[:r % len(fnames)]
                log(f"\n-- round {r + 1}/{rounds} (order {' '.join(order)}; formats "
                    f"{' '.join(forder)}); {loadavg()}")
                for conc, stream in CELLS:
                    for fname in forder:
                        for mode in order:
                            if (fname, mode) not in all_targets:
                                continue
                            c = await run_cell(all_targets[(fname, mode)], conc, stream, n)
                            results[(r, fname, conc, stream, mode)] = c
                            if mode == "sessionwarden":
                                sw_calls += WARMUP + n
                            bad = {k: v for k, v in c.statuses.items() if k != "200"}
                            cpu = f"{c.cpu_s * 1e3 / n:6.2f}" if mode != "direct" else "     –"
                            log(f"  {fname:<9} {cell_name(conc, stream)} {mode:<14} "
                                f"{c.rps:8.1f} req/s  p50 {c.pct(.5):7.2f} ms  "
                                f"p99 {c.pct(.99):7.2f} ms  proxy CPU {cpu} ms/req"
                                + (f"  NON-200: {bad}" if bad else ""))
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
        for t in all_targets.values():
            await t.client.aclose()

    keys: dict[str, dict[str, Any]] = {}
    for fname in fnames:
        log(f"\n######## format {fname} ({FORMATS[fname].path}) ########")
        if fname in lt_missing:
            log(f"  LiteLLM: not served against the fake ({lt_missing[fname]})")
        keys[fname] = report({(r, c, s, m): v for (r, f, c, s, m), v in results.items()
                              if f == fname}, rounds, modes)
    key = keys[fnames[0]]
    format_verdicts = format_ratios(results, rounds, fnames) if len(fnames) > 1 else []
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
    for (fname, fkey), (conc, stream) in ((fk, c) for fk in keys.items() for c in CELLS):
        name = cell_name(conc, stream).strip()
        d, s = fkey.get(f"direct {name}", {}), fkey.get(f"sessionwarden {name}", {})
        li = fkey.get(f"litellm {name}", {})
        log(f"  {fname:<9} {name:<10} direct {d.get('rps', math.nan):7.1f}/s | sessionwarden "
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
    log(f"  targets (first format, {fnames[0]}):")
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
    for line in format_verdicts:
        log(f"    {line}")
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
    parser.add_argument("--formats", default="chat,messages,responses",
                        help="comma-separated wire formats to measure, of chat, messages, "
                             "responses (default all three; ratios are to the first / chat)")
    args = parser.parse_args()
    args.formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in args.formats if f not in FORMATS]
    if unknown or not args.formats:
        parser.error(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
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
