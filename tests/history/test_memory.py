"""The in-memory store is shared safely by threads, each running its own event loop."""

from __future__ import annotations

import asyncio
import threading

from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import Message


def test_threads_appending_at_once_lose_nothing() -> None:
    history = InMemoryHistoryProvider()
    threads, per_thread = 8, 200
    start = threading.Barrier(threads)

    def writer(name: int) -> None:
        async def append_all() -> None:
            for number in range(per_thread):
                await history.append("shared", [Message.user(f"{name} {number}")])

        start.wait()
        asyncio.run(append_all())

    workers = [threading.Thread(target=writer, args=(name,)) for name in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    stored = [tuple(map(int, message.text.split())) for message in asyncio.run(history.load("shared"))]
    assert len(stored) == threads * per_thread
    for name in range(threads):
        assert [number for writer_name, number in stored if writer_name == name] == list(range(per_thread))


def test_a_reasoning_only_message_keeps_its_shape() -> None:
    # The in-memory store keeps what a durable store would read back, so switching stores
    # cannot change what an agent sees.
    message = Message.assistant(reasoning="only reasoning")
    history = InMemoryHistoryProvider(source_id="scratch")

    async def scenario() -> list[Message]:
        await history.append("s", [message])
        return await history.load("s")

    (loaded,) = asyncio.run(scenario())
    assert loaded == message
    assert loaded.is_reasoning_only
    assert history.source_id == "scratch"
