"""Hooks and servers for the whole test suite."""

from collections.abc import Iterator

import pytest

from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport
from tests.postgres_server import PostgresServer, started_postgres

__all__ = ["postgres_server", "pytest_make_collect_report", "pytest_runtest_makereport"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway Postgres on 127.0.0.1 (tests/postgres_server.py) for every test that asks,
    stopped when the test session ends."""
    with started_postgres() as (server, _):
        yield server
