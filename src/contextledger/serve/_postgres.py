"""Session mode on Postgres: registry, histories, facts and locks in one database, shared by every
proxy process that uses it (``--store postgresql://…``).

Everything lives in the Postgres schema named by the proxy's namespace, created and migrated on
first use (:mod:`contextledger._postgres`).  The lock of a session is a row of
``contextledger_locks`` with a short lease, renewed while its request runs
(:class:`~contextledger.serve._locks.PostgresLeases`), and the turn's write is fenced by it in the
turn's own transaction; a proxy that dies holding a session frees it within one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

from contextledger._keys import storage_key
from contextledger._postgres import PostgresFailures, check_namespace, open_pool, quoted
from contextledger.exceptions import HistoryError, HistoryUnavailableError
from contextledger.facts import DEFAULT_SCHEMA, FactSchema, PostgresFactStore
from contextledger.facts._store import FactMemory
from contextledger.history import HistoryProvider, PostgresHistoryProvider
from contextledger.serve._locks import LocalLocks, PostgresLeases

__all__ = ["PostgresSessions"]

_T = TypeVar("_T")
_FEATURE = "contextledger serve with a postgresql:// store"


class PostgresSessions:
    """Registry, histories, facts and locks in Postgres (see the module docstring).

    Two pools serve them all: the history's asyncio pool (histories, registry, locks) and a
    synchronous one the sessions' fact stores share, whose calls run off the event loop.
    Within one process, requests to a session queue on a local lock first, so only one of them
    polls the lock's row.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        lock_timeout: float,
        lease_seconds: float,
        schema: FactSchema = DEFAULT_SCHEMA,
        max_connections: int = 20,
    ) -> None:
        self.schema = schema
        self.namespace = check_namespace(namespace)
        self._url = url
        self._leases = PostgresLeases(self._run, lease_seconds=lease_seconds)
        self._history = PostgresHistoryProvider(
            url, namespace=namespace, source_id="serve", fence=self._leases.fence, max_connections=max_connections
        )
        self.history: HistoryProvider = self._history
        self._max = max_connections
        self._facts_pool = open_pool(url, feature=_FEATURE, asynchronous=False, max_size=max_connections)
        self._facts_opened = False
        self._failures = PostgresFailures(self._facts_pool, unavailable=HistoryUnavailableError, failed=HistoryError)
        self._lock_timeout = lock_timeout
        self._locks = LocalLocks()

    async def _run(self, sql: str, parameters: tuple[Any, ...], action: str) -> int:
        """One statement (``{ns}`` standing for the namespace) on the history's pool; its row count."""
        with self._failures.mapped(action):
            async with self._history.connection() as connection:
                cursor = await connection.execute(sql.replace("{ns}", quoted(self.namespace)), parameters)
                return int(cursor.rowcount)

    async def create(self, key: str) -> bool:
        sql = (
            "INSERT INTO {ns}.contextledger_serve_sessions (session_key, created_at) VALUES (%s, %s) "
            "ON CONFLICT (session_key) DO NOTHING"
        )
        return await self._run(sql, (key, datetime.now(timezone.utc)), f"register session {key!r}") == 1

    async def exists(self, key: str) -> bool:
        sql = "SELECT 1 FROM {ns}.contextledger_serve_sessions WHERE session_key = %s"
        return await self._run(sql, (key,), f"look up session {key!r}") > 0

    async def delete(self, key: str) -> bool:
        sql = "DELETE FROM {ns}.contextledger_serve_sessions WHERE session_key = %s"
        existed = await self._run(sql, (key,), f"delete session {key!r}") == 1
        await self.history.clear(key)
        await self.run_facts(self.facts(key).forget)
        return existed

    def lock(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(key)

    @contextlib.asynccontextmanager
    async def _hold(self, key: str) -> AsyncIterator[None]:
        lock_key = storage_key(self.namespace, "lock", key)
        async with (
            self._locks.hold(key, self._lock_timeout) as remaining,
            self._leases.hold(key, lock_key, remaining, self._lock_timeout),
        ):
            yield

    def facts(self, key: str) -> FactMemory:
        if not self._facts_opened:
            self._facts_pool.pool.open(wait=False)
            self._facts_opened = True
        return PostgresFactStore(self._facts_pool.pool, owner=key, namespace=self.namespace, schema=self.schema)

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(operation)

    async def ready(self) -> None:
        """A connection of its own, not one the pool keeps: a pooled one may outlive the server."""
        psycopg = self._facts_pool.errors
        with self._failures.mapped("answer SELECT 1"):
            connection = await psycopg.AsyncConnection.connect(self._url, autocommit=True, connect_timeout=5)
            try:
                await connection.execute("SELECT 1")
            finally:
                await connection.close()

    async def close(self) -> None:
        await self.history.close()
        if self._facts_opened:
            await asyncio.to_thread(self._facts_pool.pool.close)
            # A closed pool cannot be opened again: a later use gets a new one.
            self._facts_pool = open_pool(self._url, feature=_FEATURE, asynchronous=False, max_size=self._max)
            self._facts_opened = False
