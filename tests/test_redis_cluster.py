"""The throwaway Redis Cluster the cluster-mode tests run against (tests/redis_cluster.py): it
serves keys across its masters, keeps a hash tag's keys on one master, and survives the loss of
a master once its replica is promoted, as the cluster-mode stores will rely on."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("redis", reason="the 'redis' extra")

import redis
from redis.cluster import RedisCluster as ClusterClient

from tests.redis_cluster import RedisCluster, started_redis_cluster

pytestmark = pytest.mark.redis


def test_the_cluster_serves_keys_on_every_master_and_a_hash_tag_on_one(redis_cluster: RedisCluster) -> None:
    assert redis_cluster.url == f"redis+cluster://127.0.0.1:{redis_cluster.ports[0]}/0"
    assert len(redis_cluster.ports) == 6
    assert len(redis_cluster.masters()) == 3
    client = ClusterClient.from_url(redis_cluster.seed_url, decode_responses=True)
    try:
        for number in range(100):
            client.set(f"smoke:{number}", str(number))
        assert [client.get(f"smoke:{number}") for number in range(100)] == [str(number) for number in range(100)]
        assert {redis_cluster.master_of(f"smoke:{number}") for number in range(100)} == set(redis_cluster.masters())
    finally:
        client.close()
    assert redis_cluster.master_of("{s1}:a") == redis_cluster.master_of("{s1}:b")


def test_a_killed_master_is_replaced_by_its_replica() -> None:
    # A cluster of its own: the session's must stay whole for the tests that share it.
    with started_redis_cluster() as cluster:
        master = cluster.master_of("{s1}:before")
        # Written on the master and confirmed by its replica (WAIT counts the writes of its own
        # connection, hence one pipeline): replication is asynchronous, and a write the replica
        # has not had yet is lost with the master.
        direct = redis.Redis(port=master, decode_responses=True)
        try:
            with direct.pipeline(transaction=False) as pipeline:
                pipeline.set("{s1}:before", "kept")
                pipeline.wait(1, 5000)
                _, replicas = pipeline.execute()
            assert replicas == 1
        finally:
            direct.close()
        cluster.kill(master)
        killed_at = time.monotonic()
        cluster.wait_until_ok(timeout=20)
        print(f"failover took {time.monotonic() - killed_at:.1f} s")
        assert master not in cluster.masters()
        assert len(cluster.masters()) == 3
        promoted = cluster.master_of("{s1}:before")
        assert promoted != master
        client = ClusterClient.from_url(f"redis://127.0.0.1:{cluster.alive[0]}/0", decode_responses=True)
        try:
            assert client.get("{s1}:before") == "kept"  # written before the kill, confirmed by the replica
            client.set("{s1}:after", "written")
            assert client.get("{s1}:after") == "written"
        finally:
            client.close()
