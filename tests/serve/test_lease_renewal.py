"""A lease stops being renewed when its holder is done, whatever the store's client does with the
cancellation of a renewal in flight.

Some store clients answer a cancelled command by closing their connection and raising an error of
their own rather than the cancellation.  A renewal that took that for a store failure (and the
lease still running, tried again) would renew the lease for ever after its request ended, and
every other proxy process waiting for the session would time out.  Here a real Redis holds the
lock; the client in front of it turns a cancelled renewal into a Redis ``ConnectionError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.history.support import RedisServer
from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis
    import redis.asyncio

    from contextledger._redis import RedisFailures, open_redis
    from contextledger.exceptions import HistoryCorruptError, HistoryUnavailableError
    from contextledger.serve._locks import RedisLeases

pytestmark = [redis_extra.skip, pytest.mark.redis]

LEASE = 0.3


class CancelledAsError:
    """The real client, except that the first renewal is slow and its cancellation comes out as a
    ``ConnectionError`` (the connection closed under the command)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.renewing = asyncio.Event()
        self.renewals = 0

    async def set(self, *args: Any, **options: Any) -> Any:
        return await self._client.set(*args, **options)

    async def get(self, key: str) -> Any:
        return await self._client.get(key)

    async def eval(self, script: str, *args: Any) -> Any:
        if "PEXPIRE" in script:
            self.renewals += 1
            if not self.renewing.is_set():
                self.renewing.set()
                try:
                    await asyncio.sleep(LEASE)
                except asyncio.CancelledError:
                    raise redis.ConnectionError("Connection closed by server.") from None
        return await self._client.eval(script, *args)


def test_a_renewal_cancelled_into_a_store_error_still_ends_with_its_holder(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        connection = open_redis(redis_server.url, feature="lease test", asynchronous=True)
        failures = RedisFailures(
            connection,
            unavailable=HistoryUnavailableError,
            foreign=HistoryCorruptError,
            holds="a lease test",
            remedy="choose another key",
        )
        client = CancelledAsError(connection.client)
        leases = RedisLeases(client, failures, lease_seconds=LEASE)
        lock_key = "lease-test:renewal-cancelled"
        holding = leases.hold("session", lock_key, wait=1.0, lock_timeout=1.0)
        await holding.__aenter__()
        assert await client.get(lock_key) is not None
        await asyncio.wait_for(client.renewing.wait(), 5)  # a renewal is in flight
        # The holder is done while the renewal runs: the lease is released, not renewed on.
        exiting = asyncio.ensure_future(holding.__aexit__(None, None, None))
        done, _ = await asyncio.wait({exiting}, timeout=5 * LEASE)
        if exiting not in done:
            exiting.cancel()
            pytest.fail("the holder's exit waited for a renewal that went on renewing")
        renewals = client.renewals
        assert await client.get(lock_key) is None
        await asyncio.sleep(3 * LEASE)
        assert client.renewals == renewals  # nothing renews it any more
        assert leases.fence("session") is None
        await connection.client.aclose()

    asyncio.run(scenario())
