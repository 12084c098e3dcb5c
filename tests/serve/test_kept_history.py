"""A proxy in session mode keeps each session's history between requests: with a retain strategy
that reduces the stored history on every turn, a session at 1,000 stored turns is read from the
store once, by its first turn here, and never again for this process's own turns.

Counted where it cannot be faked: a real ``contextledger serve`` process on a real Redis, whose
``INFO commandstats`` counts the ``LRANGE`` commands (a history load is one; nothing else in a
turn reads the list).
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import uuid

import pytest
from tests.history.conftest import own_redis_server  # noqa: F401  (a redis-server for this test alone)
from tests.history.support import RedisServer
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, StartProxy

from contextledger.history import RedisHistoryProvider
from contextledger.messages import Message
from contextledger.serve._sessions import session_key
from contextledger.serve._tenants import tenant_of

with try_import("redis") as redis_extra:
    import redis

pytestmark = [redis_extra.skip, pytest.mark.redis]

KEY = "sk-kept-history-tenant"
STORED_TURNS = 1_000
NAMESPACE = "contextledger-serve"  # the proxy's default


def history_reads(server: RedisServer) -> int:
    """How many LRANGE commands the server has run (its whole life, every client)."""
    client = redis.Redis.from_url(server.url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return int(stats.get("cmdstat_lrange", {}).get("calls", 0))


def fill(server: RedisServer, key: str) -> None:
    async def write() -> None:
        history = RedisHistoryProvider(server.url, namespace=NAMESPACE, source_id="serve")
        turns = [[Message.user(f"stored {n}"), Message.assistant(f"echo: stored {n}")] for n in range(STORED_TURNS)]
        await history.append(key, [message for turn in turns for message in turn])
        await history.close()

    asyncio.run(write())


def stored_length(server: RedisServer, key: str) -> int:
    async def read() -> int:
        history = RedisHistoryProvider(server.url, namespace=NAMESPACE, source_id="serve")
        try:
            return (await history.version(key)).length
        finally:
            await history.close()

    return asyncio.run(read())


def test_a_session_turn_at_1000_stored_turns_does_not_read_the_history_again(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    own_redis_server: tuple[RedisServer, subprocess.Popen[bytes]],  # noqa: F811
) -> None:
    server, _ = own_redis_server
    session = f"long-{uuid.uuid4().hex[:8]}"
    key = session_key(tenant_of({"authorization": f"Bearer {KEY}"}, trust_tenant_header=False), session)
    # A window of as many groups as are stored: each new turn pushes the oldest one out, so every
    # turn rewrites the retained history.
    retain = (
        "--retain-strategy",
        "sliding-window",
        "--retain-param",
        f"keep_last_groups={2 * STORED_TURNS}",
        "--retain-param",
        "stable_step=1",
    )
    with start_proxy("--store", server.url, "--no-facts", *retain) as proxy:
        proxy.create_session(session, KEY)
        fill(server, key)
        headers = {"X-Contextledger-Session": session}
        reads = [history_reads(server)]
        for number in range(11):
            turn = {"model": "fake", "messages": [{"role": "user", "content": f"question {number}"}]}
            status, body = proxy.call("POST", "/v1/chat/completions", turn, KEY, headers)
            assert status == 200, body
            reads.append(history_reads(server))
            sent = fake_upstream.last_body()["messages"]
            # The request carries the retained history as it stands: the window, then the question.
            assert len(sent) == 2 * STORED_TURNS + 1
            assert sent[-1]["content"] == f"question {number}"
            if number:
                assert sent[-3:-1] == [
                    {"role": "user", "content": f"question {number - 1}"},
                    {"role": "assistant", "content": f"echo: question {number - 1}"},
                ]
            assert sent[0]["content"] == f"stored {number}"  # the oldest turn leaves with each turn
        per_turn = [after - before for before, after in itertools.pairwise(reads)]
        assert per_turn == [1] + [0] * 10, per_turn
        assert stored_length(server, key) == 2 * STORED_TURNS
