"""Fixtures for the facts tests: each store the conformance suite runs against (memory, SQLite,
Redis, Postgres).

The Redis store runs against the real redis-server the history tests start (same fixture), in
an owner namespace no other test uses; the Postgres store against the Postgres the whole suite
shares (``tests/conftest.py``), in a namespace of its own per test.  Stores are built with the
``schema`` fixture's schema: the seed's here; the conformance suite overrides ``schema`` to run
under the seed's and a custom one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contextledger.facts import (
    DEFAULT_SCHEMA,
    FactSchema,
    FactStore,
    PostgresFactStore,
    RedisFactStore,
    SQLiteFactStore,
)
from contextledger.facts._store import FactMemory
from tests.facts.support import Clock
from tests.history.conftest import redis_server
from tests.history.support import RedisServer
from tests.postgres_server import PostgresServer

__all__ = ["MakeStore", "redis_server"]

MakeStore = Callable[..., FactMemory]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def schema() -> FactSchema:
    """The schema every store a test builds follows, unless the test passes its own."""
    return DEFAULT_SCHEMA


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def make_store(request: pytest.FixtureRequest, clock: Clock, schema: FactSchema) -> Iterator[MakeStore]:
    """Builds stores of one backend; every store it builds in a test shares that test's storage
    (a Redis owner of its own), the way several agents or processes would share it.  The
    in-memory backend has one store per test: options apply to the first one built."""
    if request.param == "memory":
        shared: list[FactStore] = []

        def memory(**options: object) -> FactMemory:
            if not shared:
                defaults: dict[str, object] = {"schema": schema} if options else {"clock": clock, "schema": schema}
                shared.append(FactStore(**{**defaults, **options}))  # type: ignore[arg-type]
            return shared[0]

        yield memory
        return
    if request.param == "sqlite":
        path = request.getfixturevalue("tmp_path") / "facts.sqlite3"
        files: list[SQLiteFactStore] = []

        def sqlite(**options: object) -> FactMemory:
            store = SQLiteFactStore(path, **{"owner": "test", "clock": clock, "schema": schema, **options})  # type: ignore[arg-type]
            files.append(store)
            return store

        yield sqlite
        for file_store in files:
            file_store.close()
        return
    if request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        namespace = f"test-{uuid.uuid4().hex[:12]}"
        pooled: list[PostgresFactStore] = []

        def postgres_store(**options: object) -> FactMemory:
            settings = {"owner": "test", "clock": clock, "schema": schema, "namespace": namespace, **options}
            store = PostgresFactStore(postgres.url, **settings)  # type: ignore[arg-type]
            pooled.append(store)
            return store

        yield postgres_store
        for pooled_store in pooled:
            pooled_store.close()
        return
    if request.param == "redis-cluster":
        url = request.getfixturevalue("redis_cluster").url
    else:
        url = request.getfixturevalue("redis_server").url
    owner = f"test-{uuid.uuid4().hex[:12]}"
    opened: list[RedisFactStore] = []

    def redis(**options: object) -> FactMemory:
        store = RedisFactStore(url, **{"owner": owner, "clock": clock, "schema": schema, **options})  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield redis
    for store in opened:
        store.close()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def persistent_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where processes meet a persistent store: a SQLite file, or a Redis or Postgres server's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "facts.sqlite3")
    if request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        return postgres.url
    if request.param == "redis-cluster":
        cluster_url: str = request.getfixturevalue("redis_cluster").url
        return cluster_url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def store(make_store: MakeStore) -> FactMemory:
    return make_store()
