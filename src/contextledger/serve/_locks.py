"""How a session's requests are serialised: a lock per session in this process, and with Redis or
Postgres a lease on a key (a row) that every proxy process sharing the sessions respects.

The shared lock is a short lease (``--lock-lease``, 10 seconds by default) that a background task
renews every third of the lease for as long as the request holds it, a stream being relayed
included, and stops renewing when the request ends.  So a proxy killed while it holds a session
frees it within one lease, and a request that lasts longer than a lease keeps the session to
itself.  Renewing is a compare-and-set on the holder's token, so a holder that lost its lease (a
pause longer than the lease, Redis out of reach) never extends the lease of the one who took it;
and the holder's token fences its turn's write (see ``fence`` in
:class:`~contextledger.history.RedisHistoryProvider` and
:class:`~contextledger.history.PostgresHistoryProvider`): a turn whose lease passed to another
holder is refused by the store, with nothing written, instead of being stored beside the new
holder's turn.  :class:`Leases` holds that logic once; :class:`RedisLeases` (a key set with
``NX`` and ``PX``) and :class:`PostgresLeases` (a row of ``contextledger_locks`` with its expiry,
taken over only once that has passed) say how to take, renew and release a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from contextledger._redis import RedisFailures
from contextledger.exceptions import HistoryError, ProxyError

__all__ = ["Leases", "LocalLocks", "PostgresLeases", "RedisLeases", "busy"]

_log = logging.getLogger("uvicorn.error")  # the server's own log


def busy(waited: float) -> ProxyError:
    return ProxyError(
        f"another request to this session has been running for more than the lock timeout ({waited:g}s); "
        "nothing was stored, retry later (with the same Idempotency-Key, so the turn is stored at most once)",
        status=409,
        error_type="conflict_error",
        code="session_busy",
    )


class LocalLocks:
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


class Leases:
    """The leases this process holds on shared session locks (see the module docstring).

    Within the process a session is held by one request at a time (the caller queues its requests
    on a :class:`LocalLocks` first), so :meth:`fence` knows the one token a session's turn write
    must still find in its lock.  A store says how to :meth:`_take`, :meth:`_renew` and
    :meth:`_release` a lease, raising its ``HistoryError`` when it cannot be reached.
    """

    def __init__(self, *, lease_seconds: float) -> None:
        self._lease = lease_seconds
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._held: dict[str, tuple[str, str]] = {}

    def fence(self, key: str) -> tuple[str, str] | None:
        """The lock key and token this process holds the session ``key`` with, if it holds it."""
        return self._held.get(key)

    async def _take(self, lock_key: str, token: str) -> bool:
        """Take the lock with ``token`` for one lease if nobody holds it (or its lease ran out)."""
        raise NotImplementedError

    async def _renew(self, lock_key: str, token: str) -> bool:
        """Extend the lease if the lock still holds ``token``; whether it did."""
        raise NotImplementedError

    async def _release(self, lock_key: str, token: str) -> None:
        """Free the lock if it still holds ``token``."""
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def hold(self, key: str, lock_key: str, wait: float, lock_timeout: float) -> AsyncIterator[None]:
        """Take ``lock_key`` for the session ``key`` within ``wait`` seconds (409 naming
        ``lock_timeout`` after that), keep its lease renewed while the block runs, then release it."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + wait
        delay = 0.002
        while not await self._take(lock_key, token):
            if time.monotonic() >= deadline:
                raise busy(lock_timeout)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        self._held[key] = (lock_key, token)
        stop = asyncio.Event()
        renewal = asyncio.create_task(self._keep(lock_key, token, stop))
        try:
            yield
        finally:
            # Told twice: a store client that turns the cancellation into an error of its own
            # (closing its connection) would otherwise leave the renewal running, and the lease
            # renewed for ever after its holder is done.
            stop.set()
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            if self._held.get(key) == (lock_key, token):
                del self._held[key]
            # A lock left behind runs out with its lease; the request's own outcome matters more.
            with contextlib.suppress(HistoryError):
                await self._release(lock_key, token)

    async def _keep(self, lock_key: str, token: str, stop: asyncio.Event) -> None:
        """Extend the lease every third of it until ``stop`` is set (or the task cancelled), or
        until it is lost: taken by another holder, or not renewed for a whole lease (the store out
        of reach).  A lost lease is logged; the turn's fenced write is what keeps it from being stored."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._lease / 3)
            if stop.is_set():
                return
            try:
                held = await self._renew(lock_key, token)
            except HistoryError as error:
                if stop.is_set():
                    return
                if time.monotonic() - renewed < self._lease:
                    continue  # the lease still runs: try again at the next third
                _log.warning("the lease on %s could not be renewed within %gs: %s", lock_key, self._lease, error)
                return
            if not held:
                _log.warning("the lease on %s ran out and another holder may have taken it", lock_key)
                return
            renewed = time.monotonic()


# KEYS: the lock.  ARGV: the holder's token, the lease in milliseconds.  Only the holder extends it.
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
# Deletes the lock only if this holder still owns it (its lease may have run out and been taken).
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisLeases(Leases):
    """Leases on Redis keys: ``SET NX PX`` takes one, a script compares the token and renews or deletes."""

    def __init__(self, client: Any, failures: RedisFailures, *, lease_seconds: float) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self._client = client
        self._failures = failures

    async def _take(self, lock_key: str, token: str) -> bool:
        with self._failures.mapped(f"take the lock {lock_key!r}", lock_key):
            return bool(await self._client.set(lock_key, token, nx=True, px=self._lease_ms))

    async def _renew(self, lock_key: str, token: str) -> bool:
        with self._failures.mapped(f"renew the lease on {lock_key!r}", lock_key):
            return bool(await self._client.eval(_RENEW, 1, lock_key, token, self._lease_ms))

    async def _release(self, lock_key: str, token: str) -> None:
        with self._failures.mapped(f"release {lock_key!r}", lock_key):
            await self._client.eval(_RELEASE, 1, lock_key, token)


# A row per held lock; an expired row is taken over by the next writer (the row's lock makes two
# takers wait for each other, and a taker waits for a fenced turn write reading the row to commit).
_PG_TAKE = (
    "INSERT INTO {ns}.contextledger_locks AS l (lock_key, token, expires_at) "
    "VALUES (%s, %s, clock_timestamp() + %s * interval '1 millisecond') "
    "ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at "
    "WHERE l.expires_at <= clock_timestamp() RETURNING 1"
)
_PG_RENEW = (
    "UPDATE {ns}.contextledger_locks SET expires_at = clock_timestamp() + %s * interval '1 millisecond' "
    "WHERE lock_key = %s AND token = %s"
)
_PG_RELEASE = "DELETE FROM {ns}.contextledger_locks WHERE lock_key = %s AND token = %s"


class PostgresLeases(Leases):
    """Leases on rows of ``contextledger_locks``, through ``run(sql, parameters, action)``: one
    statement each, ``{ns}`` standing for the namespace; it returns the statement's row count."""

    def __init__(self, run: Callable[[str, tuple[Any, ...], str], Awaitable[int]], *, lease_seconds: float) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self._run = run

    async def _take(self, lock_key: str, token: str) -> bool:
        return await self._run(_PG_TAKE, (lock_key, token, self._lease_ms), f"take the lock {lock_key!r}") == 1

    async def _renew(self, lock_key: str, token: str) -> bool:
        return await self._run(_PG_RENEW, (self._lease_ms, lock_key, token), f"renew the lease on {lock_key!r}") == 1

    async def _release(self, lock_key: str, token: str) -> None:
        await self._run(_PG_RELEASE, (lock_key, token), f"release {lock_key!r}")
