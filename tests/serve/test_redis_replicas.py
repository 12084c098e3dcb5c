"""A Redis Cluster's replicas, read when ``contextledger serve`` starts: a plain cluster of three
masters and no replica (a common first deployment) answers its session turns 200, its turns
confirmed by their master alone as the start-up banner says; asked for more replicas than the
store has, the proxy waits as asked and its banner names ``--redis-replicas``; a cluster with a
replica per master is waited for as before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.optional_imports import try_import
from tests.redis_cluster import RedisCluster, started_redis_cluster
from tests.serve.conftest import StartProxy

from contextledger.serve import ServeConfig
from contextledger.serve._config import with_store_replicas

with try_import("serve") as serve_extra:
    import httpx

pytestmark = [serve_extra.skip, pytest.mark.redis]

KEY = "sk-replicas-0123456789"


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[RedisCluster]:
    """Three masters, no replica."""
    with started_redis_cluster(masters=3, replicas=0) as cluster:
        yield cluster


def turns(base_url: str, session: str, count: int) -> list[int]:
    headers = {"authorization": f"Bearer {KEY}"}
    created = httpx.post(base_url + "/contextledger/sessions", json={"id": session}, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    statuses = []
    for turn in range(count):
        body = {"model": "fake", "messages": [{"role": "user", "content": f"turn {turn}"}], "stream": turn % 2 == 1}
        answer = httpx.post(
            base_url + "/chat/completions",
            json=body,
            headers={**headers, "x-contextledger-session": session},
            timeout=30,
        )
        statuses.append(answer.status_code)
        if answer.status_code == 200 and turn % 2 == 1:
            assert "turn_outcome_unknown" not in answer.text, answer.text
    return statuses


def test_a_cluster_without_replicas_answers_its_session_turns(
    bare_cluster: RedisCluster, start_proxy: StartProxy
) -> None:
    session = f"bare-{uuid.uuid4().hex}"
    with start_proxy("--store", bare_cluster.url) as proxy:
        assert turns(proxy.base_url, session, 6) == [200] * 6
        stored = httpx.get(
            proxy.base_url + f"/contextledger/sessions/{session}/messages", headers={"authorization": f"Bearer {KEY}"}
        )
        assert len(stored.json()["data"]) == 12
        banner = proxy.log.read_text()
        assert "a turn is confirmed by its master alone: the Redis Cluster has no replicas" in banner


def test_more_replicas_than_the_cluster_has_are_waited_for_as_asked_and_said(
    bare_cluster: RedisCluster, start_proxy: StartProxy
) -> None:
    """Asked for outright (a cluster that has just failed over gets its replica back), the wait is
    kept; the banner says the turns will be answered 503 until then, and names the flag."""
    with start_proxy("--store", bare_cluster.url, "--redis-replicas", "1") as proxy:
        banner = proxy.log.read_text()
        assert "the Redis Cluster has 0 for some master now" in banner
        assert "--redis-replicas 0 confirms by the master alone" in banner
        session = f"asked-{uuid.uuid4().hex}"
        assert turns(proxy.base_url, session, 1) == [503]


def test_a_cluster_with_replicas_is_waited_for(redis_cluster: RedisCluster, start_proxy: StartProxy) -> None:
    with start_proxy("--store", redis_cluster.url) as proxy:
        assert turns(proxy.base_url, f"waited-{uuid.uuid4().hex}", 2) == [200, 200]
        assert "a turn is confirmed once 1 replica(s) have it" in proxy.log.read_text()


def test_a_store_that_cannot_be_asked_keeps_what_was_configured() -> None:
    def unreachable(url: str) -> int:
        raise ConnectionError("refused")

    config = ServeConfig("http://127.0.0.1:9/v1", store="redis+cluster://127.0.0.1:9")
    settled, said = with_store_replicas(config, unreachable)
    assert settled.redis_replicas == 1
    assert said is not None
    assert "--redis-replicas 0" in said
    single = ServeConfig("http://127.0.0.1:9/v1", store="redis://127.0.0.1:9")
    assert with_store_replicas(single, unreachable) == (single, None), "a single server waits for none, unasked"
    asked = ServeConfig("http://127.0.0.1:9/v1", store="redis://127.0.0.1:9", redis_replicas=2)
    kept, said = with_store_replicas(asked, lambda url: 1)
    assert kept.redis_replicas == 2
    assert said is not None
    assert "--redis-replicas 1" in said
