"""Shared pytest configuration: the daemon fixtures, Hypothesis untimed, loguru's sink.

Hypothesis's per-example deadline (200 ms) and its too-slow health check are timing
assertions: on two shared cores under two test workers a slow example is load, not a
bug, so neither applies (the project measures speed in ``bench/``, never in tests).

loguru's default sink is the ``sys.stderr`` of the moment loguru was imported. Under
pytest that may be a capture stream closed before a later test's in-process daemon logs
("I/O operation on closed file"), so the sink here writes to whatever ``sys.stderr`` is
when a line is written.

Bytecode caches are written even when the environment sets ``PYTHONDONTWRITEBYTECODE``
(as this machine's does): otherwise each test worker recompiles and re-rewrites every test
module at collection, and every ``sessionwarden`` subprocess a test starts (a daemon, a
CLI command) recompiles the package from source — some 10 s of the default run. The
caches land in ``__pycache__`` directories, which git ignores; nothing tested depends on
them.
"""

import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from loguru import logger

sys.dont_write_bytecode = False  # this process and its xdist workers: rewritten test modules
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the subprocesses the tests start

pytest_plugins = ["tests.cmd.daemon_fixtures", "tests.cmd.inprocess", "tests.cmd.key_fixtures"]

settings.register_profile("untimed", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")


def _to_current_stderr(message: str) -> None:
    sys.stderr.write(message)


def _log_to_current_stderr() -> None:
    logger.remove()
    logger.add(_to_current_stderr)


_log_to_current_stderr()


@pytest.fixture
def daemon_logging() -> Iterator[None]:
    """For a test that runs ``main(["daemon", ...])`` in its own process.

    The daemon's entry point points loguru at the ``sys.stderr`` of the moment — under
    ``capsys``, a stream closed at the test's end. Afterwards the sink is this module's
    again.
    """
    try:
        yield
    finally:
        _log_to_current_stderr()
