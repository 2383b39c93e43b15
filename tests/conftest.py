"""Shared pytest configuration: the daemon fixtures, Hypothesis untimed, loguru's sink.

Hypothesis's per-example deadline (200 ms) and its too-slow health check are timing
assertions: on two shared cores under two test workers a slow example is load, not a
bug, so neither applies (the project measures speed in ``bench/``, never in tests).

loguru's default sink is the ``sys.stderr`` of the moment loguru was imported. Under
pytest that may be a capture stream closed before a later test's in-process daemon logs
("I/O operation on closed file"), so the sink here writes to whatever ``sys.stderr`` is
when a line is written.
"""

import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from loguru import logger

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
