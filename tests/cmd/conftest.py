"""A bridge for the daemon fixtures: create their default database directory.

``tests/cmd/daemon_fixtures.py`` puts each test's database in ``<tmp>/db/``, a directory
the daemon used to create itself. An explicit ``--db`` must now name an existing
directory (README, exit 74), so this wraps the fixture to create it first. It belongs in
``DaemonMaker`` itself; delete this file once that creates the directory.
"""

import pytest

from tests.cmd.daemon_fixtures import DaemonMaker


@pytest.fixture
def daemon_factory(daemon_factory: DaemonMaker) -> DaemonMaker:
    """The plugin's ``daemon_factory``, with ``<base>/db`` created (0700)."""
    (daemon_factory.base / "db").mkdir(mode=0o700, exist_ok=True)
    return daemon_factory
