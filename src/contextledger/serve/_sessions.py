"""Where session mode keeps things: which sessions exist, their history, their facts, their lock.

Two backends with the same promises:

* :class:`SQLiteSessions` (the default): one file holds the session registry and the
  histories; facts live in this process's memory (the seed's default: not persisted) and the
  per-session lock is this process's.  One proxy process per file.
* :class:`RedisSessions`: registry, histories, facts and locks all in Redis, so several proxy
  processes or machines serve the same sessions.

Every key is built from the tenant and the session id (escaped, :mod:`contextledger._keys`), so a
session exists only inside its tenant: the same id under another tenant is another, usually
unknown, session.  Requests to one session are serialised by :meth:`Sessions.lock`; a request
that waited longer than the lock timeout is refused with 409, never interleaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from contextledger._extras import require_extra
from contextledger._keys import storage_key
from contextledger.exceptions import HistoryUnavailableError, ProxyError
from contextledger.facts import FactMemory, FactStore, RedisFactStore
from contextledger.history import HistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider

__all__ = ["RedisSessions", "SQLiteSessions", "Sessions", "open_sessions", "session_key"]

_T = TypeVar("_T")


def session_key(tenant: str, session_id: str) -> str:
    """The one id a session has in every store: its tenant and its id, escaped and joined."""
    return storage_key(tenant, session_id)


def busy(waited: float) -> ProxyError:
    return ProxyError(
        f"another request to this session has been running for more than the lock timeout ({waited:g}s); "
        "nothing was stored, retry later (with the same Idempotency-Key, so the turn is stored at most once)",
        status=409,
        error_type="conflict_error",
        code="session_busy",
    )


class _LocalLocks:
    """One asyncio lock per session key in this process, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str, timeout: float) -> AsyncIterator[float]:
        """Hold the key's lock; yields the seconds left of ``timeout`` once it is held."""
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        started = time.monotonic()
        try:
            try:
                await asyncio.wait_for(lock.acquire(), timeout)
            except asyncio.TimeoutError:
                raise busy(timeout) from None
            try:
                yield max(0.0, timeout - (time.monotonic() - started))
            finally:
                lock.release()
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(key, None)


class Sessions(Protocol):
    """What session mode needs from a backend (see the module docstring)."""

    history: HistoryProvider

    async def create(self, key: str) -> bool:
        """Register the session; ``False`` when it already exists."""
        ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> bool:
        """Remove the session, its history and its facts; ``False`` when it did not exist."""
        ...

    def lock(self, key: str) -> contextlib.AbstractAsyncContextManager[None]: ...

    def facts(self, key: str) -> FactMemory: ...

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        """Run a fact-store operation without holding up the event loop when it does I/O."""
        ...

    async def close(self) -> None: ...


