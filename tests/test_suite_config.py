"""The test suite's own set-up: the default run leaves out the slow tests, CI runs them."""

import shlex
import tomllib
from pathlib import Path

from tests.store import test_crash

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_run_excludes_slow_tests_and_ci_runs_them() -> None:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = shlex.split(pytest_options["ini_options"]["addopts"])
    assert addopts[addopts.index("-m") + 1] == "not slow"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index('bash -c "$test_command"') < ci.index(".venv/bin/python -m pytest -m slow")


def test_the_default_run_has_two_workers_and_the_test_extra_brings_them() -> None:
    # .ci/run runs the README's command verbatim; -n needs pytest-xdist from the test extra.
    readme = (ROOT / "README.md").read_text()
    [command] = [line.strip() for line in readme.splitlines()
                 if line.startswith("    python3 -m venv .venv ") and "pytest" in line]
    assert shlex.split(command)[-3:] == ["pytest", "-n", "2"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("pytest-xdist") for dep in project["optional-dependencies"]["test"])


def test_the_slow_set_is_not_empty() -> None:
    # The full SIGKILL soak is the slow variant of the default crash test.
    test = test_crash.test_sigkill_during_concurrent_batches_loses_no_acknowledged_event
    (parametrize,) = [m for m in test.pytestmark if m.name == "parametrize"]
    slow = [p.values for p in parametrize.args[1]
            if any(mark.name == "slow" for mark in p.marks)]
    assert slow == [(test_crash.SOAK_TRIALS,)] and test_crash.SOAK_TRIALS > test_crash.TRIALS
