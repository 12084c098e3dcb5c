"""Hooks and servers for the whole test suite, and the hypothesis profile of the run's size."""

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport
from tests.isolation import pytest_configure, pytest_runtest_protocol, pytest_unconfigure
from tests.postgres_server import PostgresServer, started_postgres
from tests.redis_cluster import RedisCluster, started_redis_cluster
from tests.sizes import SIZE, small_examples

__all__ = [
    "postgres_server",
    "pytest_configure",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_unconfigure",
    "redis_cluster",
]

# A hypothesis test that names no max_examples of its own draws hypothesis's default number of
# examples at the full size, and a quarter of it at the small size (tests/sizes.py).
settings.register_profile("full", settings())
settings.register_profile("small", settings(max_examples=small_examples(settings().max_examples)))
settings.load_profile(SIZE)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway Postgres on 127.0.0.1 (tests/postgres_server.py) for every test that asks,
    stopped when the test session ends."""
    with started_postgres() as (server, _):
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A throwaway Redis Cluster on 127.0.0.1 (tests/redis_cluster.py: three masters, a replica
    each) for every test that asks, stopped when the test session ends.  Shared, so a test must
    not kill its nodes: one that does starts a cluster of its own with ``started_redis_cluster``."""
    with started_redis_cluster() as cluster:
        yield cluster
