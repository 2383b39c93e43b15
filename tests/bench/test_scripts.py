"""The benchmark scripts still run: one short round of each, in a subprocess.

Nothing here looks at a figure (benchmarks never assert on time); the tests only keep
``bench/`` from rotting unseen between the runs that record figures in the issue notes.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: The scripts run for seconds each: they are checked with the slow set (``.ci/run``), not
#: in the default run, which stays about product behaviour.
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_script(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=BENCH.parent, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return done.stdout


def test_store_appends_print_rates_and_ratios() -> None:
    out = run_script(str(BENCH / "store.py"), "--quick", "--skip-large", "--rounds", "1",
                     "--modes", "a,c,c2")
    assert "a raw apsw 1 txn/event FULL" in out
    assert "c/a" in out and "c2/a asyncio" in out


@pytest.mark.parametrize("shape", [[], ["--threads"]], ids=["tasks", "threads"])
def test_ceiling_prints_every_mode_against_a(shape: list[str]) -> None:
    out = run_script(str(BENCH / "ceiling.py"), "--rounds", "1", "--tasks", "4",
                     "--events", "1000", *shape)
    modes = ["bare-t", "lean-t", "lf-t", "c"] if shape else ["bare", "lean", "c2"]
    for mode in modes:
        assert f"{mode}/a " in out and f"{mode}/b " in out


def test_floor_prints_each_target_and_the_ratios() -> None:
    out = run_script(str(BENCH / "floor.py"), "--requests", "20", "--rounds", "1",
                     "--no-litellm")
    for target in ["floor", "floor+log", "sessionwarden"]:
        assert f"\n{target} " in out
    assert "sessionwarden / floor+log  CPU" in out


def test_callsize_prints_events_and_bytes_per_call() -> None:
    out = run_script(str(BENCH / "callsize.py"), "--calls", "20", "--sessions", "2")
    assert "events/call" in out and "database growth per call:" in out


def test_callsize_small_prints_the_files_growth_after_a_clean_stop() -> None:
    out = run_script(str(BENCH / "callsize.py"), "--shape", "small", "--calls", "10",
                     "--sessions", "2")
    assert "events/call" in out and "file growth per call after a clean stop:" in out


def synthetic_session(path: Path, turns: int = 60) -> Path:
    """A small tool-heavy session in the benchmark input's format (a gzipped JSON list).

    The real input lives outside the repository (../shared/bench), which a fresh clone
    does not have: the smoke test must not depend on it.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Fix the build."}]
    for n in range(turns):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function",
             "function": {"name": "terminal", "arguments": json.dumps({"cmd": f"make {n}"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}",
                         "content": json.dumps({"output": "line\n" * 400, "exit_code": n % 2})})
    path.write_bytes(gzip.compress(json.dumps(messages).encode()))
    return path


def test_context_prints_our_pass_without_hermes(tmp_path: Path) -> None:
    # --no-hermes: the test suite never installs Hermes Agent (bench/.hermes-venv).
    session = synthetic_session(tmp_path / "session.json.gz")
    out = run_script(str(BENCH / "context.py"), "--quick", "--rounds", "1", "--no-hermes",
                     "--session", str(session), "--prefix", "40")
    assert "Hermes Agent skipped (--no-hermes)" in out
    for name in ("whole", "prefix"):
        assert f"\n{name} " in out
        assert f"builtin_summary of the {name}'s middle" in out
        assert f"request body of the {name}:" in out


def test_context_resend_prints_both_sections(tmp_path: Path) -> None:
    session = synthetic_session(tmp_path / "session.json.gz")
    out = run_script(str(BENCH / "context_resend.py"), "--messages", "120", "--rounds", "1",
                     "--warmup", "0", "--sessions", "2", "--parallel", "1",
                     "--session", str(session))
    assert "resend events (each round): none" in out
    assert "(c)/(a) governance / decode:" in out
    assert "RSS above idle with 2 live sessions:" in out and "spill directory:" in out


def test_ledger_prints_both_targets_and_the_baselines(tmp_path: Path) -> None:
    out = run_script(str(BENCH / "ledger.py"), "--calls", "2000", "--rounds", "1",
                     "--results", str(tmp_path))
    assert "the same answer from the sums and from the calls: yes" in out
    for mode in ("day", "day-calls", "session", "session-calls", "bare-day", "bare-sums"):
        assert f"\n{mode} " in out
    assert "target: usage --by day --json <= 1 s:" in out
    assert "target: usage --by session --session ID <= 50 ms:" in out


def test_pricing_prints_each_mode_against_decode() -> None:
    out = run_script(str(BENCH / "pricing.py"), "--calls", "200", "--rounds", "1",
                     "--sessions", "10")
    for mode in ("decode", "pricing", "reserve", "total", "compacted"):
        assert f"\n{mode} " in out
    assert "target: pricing + reservation (total) <= 50 µs per call:" in out


def test_keys_prints_selection_classification_and_the_fast_refusal() -> None:
    out = run_script(str(BENCH / "keys.py"), "--calls", "20", "--rounds", "1")
    for line in ("select a key (every call)", "classify a 429 (failed calls only)",
                 "plain proxied call", "refused, every key benched (not sent)",
                 "one failover's cost"):
        assert line in out


def test_agent_run_prints_compressions_the_window_and_the_prefix_share() -> None:
    out = run_script(str(BENCH / "agent_run.py"), "--calls", "8")
    assert "compr/100" in out and "\nsessionwarden " in out and "\nas sent " in out
