"""Kill and retry, for every host that writes a turn through the one turn writer: a host killed
mid-burst (SIGKILL) and restarted a few turns before its last acknowledgement stores every turn
once, and a host that reduces its history leaves it reduced and starting at a turn.

The writer called directly runs the existing durability tests (``test_sqlite_durability.py``,
``test_redis_concurrency.py``); here the agent runtime, :class:`ReducedHistoryProvider` and the
Agent Framework adapter run in the same child process (``appender.py --writer``).  The proxy's
kill and retry is in ``tests/serve``.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from contextledger.history import HistoryProvider, PostgresHistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider
from tests.history.support import (
    RedisServer,
    appender_command,
    assert_each_turn_once,
    kill_mid_burst,
    run_to_the_end,
)
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

TURN_SIZE = 2


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """(backend, target, namespace) of an empty durable store."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "history.sqlite3"), "contextledger"
    if request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        return "postgres", postgres.url, f"kills-{uuid.uuid4().hex[:8]}"
    server: RedisServer = request.getfixturevalue("redis_server")
    return "redis", server.url, f"kills-{uuid.uuid4().hex[:8]}"


def opened(backend: str, target: str, namespace: str) -> HistoryProvider:
    if backend == "postgres":
        return PostgresHistoryProvider(target, namespace=namespace)
    return SQLiteHistoryProvider(target) if backend == "sqlite" else RedisHistoryProvider(target, namespace=namespace)


@pytest.mark.parametrize("writer", ["agent", "reduced", "maf"])
def test_a_host_killed_mid_burst_and_restarted_stores_every_turn_once(
    durable: tuple[str, str, str], writer: str
) -> None:
    if writer == "maf":
        pytest.importorskip(
            "agent_framework", reason="the maf extra is not installed: pip install 'contextledger[maf]'"
        )
    backend, target, namespace = durable
    reduces = writer != "agent"

    def command(turns: int, start: int = 0) -> list[str]:
        return appender_command(
            backend,
            target,
            "burst",
            "w",
            turns=turns,
            turn_size=TURN_SIZE,
            namespace=namespace,
            turn_ids=True,
            start=start,
            writer=writer,
            window=3,
        )

    acknowledged = kill_mid_burst(command(10_000_000), 60)
    resend_from = max(0, len(acknowledged) - 5)  # resends acknowledged turns and the one in flight
    total = len(acknowledged) + 10
    resent = run_to_the_end(command(total - resend_from, resend_from))
    assert resent == list(range(resend_from, total))

    async def read() -> None:
        history = opened(backend, target, namespace)
        try:
            stored = await history.load("burst")
            recorded = sorted(turn.turn_id for turn in await history.load_turns("burst"))
        finally:
            await history.close()
        assert recorded == sorted(f"w-{number}" for number in range(total))  # each turn id once
        if reduces:
            # A window of three groups keeps the newest turn alone: whole, and starting at its user message.
            assert [m.message_id for m in stored] == [f"w-{total - 1}-{index}" for index in range(TURN_SIZE)]
        else:
            assert_each_turn_once(stored, "w", total, TURN_SIZE)

    asyncio.run(read())
