"""A turn confirmed only once a replica has it (``WAIT``): on by default on a Redis Cluster, off on
a single server, and a turn the replicas did not confirm in time is reported as not confirmed
(stored once or not at all, settled by a retry with its turn id), never as stored."""

from __future__ import annotations

import asyncio

import pytest

from contextledger.exceptions import ConfigurationError, TurnOutcomeUnknownError
from contextledger.history import RedisHistoryProvider
from contextledger.messages import Message
from tests.history.support import RedisServer
from tests.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis

TURN = ([Message.user("hello")], [Message.assistant("hi")])


def test_a_cluster_waits_for_one_replica_by_default_and_a_single_server_for_none(
    redis_cluster: RedisCluster, redis_server: RedisServer
) -> None:
    async def scenario() -> None:
        clustered = RedisHistoryProvider(redis_cluster.url, namespace="acks-default")
        single = RedisHistoryProvider(redis_server.url, namespace="acks-default")
        try:
            assert (clustered.replicas, single.replicas) == (1, 0)
            for session in ("a", "b", "c", "d"):  # sessions on several masters
                assert await clustered.append_turn(session, "t-1", *TURN)
                assert await clustered.load(session) == [*TURN[0], *TURN[1]]
            assert await single.append_turn("a", "t-1", *TURN)
        finally:
            await clustered.close()
            await single.close()

    asyncio.run(scenario())


def test_a_turn_more_replicas_than_exist_did_not_confirm_is_not_reported_stored(
    redis_cluster: RedisCluster, redis_server: RedisServer
) -> None:
    async def scenario() -> None:
        for url in (redis_cluster.url, redis_server.url):
            wanting = RedisHistoryProvider(url, namespace="acks-missing", replicas=2, replica_timeout=0.2)
            try:
                with pytest.raises(TurnOutcomeUnknownError, match="replicas"):
                    await wanting.append_turn("s", "t-1", *TURN)
                # It reached the master: the retry the error asks for finds it, once.
                assert not await wanting.append_turn("s", "t-1", *TURN)
                assert await wanting.load("s") == [*TURN[0], *TURN[1]]
                stored = await wanting.load_turn("s", "t-1")
                assert stored is not None
            finally:
                await wanting.clear("s")
                await wanting.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("value", "name"), [(-1, "replicas"), (True, "replicas"), (0, "replica_timeout")])
def test_bad_replica_settings_are_refused(redis_server: RedisServer, value: object, name: str) -> None:
    options = {"replicas": value} if name == "replicas" else {"replica_timeout": value}
    with pytest.raises(ConfigurationError, match=name):
        RedisHistoryProvider(redis_server.url, **options)  # type: ignore[arg-type]
