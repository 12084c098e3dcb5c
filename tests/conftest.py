"""Hooks and servers for the whole test suite, and the hypothesis profile of the run's size."""

from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport
from tests.isolation import pytest_configure, pytest_runtest_protocol, pytest_unconfigure
from tests.postgres_server import PostgresServer, started_postgres
from tests.redis_cluster import RedisCluster, started_redis_cluster
from tests.sizes import SIZE, STRESS_SHAPES, small_examples

__all__ = [
    "postgres_server",
    "pytest_configure",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_terminal_summary",
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The stress run's shapes, added up over its parts (each reports its own, from whichever
    worker ran it), so the log shows how many conversations of each shape were checked."""
    total: Counter[str] = Counter()
    parts = set()
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, counts in getattr(report, "user_properties", ()):
                if name == STRESS_SHAPES and report.nodeid not in parts:
                    parts.add(report.nodeid)
                    total.update(counts)
    if parts:
        terminalreporter.write_sep("-", f"stress run ({SIZE} size): {total['conversations']:,} conversations")
        terminalreporter.write_line(f"  in {len(parts)} parts; of them, with each real-traffic shape:")
        for shape, count in total.items():
            if shape != "conversations":
                terminalreporter.write_line(f"  {shape}: {count:,}")
