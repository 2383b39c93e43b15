"""Shared pytest configuration: the daemon fixtures for the end-to-end tests."""

pytest_plugins = ["tests.cmd.daemon_fixtures", "tests.cmd.inprocess", "tests.cmd.key_fixtures"]
