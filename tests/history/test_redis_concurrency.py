"""Two processes appending to one Redis session lose, duplicate and reorder nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contextledger.history import RedisHistoryProvider
from contextledger.messages import Message
from tests.history.support import RedisServer, append_together, appender_command, turn_number

pytestmark = pytest.mark.redis


def test_two_processes_append_1000_messages_each(redis_server: RedisServer) -> None:
    namespace = f"concurrency-{uuid.uuid4().hex[:12]}"
    per_process = 1000
    commands = [
        appender_command(
            "redis", redis_server.url, "shared", tag, turns=per_process, namespace=namespace, wait_for_go=True
        )
        for tag in "pq"
    ]
    append_together(commands, turns=per_process)

    async def read() -> list[Message]:
        history = RedisHistoryProvider(redis_server.url, namespace=namespace)
        try:
            return await history.load("shared")
        finally:
            await history.close()

    stored = [turn_number(message) for message in asyncio.run(read())]
    assert len(stored) == 2 * per_process
    assert len(set(stored)) == len(stored), "a message was stored twice"
    for tag in "pq":
        assert [number for writer, number in stored if writer == tag] == list(range(per_process))
