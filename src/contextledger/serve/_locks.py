"""How a session's requests are serialised: a lock per session in this process, and with Redis a
lease on a key that every proxy process sharing the sessions respects.

The Redis lock is a short lease (``--lock-lease``, 10 seconds by default) that a background task
renews every third of the lease for as long as the request holds it, a stream being relayed
included, and stops renewing when the request ends.  So a proxy killed while it holds a session
frees it within one lease, and a request that lasts longer than a lease keeps the session to
itself.  Renewing is a compare-and-set on the holder's token, so a holder that lost its lease (a
pause longer than the lease, Redis out of reach) never extends the lease of the one who took it;
and the holder's token fences its turn's write (see ``fence`` in
:class:`~contextledger.history.RedisHistoryProvider`): a turn whose lease passed to another
holder is refused by the store, with nothing written, instead of being stored beside the new
holder's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from contextledger._redis import RedisFailures
from contextledger.exceptions import HistoryError, ProxyError

__all__ = ["LocalLocks", "RedisLeases", "busy"]

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


# KEYS: the lock.  ARGV: the holder's token, the lease in milliseconds.  Only the holder extends it.
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
# Deletes the lock only if this holder still owns it (its lease may have run out and been taken).
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisLeases:
    """The leases this process holds on session locks in Redis (see the module docstring).

    Within the process a session is held by one request at a time (the caller queues its requests
    on a :class:`LocalLocks` first), so :meth:`fence` knows the one token a session's turn write
    must still find in its lock.
    """

    def __init__(self, client: Any, failures: RedisFailures, *, lease_seconds: float) -> None:
        self._client = client
        self._failures = failures
        self._lease = lease_seconds
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._held: dict[str, tuple[str, str]] = {}

    def fence(self, key: str) -> tuple[str, str] | None:
        """The lock key and token this process holds the session ``key`` with, if it holds it."""
        return self._held.get(key)

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
        renewal = asyncio.create_task(self._renew(lock_key, token))
        try:
            yield
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            if self._held.get(key) == (lock_key, token):
                del self._held[key]
            # A lock left behind runs out with its lease; the request's own outcome matters more.
            with contextlib.suppress(HistoryError), self._failures.mapped(f"release {lock_key!r}", lock_key):
                await self._client.eval(_RELEASE, 1, lock_key, token)

    async def _take(self, lock_key: str, token: str) -> bool:
        with self._failures.mapped(f"take the lock {lock_key!r}", lock_key):
            return bool(await self._client.set(lock_key, token, nx=True, px=self._lease_ms))

    async def _renew(self, lock_key: str, token: str) -> None:
        """Extend the lease every third of it until cancelled, or until it is lost: taken by another
        holder, or not renewed for a whole lease (Redis out of reach).  A lost lease is logged;
        the turn's fenced write is what keeps it from being stored."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                with self._failures.mapped(f"renew the lease on {lock_key!r}", lock_key):
                    held = await self._client.eval(_RENEW, 1, lock_key, token, self._lease_ms)
            except HistoryError as error:
                if time.monotonic() - renewed < self._lease:
                    continue  # the lease still runs: try again at the next third
                _log.warning("the lease on %s could not be renewed within %gs: %s", lock_key, self._lease, error)
                return
            if not held:
                _log.warning("the lease on %s ran out and another holder may have taken it", lock_key)
                return
            renewed = time.monotonic()