class SQLiteSessions:
    """Registry and histories in one SQLite file; facts and locks in this process."""

    def __init__(self, path: str, *, lock_timeout: float) -> None:
        self.path = path
        self.history: HistoryProvider = SQLiteHistoryProvider(path, source_id="serve")
        self._lock_timeout = lock_timeout
        self._locks = _LocalLocks()
        self._facts: dict[str, FactStore] = {}
        # This process is the file's only proxy, so the sessions it has seen exist until it deletes them.
        self._known: set[str] = set()
        self._db_lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            connection.execute(
                "CREATE TABLE IF NOT EXISTS contextledger_serve_sessions "
                "(session_key TEXT PRIMARY KEY, created_at TEXT NOT NULL)"
            )
            self._connection = connection
        return self._connection

    def _run(self, sql: str, parameters: tuple[Any, ...]) -> int:
        with self._db_lock:
            try:
                cursor = self._db().execute(sql, parameters)
            except sqlite3.Error as error:
                raise HistoryUnavailableError(f"cannot use the session registry in {self.path}: {error}") from error
            return cursor.rowcount if cursor.rowcount >= 0 else len(cursor.fetchall())

    async def create(self, key: str) -> bool:
        created = datetime.now(timezone.utc).isoformat()
        sql = "INSERT OR IGNORE INTO contextledger_serve_sessions (session_key, created_at) VALUES (?, ?)"
        return await asyncio.to_thread(self._run, sql, (key, created)) == 1

    async def exists(self, key: str) -> bool:
        if key in self._known:
            return True
        sql = "SELECT 1 FROM contextledger_serve_sessions WHERE session_key = ?"
        found = await asyncio.to_thread(self._run, sql, (key,)) > 0
        if found:
            self._known.add(key)
        return found

    async def delete(self, key: str) -> bool:
        self._known.discard(key)
        sql = "DELETE FROM contextledger_serve_sessions WHERE session_key = ?"
        existed = await asyncio.to_thread(self._run, sql, (key,)) == 1
        await self.history.clear(key)
        store = self._facts.pop(key, None)
        if store is not None:
            store.forget()
        return existed

    def lock(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(key)

    @contextlib.asynccontextmanager
    async def _hold(self, key: str) -> AsyncIterator[None]:
        async with self._locks.hold(key, self._lock_timeout):
            yield

    def facts(self, key: str) -> FactMemory:
        store = self._facts.get(key)
        if store is None:
            store = self._facts[key] = FactStore()
        return store

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        return operation()  # an in-memory store answers at once

    async def close(self) -> None:
        await self.history.close()
        with self._db_lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


# Deletes the lock only if this holder still owns it (its lease may have run out and been taken).
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisSessions:
    """Registry, histories, facts and locks in Redis, shared by every proxy process using it.

    The lock is a key set with ``NX`` and a lease (the upstream timeout plus a minute), so a
    proxy that dies holding it blocks the session only until the lease runs out.  Within one
    process, requests to a session queue on a local lock first, so only one of them polls Redis.
    """

    def __init__(self, url: str, *, namespace: str, lock_timeout: float, lease_seconds: float) -> None:
        require_extra("redis", extra="redis", feature="contextledger serve with a redis:// store")
        import redis as redis_sync  # noqa: PLC0415
        import redis.asyncio as redis_asyncio  # noqa: PLC0415
        from redis.asyncio.retry import Retry  # noqa: PLC0415
        from redis.backoff import NoBackoff  # noqa: PLC0415

        # Never retried, like the history's own client: a retried write that had reached the
        # server could store a turn twice.
        self._client: Any = redis_asyncio.Redis.from_url(
            url, socket_timeout=5.0, socket_connect_timeout=5.0, retry=Retry(NoBackoff(), 0)
        )
        self._sync: Any = redis_sync.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.history: HistoryProvider = RedisHistoryProvider(
            namespace=namespace, source_id="serve", client=self._client
        )
        self.namespace = namespace
        self._lock_timeout = lock_timeout
        self._lease_ms = int(lease_seconds * 1000)
        self._locks = _LocalLocks()

    def _key(self, kind: str, key: str) -> str:
        return storage_key(self.namespace, kind, key)

    async def _call(self, command: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return await getattr(self._client, command)(*args, **kwargs)
        except Exception as error:
            raise HistoryUnavailableError(
                f"the session store in Redis failed ({type(error).__name__}: {error})"
            ) from error

    async def create(self, key: str) -> bool:
        created = datetime.now(timezone.utc).isoformat()
        return bool(await self._call("set", self._key("session", key), created, nx=True))

    async def exists(self, key: str) -> bool:
        return bool(await self._call("exists", self._key("session", key)))

    async def delete(self, key: str) -> bool:
        existed = bool(await self._call("delete", self._key("session", key)))
        await self.history.clear(key)
        await self.run_facts(self.facts(key).forget)
        return existed

    def lock(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(key)

    @contextlib.asynccontextmanager
    async def _hold(self, key: str) -> AsyncIterator[None]:
        async with self._locks.hold(key, self._lock_timeout) as remaining:
            lock_key, token = self._key("lock", key), uuid.uuid4().hex
            deadline = time.monotonic() + remaining
            delay = 0.002
            while not await self._call("set", lock_key, token, nx=True, px=self._lease_ms):
                if time.monotonic() >= deadline:
                    raise busy(self._lock_timeout)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            try:
                yield
            finally:
                with contextlib.suppress(HistoryUnavailableError):
                    await self._call("eval", _RELEASE, 1, lock_key, token)

    def facts(self, key: str) -> FactMemory:
        return RedisFactStore(self._sync, owner=key, namespace=self.namespace)

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(operation)

    async def close(self) -> None:
        await self.history.close()
        with contextlib.suppress(Exception):
            await self._client.aclose()
        self._sync.close()


def open_sessions(store: str, *, namespace: str, lock_timeout: float, upstream_timeout: float) -> Sessions:
    """The backend ``store`` names: ``sqlite:PATH`` or a ``redis://`` URL."""
    if store.startswith("sqlite:"):
        return SQLiteSessions(store.removeprefix("sqlite:"), lock_timeout=lock_timeout)
    return RedisSessions(store, namespace=namespace, lock_timeout=lock_timeout, lease_seconds=upstream_timeout + 60)
