"""Processes appending to one Redis session lose, duplicate and reorder nothing: two at once, a
writer killed and restarted, a server stopped again and again under a writer that retries."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid

import pytest

from contextledger.history import RedisHistoryProvider
from contextledger.messages import Message
from tests.history.support import (
    RedisServer,
    append_together,
    appender_command,
    assert_each_turn_once,
    kill_mid_burst,
    run_to_the_end,
    running,
    turn_number,
)

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


def load(url: str, namespace: str, session: str) -> list[Message]:
    async def read() -> list[Message]:
        history = RedisHistoryProvider(url, namespace=namespace)
        try:
            return await history.load(session)
        finally:
            await history.close()

    return asyncio.run(read())


def test_a_writer_killed_and_restarted_stores_every_turn_once(redis_server: RedisServer) -> None:
    namespace = f"kill-{uuid.uuid4().hex[:12]}"
    command = appender_command(
        "redis", redis_server.url, "burst", "w", turns=10_000_000, turn_size=3, namespace=namespace, turn_ids=True
    )
    acknowledged = kill_mid_burst(command, 300)
    resend_from = max(0, len(acknowledged) - 5)
    total = len(acknowledged) + 20
    resent = run_to_the_end(
        appender_command(
            "redis",
            redis_server.url,
            "burst",
            "w",
            turns=total - resend_from,
            turn_size=3,
            namespace=namespace,
            turn_ids=True,
            start=resend_from,
        )
    )
    assert resent == list(range(resend_from, total))
    assert_each_turn_once(load(redis_server.url, namespace, "burst"), "w", total, 3)


def test_a_server_stopped_again_and_again_during_a_burst_stores_every_turn_once(
    own_redis_server: tuple[RedisServer, subprocess.Popen[bytes]],
) -> None:
    """The writer's socket_timeout is shorter than each stop, so turns time out with an unknown
    outcome (or find the server unreachable) and are retried under their turn ids."""
    server, process = own_redis_server
    namespace = f"stop-{uuid.uuid4().hex[:12]}"
    turns = 400
    command = appender_command(
        "redis",
        server.url,
        "burst",
        "w",
        turns=turns,
        turn_size=3,
        namespace=namespace,
        turn_ids=True,
        retry_for=30,
        socket_timeout=0.1,
    )
    with running([command], timeout=90) as (child,):
        assert child.stdout is not None
        assert child.stderr is not None
        acknowledged = [int(child.stdout.readline()) for _ in range(20)]
        for _ in range(6):
            process.send_signal(signal.SIGSTOP)
            time.sleep(0.25)
            process.send_signal(signal.SIGCONT)
            acknowledged += [int(child.stdout.readline()) for _ in range(10)]
        acknowledged += [int(line) for line in child.stdout.read().split()]
        errors = child.stderr.read()
        assert child.wait() == 0, errors
    assert "after TurnOutcomeUnknownError" in errors  # the stops did land in the middle of writes
    assert acknowledged == list(range(turns))
    assert_each_turn_once(load(server.url, namespace, "burst"), "w", turns, 3)
