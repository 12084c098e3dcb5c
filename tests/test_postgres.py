"""The Postgres schema is the project's: created on first use, migrated by version, refused when a
newer release made it; and a server out of reach is reported as such, with nothing written.

Against the real Postgres the suite starts (``tests/conftest.py``), each test in a namespace of
its own.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contextledger import _postgres, _postgres_schema
from contextledger.exceptions import ConfigurationError, FactsError, HistoryUnavailableError
from contextledger.facts import PostgresFactStore
from contextledger.history import PostgresHistoryProvider
from contextledger.messages import Message
from tests.history.support import free_port
from tests.postgres_server import PostgresServer, postgres_extra

pytestmark = [pytest.mark.postgres, postgres_extra.skip]

if postgres_extra.installed:
    import psycopg


def _version(url: str, namespace: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(f'SELECT version FROM "{namespace}".contextledger_schema_version').fetchone()
    assert row is not None
    return int(row[0])


def test_the_first_use_creates_the_namespace_at_the_current_version(postgres_server: PostgresServer) -> None:
    namespace = f"fresh-{uuid.uuid4().hex[:8]}"

    async def write() -> None:
        history = PostgresHistoryProvider(postgres_server.url, namespace=namespace)
        try:
            await history.append("s", [Message.user("hello")])
            assert [m.text for m in await history.load("s")] == ["hello"]
        finally:
            await history.close()

    asyncio.run(write())
    assert _version(postgres_server.url, namespace) == _postgres_schema.SCHEMA_VERSION


def test_an_older_namespace_gets_only_the_migrations_it_lacks(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = f"older-{uuid.uuid4().hex[:8]}"
    store = PostgresFactStore(postgres_server.url, owner="ada", namespace=namespace)
    assert store.facts() == []  # migrated to the current version
    store.close()
    added = "CREATE TABLE {ns}.contextledger_added_later (id INTEGER PRIMARY KEY);"
    monkeypatch.setattr(_postgres, "MIGRATIONS", (*_postgres_schema.MIGRATIONS, added))
    monkeypatch.setattr(_postgres, "SCHEMA_VERSION", _postgres_schema.SCHEMA_VERSION + 1)
    monkeypatch.setattr(_postgres, "_READY", set())
    later = PostgresFactStore(postgres_server.url, owner="ada", namespace=namespace)
    later.begin_turn("customer=Acme")  # the first migration is not run again: its tables exist
    later.close()
    assert _version(postgres_server.url, namespace) == _postgres_schema.SCHEMA_VERSION + 1
    with psycopg.connect(postgres_server.url) as connection:
        connection.execute(f'SELECT count(*) FROM "{namespace}".contextledger_added_later')


def test_a_namespace_a_newer_release_migrated_is_refused(postgres_server: PostgresServer) -> None:
    namespace = f"newer-{uuid.uuid4().hex[:8]}"
    PostgresFactStore(postgres_server.url, owner="ada", namespace=namespace).facts()
    with psycopg.connect(postgres_server.url) as connection:
        connection.execute(f'UPDATE "{namespace}".contextledger_schema_version SET version = 999')
    _postgres._READY.clear()
    with pytest.raises(ConfigurationError, match="schema version 999, made by a newer contextledger"):
        PostgresFactStore(postgres_server.url, owner="ada", namespace=namespace).facts()


def test_processes_starting_together_migrate_a_namespace_once(postgres_server: PostgresServer) -> None:
    namespace = f"together-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        histories = [PostgresHistoryProvider(postgres_server.url, namespace=namespace) for _ in range(4)]
        try:
            await asyncio.gather(
                *(history.append(f"s{n}", [Message.user("hi")]) for n, history in enumerate(histories))
            )
        finally:
            for history in histories:
                await history.close()

    asyncio.run(main())
    assert _version(postgres_server.url, namespace) == _postgres_schema.SCHEMA_VERSION


def test_a_server_out_of_reach_is_unavailable_and_nothing_is_sent() -> None:
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/postgres"

    async def turn() -> None:
        history = PostgresHistoryProvider(url, connect_timeout=1)
        try:
            await history.append_turn("s", "t", [Message.user("hi")], [])
        finally:
            await history.close()

    with pytest.raises(HistoryUnavailableError, match="unreachable"):
        asyncio.run(turn())
    with pytest.raises(FactsError, match="unreachable"):
        PostgresFactStore(url, owner="ada", connect_timeout=1).begin_turn("hello")


@pytest.mark.parametrize("namespace", ["", "x" * 64, "nul\x00"])
def test_a_namespace_postgres_would_cut_or_refuse_is_refused(namespace: str) -> None:
    with pytest.raises(ConfigurationError, match="namespace must be the name of a Postgres schema"):
        PostgresHistoryProvider("postgresql://127.0.0.1/postgres", namespace=namespace)


def test_a_url_that_is_not_postgres_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"needs a postgresql:// URL"):
        PostgresFactStore("redis://127.0.0.1:6379/0", owner="ada")


def test_a_history_refused_for_a_newer_schema_leaves_no_connection_open(postgres_server: PostgresServer) -> None:
    url = postgres_server.fresh_database()
    database = url.rsplit("/", 1)[1]
    namespace = f"newer-{uuid.uuid4().hex[:8]}"
    with PostgresFactStore(url, owner="ada", namespace=namespace) as store:
        store.facts()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'UPDATE "{namespace}".contextledger_schema_version SET version = 999')
    _postgres._READY.clear()

    def connections() -> int:
        with psycopg.connect(postgres_server.url, autocommit=True) as connection:
            row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()
        assert row is not None
        return int(row[0])

    async def refused() -> list[int]:
        history = PostgresHistoryProvider(url, namespace=namespace)
        with pytest.raises(ConfigurationError, match="schema version 999"):
            await history.load("s")
        # Counted while the refused history is alive: a pool it opened would hold a connection
        # now. The ones closed before take a moment to leave the server's list: up to 5 s.
        seen = [connections()]
        for _ in range(50):
            if seen[-1] == 0:
                break
            await asyncio.sleep(0.1)
            seen.append(connections())
        await history.close()
        return seen

    seen = asyncio.run(refused())
    assert seen[-1] == 0, seen
