"""Where session mode keeps things: which sessions exist, their history, their facts, their lock.

Three backends with the same promises:

* :class:`SQLiteSessions` (the default): one file holds the session registry and the
  histories; facts live in this process's memory (the seed's default: not persisted) and the
  per-session lock is this process's.  One proxy process per file.
* :class:`RedisSessions`: registry, histories, facts and locks all in Redis, so several proxy
  processes or machines serve the same sessions.
* :class:`~contextledger.serve._postgres.PostgresSessions`: the same in Postgres.

Every key is built from the tenant and the session id (escaped, :mod:`contextledger._keys`), so a
session exists only inside its tenant: the same id under another tenant is another, usually
unknown, session.  Requests to one session are serialised by :meth:`Sessions.lock`; a request
that waited longer than the lock timeout is refused with 409, never interleaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from contextledger._keys import storage_key
from contextledger._postgres import is_postgres_url
from contextledger._redis import RedisFailures, open_redis
from contextledger._sqlite import SQLiteFailures, open_wal
from contextledger.exceptions import ConfigurationError, HistoryCorruptError, HistoryError, HistoryUnavailableError
from contextledger.facts import DEFAULT_SCHEMA, FactSchema, RedisFactStore, SQLiteFactStore
from contextledger.facts._store import FactMemory
from contextledger.history import HistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider
from contextledger.serve._locks import LocalLocks, RedisLeases

__all__ = ["RedisSessions", "SQLiteSessions", "Sessions", "open_sessions", "session_key"]

_T = TypeVar("_T")


def session_key(tenant: str, session_id: str) -> str:
    """The one id a session has in every store: its tenant and its id, escaped and joined."""
    return storage_key(tenant, session_id)


class Sessions(Protocol):
    """What session mode needs from a backend (see the module docstring)."""

    history: HistoryProvider
    schema: FactSchema  # the keys and bounds of every session's facts

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

    async def ready(self) -> None:
        """Ask the store itself whether it answers (no cached connection trusted); a
        ``HistoryError`` saying what is wrong when it does not."""
        ...

    async def close(self) -> None: ...


# How long a registry or history write waits for another connection's write lock on the file.
_BUSY_TIMEOUT = 10.0
_REGISTRY_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS contextledger_serve_sessions (session_key TEXT PRIMARY KEY, created_at TEXT NOT NULL)"
)


class SQLiteSessions:
    """Registry, histories and facts in one SQLite file, held by this process alone; locks in it.

    The facts persist in the file beside the history (one :class:`SQLiteFactStore` owner per
    session): a restarted proxy tells the model what the user declared before, not "no facts"
    above the user's own declaration.  The file's turn locks live in this process, so a second
    proxy on the same file would run turns beside this one's: it is refused at start-up by an
    exclusive lock on ``PATH.lock``, which the system releases when the holder exits, however it
    exits (a SIGKILLed proxy never blocks its restart).
    """

    def __init__(self, path: str, *, lock_timeout: float, schema: FactSchema = DEFAULT_SCHEMA) -> None:
        self.schema = schema
        self.path = path
        self._holder = _hold_file(path)
        self.history: HistoryProvider = SQLiteHistoryProvider(path, source_id="serve", busy_timeout=_BUSY_TIMEOUT)
        self._lock_timeout = lock_timeout
        self._locks = LocalLocks()
        self._facts: dict[str, SQLiteFactStore] = {}
        # This process is the file's only proxy, so the sessions it has seen exist until it deletes them.
        self._known: set[str] = set()
        self._db_lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._failures = SQLiteFailures(
            f"the session registry in SQLite file {path}",
            busy_timeout=_BUSY_TIMEOUT,
            unavailable=HistoryUnavailableError,
            corrupt=HistoryCorruptError,
            failed=HistoryError,
        )

    def _run(self, sql: str, parameters: tuple[Any, ...], action: str) -> int:
        with self._db_lock, self._failures.mapped(action):
            if self._connection is None:
                # Opened as the history opens the same file: WAL mode, the same busy timeout.
                self._connection = open_wal(
                    self.path, busy_timeout=_BUSY_TIMEOUT, synchronous="NORMAL", schema=(_REGISTRY_SCHEMA,)
                )
            cursor = self._connection.execute(sql, parameters)
            return cursor.rowcount if cursor.rowcount >= 0 else len(cursor.fetchall())

    async def create(self, key: str) -> bool:
        created = datetime.now(timezone.utc).isoformat()
        sql = "INSERT OR IGNORE INTO contextledger_serve_sessions (session_key, created_at) VALUES (?, ?)"
        return await asyncio.to_thread(self._run, sql, (key, created), f"register session {key!r}") == 1

    async def exists(self, key: str) -> bool:
        if key in self._known:
            return True
        sql = "SELECT 1 FROM contextledger_serve_sessions WHERE session_key = ?"
        found = await asyncio.to_thread(self._run, sql, (key,), f"look up session {key!r}") > 0
        if found:
            self._known.add(key)
        return found

    async def delete(self, key: str) -> bool:
        self._known.discard(key)
        sql = "DELETE FROM contextledger_serve_sessions WHERE session_key = ?"
        existed = await asyncio.to_thread(self._run, sql, (key,), f"delete session {key!r}") == 1
        await self.history.clear(key)
        store = self._facts.pop(key, None) or self._open_facts(key)
        await asyncio.to_thread(store.forget)
        await asyncio.to_thread(store.close)
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
            if len(self._facts) >= _OPEN_FACT_STORES:  # a connection each: close the oldest
                self._facts.pop(next(iter(self._facts))).close()
            store = self._facts[key] = self._open_facts(key)
        return store

    def _open_facts(self, key: str) -> SQLiteFactStore:
        return SQLiteFactStore(self.path, owner=key, schema=self.schema, busy_timeout=_BUSY_TIMEOUT)

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(operation)  # the file, off the event loop

    async def ready(self) -> None:
        await asyncio.to_thread(self._read_file)

    def _read_file(self) -> None:
        """Read the file's schema through a connection of its own: the one kept open would go on
        writing to a file removed from under it, as if nothing were wrong."""
        if not os.path.exists(self.path):
            directory = os.path.dirname(os.path.abspath(self.path))
            if self._connection is None and os.access(directory, os.W_OK):
                return  # not made yet: the first session makes it
            raise HistoryUnavailableError(
                f"the SQLite file {self.path} is missing"
                + (" (it was open, so it was removed)" if self._connection is not None else "")
                + "; check that the file and its directory exist and are writable"
            )
        uri = "file:" + urllib.request.pathname2url(os.path.abspath(self.path)) + "?mode=rw"
        with self._failures.mapped("read the file"):
            connection = sqlite3.connect(uri, uri=True, timeout=1.0)
            try:
                connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                connection.close()

    async def close(self) -> None:
        await self.history.close()
        with self._db_lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        for store in self._facts.values():
            store.close()
        self._facts.clear()
        self._holder.close()


_OPEN_FACT_STORES = 256


def _hold_file(path: str) -> Any:
    """An open lock file beside ``path``, held exclusively by this process until it exits; a
    :class:`ConfigurationError` naming the file if another process holds it."""
    try:
        import fcntl  # noqa: PLC0415  (POSIX: where it is missing, nothing is held)
    except ImportError:  # pragma: no cover
        return open(os.devnull)
    try:
        holder = open(path + ".lock", "a")  # noqa: SIM115  (held for the process's life)
    except OSError:
        # No lock file where the database cannot be either (a missing or read-only directory):
        # the store's first use says what to check, in its own words.
        return open(os.devnull)
    try:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder.close()
        raise ConfigurationError(
            f"another contextledger serve already uses the SQLite file {path}: one proxy process per file (its "
            "session locks live in that process); stop the other one, give this one another file, or share "
            "sessions between processes with --store redis://..."
        ) from None
    return holder


class RedisSessions:
    """Registry, histories, facts and locks in Redis, shared by every proxy process using it.

    The lock is a key set with ``NX`` and a short lease renewed while its request runs
    (:mod:`contextledger.serve._locks`), so a proxy that dies holding it blocks the session only
    until the lease runs out, and the turn's write is fenced by it.  Within one process, requests
    to a session queue on a local lock first, so only one of them polls Redis.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        lock_timeout: float,
        lease_seconds: float,
        schema: FactSchema = DEFAULT_SCHEMA,
        replicas: int | None = None,
    ) -> None:
        self.schema = schema
        feature = "contextledger serve with a redis:// store"
        # Two clients that never retry a command, like every store's (see contextledger._redis):
        # the histories and the registry use the asyncio one, the fact stores the synchronous one.
        self._redis = open_redis(url, feature=feature, asynchronous=True)
        self._redis_sync = open_redis(url, feature=feature, asynchronous=False)
        self._client: Any = self._redis.client
        self._failures = RedisFailures(
            self._redis,
            unavailable=HistoryUnavailableError,
            foreign=HistoryCorruptError,
            holds="a session of contextledger serve",
            remedy="choose another namespace",
        )
        self._leases = RedisLeases(self._client, self._failures, lease_seconds=lease_seconds)
        self.history: HistoryProvider = RedisHistoryProvider(
            namespace=namespace, source_id="serve", client=self._client, fence=self._leases.fence, replicas=replicas
        )
        self.namespace = namespace
        self._lock_timeout = lock_timeout
        self._locks = LocalLocks()

    def _key(self, kind: str, key: str) -> str:
        return self._redis.key(self.namespace, kind, session=key)

    async def create(self, key: str) -> bool:
        created = datetime.now(timezone.utc).isoformat()
        registered = self._key("session", key)
        with self._failures.mapped(f"register session {key!r}", registered):
            return bool(await self._client.set(registered, created, nx=True))

    async def exists(self, key: str) -> bool:
        registered = self._key("session", key)
        with self._failures.mapped(f"look up session {key!r}", registered):
            return bool(await self._client.exists(registered))

    async def delete(self, key: str) -> bool:
        registered = self._key("session", key)
        with self._failures.mapped(f"delete session {key!r}", registered):
            existed = bool(await self._client.delete(registered))
        await self.history.clear(key)
        await self.run_facts(self.facts(key).forget)
        return existed

    def lock(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._hold(key)

    @contextlib.asynccontextmanager
    async def _hold(self, key: str) -> AsyncIterator[None]:
        lock_key = self._key("lock", key)
        async with (
            self._locks.hold(key, self._lock_timeout) as remaining,
            self._leases.hold(key, lock_key, remaining, self._lock_timeout),
        ):
            yield

    def facts(self, key: str) -> FactMemory:
        return RedisFactStore(self._redis_sync.client, owner=key, namespace=self.namespace, schema=self.schema)

    async def run_facts(self, operation: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(operation)

    async def ready(self) -> None:
        with self._failures.mapped("answer PING", self.namespace):
            await self._client.ping()

    async def close(self) -> None:
        await self.history.close()
        await self._redis.aclose()
        self._redis_sync.close()


def open_sessions(
    store: str,
    *,
    namespace: str,
    lock_timeout: float,
    lock_lease: float,
    schema: FactSchema = DEFAULT_SCHEMA,
    redis_replicas: int | None = None,
) -> Sessions:
    """The backend ``store`` names: ``sqlite:PATH``, a ``redis://`` or a ``postgresql://`` URL; ``schema``,
    the facts' keys and bounds in every session; ``lock_lease``, the shared lock's lease in seconds."""
    if store.startswith("sqlite:"):
        return SQLiteSessions(store.removeprefix("sqlite:"), lock_timeout=lock_timeout, schema=schema)
    if is_postgres_url(store):
        from contextledger.serve._postgres import PostgresSessions  # noqa: PLC0415  (its own module, loaded when used)

        return PostgresSessions(
            store, namespace=namespace, lock_timeout=lock_timeout, lease_seconds=lock_lease, schema=schema
        )
    return RedisSessions(
        store,
        namespace=namespace,
        lock_timeout=lock_timeout,
        lease_seconds=lock_lease,
        schema=schema,
        replicas=redis_replicas,
    )
