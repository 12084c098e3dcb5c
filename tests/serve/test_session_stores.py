"""The proxy's session stores open Redis and SQLite as every store does: a Redis command whose
reply was lost is never sent again (so nothing is applied twice), and the SQLite registry shares
the history's file in WAL mode and reports errors the way the history does."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import pytest
from tests.history.support import RedisServer
from tests.redis_relay import ReplyLosingRelay

from contextledger.exceptions import FactsError, HistoryCorruptError, HistoryUnavailableError
from contextledger.serve._sessions import RedisSessions, SQLiteSessions, session_key


def redis_sessions(url: str, namespace: str) -> RedisSessions:
    pytest.importorskip("redis", reason="the 'redis' extra")
    return RedisSessions(url, namespace=namespace, lock_timeout=5.0, lease_seconds=60.0)


def test_every_redis_client_of_the_sessions_is_set_never_to_retry() -> None:
    # Set, not left to redis-py's default: that default has changed between versions, and a
    # client built with redis.Redis(...) retries a command three times.
    sessions = redis_sessions("redis://127.0.0.1:6379/0", "retries")
    fact_store = sessions.facts(session_key("tenant", "desk"))
    for client in (fact_store._client, sessions.history._client):  # type: ignore[attr-defined]
        retry = client.connection_pool.connection_kwargs.get("retry")
        assert retry is not None, f"{client!r} leaves its retries to redis-py's default"
        assert retry.get_retries() == 0
    asyncio.run(sessions.close())


@pytest.mark.redis
def test_a_fact_read_whose_reply_was_lost_is_not_sent_again(redis_server: RedisServer) -> None:
    namespace = f"lost-read-{uuid.uuid4().hex[:12]}"
    with ReplyLosingRelay(redis_server.port) as relay:
        sessions = redis_sessions(relay.url, namespace)
        store = sessions.facts(session_key("tenant", "desk"))
        assert store.facts() == []
        relay.lose_reply_to("HGETALL")
        with pytest.raises(FactsError, match=r"cannot read the facts: .* is unreachable"):
            store.facts()
        assert relay.sent("HGETALL") == 2  # the first read and the lost one: no third
        asyncio.run(sessions.close())


@pytest.mark.redis
def test_a_fact_write_whose_reply_was_lost_is_applied_once_and_reported(redis_server: RedisServer) -> None:
    namespace = f"lost-write-{uuid.uuid4().hex[:12]}"
    owner = session_key("tenant", "desk")
    with ReplyLosingRelay(redis_server.port) as relay:
        sessions = redis_sessions(relay.url, namespace)
        store = sessions.facts(owner)
        store.begin_turn("hello")
        assert store.turn == 1
        relay.lose_reply_to("EXEC")
        with pytest.raises(FactsError, match=r"did not confirm it .* read the facts to see which"):
            store.begin_turn("module=Billing")
        assert relay.sent("EXEC") == 2
        asyncio.run(sessions.close())
    direct = redis_sessions(redis_server.url, namespace)
    assert direct.facts(owner).turn == 2  # the lost turn ran once, not once more on a retry
    asyncio.run(direct.close())


@pytest.mark.redis
def test_a_registration_whose_reply_was_lost_is_not_sent_again(redis_server: RedisServer) -> None:
    namespace = f"lost-register-{uuid.uuid4().hex[:12]}"

    async def scenario(relay: ReplyLosingRelay) -> None:
        sessions = redis_sessions(relay.url, namespace)
        assert await sessions.create("first")
        relay.lose_reply_to("SET")
        with pytest.raises(HistoryUnavailableError, match=r"cannot register session 'second': .* is unreachable"):
            await sessions.create("second")
        assert relay.sent("SET") == 2
        await sessions.close()
        direct = redis_sessions(redis_server.url, namespace)
        assert await direct.exists("second")  # it ran, once
        await direct.close()

    with ReplyLosingRelay(redis_server.port) as relay:
        asyncio.run(scenario(relay))


def test_the_sqlite_registry_opens_its_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"

    async def scenario() -> None:
        sessions = SQLiteSessions(str(path), lock_timeout=5.0)
        assert await sessions.create("desk")  # the registry is the first to open the file
        assert await sessions.exists("desk")
        await sessions.close()

    asyncio.run(scenario())
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()


def test_a_sqlite_registry_in_a_missing_directory_says_what_to_check(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "sessions.sqlite3"

    async def scenario() -> None:
        sessions = SQLiteSessions(str(path), lock_timeout=5.0)
        try:
            with pytest.raises(HistoryUnavailableError, match="check that the directory exists and is writable"):
                await sessions.create("desk")
        finally:
            await sessions.close()

    asyncio.run(scenario())


def test_a_sqlite_registry_file_that_is_not_a_database_is_reported_as_such(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(b"these are not the pages of a database" * 200)

    async def scenario() -> None:
        sessions = SQLiteSessions(str(path), lock_timeout=5.0)
        try:
            with pytest.raises(HistoryCorruptError, match=f"{path} is not a readable database"):
                await sessions.exists("desk")
        finally:
            await sessions.close()

    asyncio.run(scenario())
