"""A Redis history fenced by a lock stores a turn only while the lock holds the writer's token,
checked by the script that writes it: a writer whose lease passed to another writes nothing."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from contextledger.exceptions import HistoryError, LeaseLostError
from contextledger.history import HistoryVersion, RedisHistoryProvider
from contextledger.messages import Message
from tests.history.support import RedisServer
from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis.asyncio

pytestmark = [redis_extra.skip, pytest.mark.redis]

LOCK = "fence-test-lock"


def question(number: int) -> list[Message]:
    return [Message.user(f"question {number}")]


def answer(number: int) -> list[Message]:
    return [Message.assistant(f"answer {number}")]


@pytest.mark.parametrize("with_rewrite", [False, True], ids=["append", "rewrite-and-append"])
def test_a_turn_is_stored_only_while_the_lock_holds_the_writers_token(
    redis_server: RedisServer, with_rewrite: bool
) -> None:
    namespace, session = f"fence-{uuid.uuid4().hex[:8]}", "s"
    lock = f"{namespace}:{LOCK}"
    held: dict[str, tuple[str, str]] = {}

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        history = RedisHistoryProvider(namespace=namespace, client=client, fence=held.get)

        async def write(number: int) -> bool:
            if not with_rewrite:
                return await history.append_turn(session, f"t{number}", question(number), answer(number))
            version = await history.version(session)
            written = await history.rewrite_and_append_turn(
                session, 0, [], HistoryVersion(version.generation, version.length), f"t{number}",
                question(number), answer(number),
            )  # fmt: skip
            return written.stored

        try:
            await client.set(lock, "mine")
            held[session] = (lock, "mine")
            assert await write(1)
            await client.set(lock, "theirs")  # the lease ran out and another writer took it
            before = await history.load(session)
            with pytest.raises(LeaseLostError, match="no longer holds") as refused:
                await write(2)
            assert isinstance(refused.value, HistoryError)  # nothing was written, as every HistoryError says
            await client.delete(lock)  # ran out and nobody took it: still not this writer's
            with pytest.raises(LeaseLostError):
                await write(3)
            assert await history.load(session) == before
            assert await history.load_turn(session, "t2") is None
            del held[session]  # a writer holding no lock writes unfenced, as before
            assert await write(4)
            assert [m.text for m in await history.load(session)][-2:] == ["question 4", "answer 4"]
        finally:
            await history.close()
            await client.aclose()

    asyncio.run(scenario())
