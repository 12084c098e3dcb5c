"""One scenario list for every host that writes a turn, on every store: they all go through the one
turn writer (:func:`contextledger.history.write_turn`), so they all keep its promises.

The hosts: the agent runtime, the proxy, the Agent Framework history adapter and
:class:`ReducedHistoryProvider` (see ``turn_writers.py``); the stores: memory, SQLite and Redis.
The promises: a turn id is stored once (a retry writes nothing and hands back the stored reply);
a turn and the reduction of the retained history it brings about are one atomic write; a
reduced history never starts in the middle of a turn; a host that keeps a copy of the history
does not read the store's messages again for its own turns.  Kill and retry, with real processes,
is in ``test_turn_writer_kills.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from contextledger.history import HistoryProvider
from contextledger.messages import Message
from tests.history.support import Backend, RedisServer
from tests.history.turn_writers import RETAIN_GROUPS, WRITERS, Writer, make_writer

TURNS = 8


@pytest.fixture(params=WRITERS)
def writer_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def registry(backend: Backend, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the proxy keeps its sessions' registry: Redis beside a Redis history, else a SQLite file."""
    if backend.name == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server.url
    return f"sqlite:{tmp_path / 'registry.db'}"


def play(
    backend: Backend, name: str, registry: str, *, retain: bool, scenario: Callable[[Writer], Awaitable[None]]
) -> None:
    async def main(history: HistoryProvider) -> None:
        writer = make_writer(name, history, retain=retain, registry=registry)
        try:
            await scenario(writer)
        finally:
            await writer.close()

    backend.run(main)


def texts(messages: list[Message]) -> list[str]:
    return [f"{m.role}:{m.text}" for m in messages]


def starts_at_a_turn(messages: list[Message]) -> bool:
    return next((m.role for m in messages if m.role != "system"), "user") == "user"


@pytest.mark.parametrize("retain", [False, True], ids=["whole", "retained"])
def test_a_retried_turn_id_stores_nothing_and_hands_back_the_stored_reply(
    backend: Backend, writer_name: str, registry: str, retain: bool
) -> None:
    async def scenario(writer: Writer) -> None:
        key = writer.key("s-once")
        stored, first = await writer.turn("s-once", "t-1", "hello")
        assert stored
        assert first.endswith(": hello")
        history = await writer.history.inner.load(key)
        version = await writer.history.inner.version(key)
        again, reply = await writer.turn("s-once", "t-1", "hello")
        assert (again, reply) == (False, first)
        assert await writer.history.inner.load(key) == history
        assert await writer.history.inner.version(key) == version  # nothing was written
        recorded = await writer.history.inner.load_turns(key)
        assert [turn.turn_id for turn in recorded] == ["t-1"]
        stored, nxt = await writer.turn("s-once", "t-2", "next")
        assert stored
        assert nxt.endswith(": next")
        assert texts(await writer.history.inner.load(key))[-2:] == ["user:next", f"assistant:{nxt}"]

    play(backend, writer_name, registry, retain=retain, scenario=scenario)


def test_each_turn_and_its_reduction_are_one_write_and_no_history_starts_mid_turn(
    backend: Backend, writer_name: str, registry: str
) -> None:
    async def scenario(writer: Writer) -> None:
        key = writer.key("s-reduced")
        for number in range(TURNS):
            before = len(writer.history.writes())
            stored, reply = await writer.turn("s-reduced", f"t-{number}", f"question {number}")
            assert stored
            writes = writer.history.writes()[before:]
            # One store operation a turn: the turn alone, or the turn with the reduction it brought about.
            assert writes in (["append_turn"], ["rewrite_and_append_turn"]), writes
            history = await writer.history.inner.load(key)
            assert starts_at_a_turn(history), texts(history)
            assert texts(history)[-2:] == [f"user:question {number}", f"assistant:{reply}"]
            assert len(history) <= RETAIN_GROUPS  # the window held, every turn
        # The window of three groups cuts each new turn's predecessor in two; what it left of it
        # (its answer) went with the same write, so the history is always the newest turn alone.
        assert len(await writer.history.inner.load(key)) == 2
        assert "rewrite_and_append_turn" in writer.history.writes()

    play(backend, writer_name, registry, retain=True, scenario=scenario)


@pytest.mark.parametrize("retain", [False, True], ids=["whole", "retained"])
def test_a_host_keeps_its_copy_and_reads_the_store_only_when_someone_else_wrote(
    backend: Backend, writer_name: str, registry: str, retain: bool
) -> None:
    async def scenario(writer: Writer) -> None:
        key = writer.key("s-kept")
        await writer.turn("s-kept", "t-0", "first")
        loads = writer.history.loads()
        for number in range(1, TURNS):
            await writer.turn("s-kept", f"t-{number}", f"question {number}")
        assert writer.history.loads() == loads  # its own turns and reductions never made it read
        # Another writer on the same store: the next turn reads what it stored, once.
        await writer.history.inner.append_turn(key, "elsewhere", [Message.user("from elsewhere")], [])
        await writer.turn("s-kept", "t-last", "last")
        assert writer.history.loads() == loads + 1
        stored = texts(await writer.history.inner.load(key))
        assert stored[-2][:9] == "user:last"
        if not retain:
            assert "user:from elsewhere" in stored
            assert len(stored) == 2 * TURNS + 3

    play(backend, writer_name, registry, retain=retain, scenario=scenario)


def test_every_writer_leaves_the_same_history(backend: Backend, registry: str) -> None:
    """The four hosts, given the same turns, store the same messages: one path, one result."""
    results: dict[str, list[str]] = {}
    for name in WRITERS:

        async def scenario(writer: Writer, name: str = name) -> None:
            for number in range(TURNS):
                await writer.turn(f"s-same-{name}", f"t-{number}", f"question {number}")
            results[name] = texts(await writer.history.inner.load(writer.key(f"s-same-{name}")))

        play(backend, name, registry, retain=True, scenario=scenario)
    assert len({tuple(history) for history in results.values()}) == 1, results
