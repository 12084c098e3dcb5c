"""A SQLite history's version is read before every agent turn, so it is read without waiting.

The read happens on the caller's thread over a reader connection with no busy timeout; these
tests hold it to what a version must be whatever else holds the file: never stale after a
commit, never showing what is not committed, never blocking on another connection's write lock.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from contextledger.history import HistoryVersion, SQLiteHistoryProvider
from contextledger.messages import Message

TURN = [Message.user("hello"), Message.assistant("hi")]


def test_a_version_is_read_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "h.db"

    async def main() -> None:
        history = SQLiteHistoryProvider(path, busy_timeout=5)
        await history.append("s", TURN)
        assert await history.version("s") == HistoryVersion(0, 2)
        other = SQLiteHistoryProvider(path)
        await other.version("s")  # opens the file and creates its connection
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO contextledger_history (session_id, seq, body) VALUES ('s', 2, ?)",
            ('{"role": "user", "contents": [{"type": "text", "text": "not yet"}]}',),
        )
        started = time.perf_counter()
        seen = await asyncio.wait_for(history.version("s"), 1.0)
        waited = time.perf_counter() - started
        assert seen == HistoryVersion(0, 2)  # the uncommitted row is not counted
        assert waited < 0.5  # far below the 5 s busy timeout a waiting read would spend
        writer.execute("COMMIT")
        assert await history.version("s") == HistoryVersion(0, 3)  # the commit is seen at once
        writer.close()
        await history.close()
        await other.close()

    asyncio.run(main())


def test_versions_follow_every_kind_of_write_from_another_provider(tmp_path: Path) -> None:
    path = tmp_path / "h.db"

    async def main() -> None:
        reader, writer = SQLiteHistoryProvider(path), SQLiteHistoryProvider(path)
        await writer.append("s", TURN)
        assert await reader.version("s") == await writer.version("s") == HistoryVersion(0, 2)
        await writer.append_turn("s", "t1", TURN[:1], TURN[1:])
        assert await reader.version("s") == HistoryVersion(0, 4)
        rewritten = await writer.rewrite("s", 2, [Message.assistant("summary")], HistoryVersion(0, 4))
        assert rewritten == await reader.version("s") == HistoryVersion(1, 3)
        await writer.clear("s")
        assert await reader.version("s") == HistoryVersion(2, 0)
        await reader.close()  # a closed provider opens again on its next use
        assert await reader.version("s") == HistoryVersion(2, 0)
        await reader.close()
        await writer.close()

    asyncio.run(main())


def test_threads_reading_versions_at_once_all_get_the_right_one(tmp_path: Path) -> None:
    """Two event loops in two threads share one provider: one reads on its own thread, the other
    finds the reader busy and goes through the worker thread; both are right."""
    path = tmp_path / "h.db"
    history = SQLiteHistoryProvider(path)
    asyncio.run(history.append("s", TURN))
    results: list[HistoryVersion] = []

    def reads() -> None:
        async def many() -> None:
            for _ in range(200):
                results.append(await history.version("s"))

        asyncio.run(many())

    threads = [threading.Thread(target=reads) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [HistoryVersion(0, 2)] * 400
    asyncio.run(history.close())
