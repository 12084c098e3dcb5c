"""A turn and the reduction of the retained history it brings about, written in one store operation.

With an ``after_strategy``, a tool turn used to cost two writes: the turn, then the rewrite of the
stored list the strategy made (the previous tool result collapsed).  A history that is a
:class:`TurnRewriter` now takes both in one atomic step.  These tests hold the result to the two-step
path on every backend (same stored history, same requests), count the writes, and check the cases
where one step is not possible: another writer in between, a second history, a reduction of the
turn's own messages.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextledger.agents import Agent, CompactionProvider, ContextProvider, RunContext
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import SlidingWindowStrategy, ToolResultCompactionStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.history import (
    HistoryProvider,
    InMemoryHistoryProvider,
    RedisHistoryProvider,
    SQLiteHistoryProvider,
    TurnRewriter,
)
from contextledger.messages import FunctionCallContent, Message
from tests.history.support import RedisServer

WRITES = ("append", "replace", "append_turn", "rewrite", "rewrite_and_append_turn", "undo_turn", "clear")


class Counted:
    """A history that counts the writes made to it and otherwise is the store it wraps."""

    def __init__(self, inner: HistoryProvider, *, one_step: bool = True) -> None:
        self.inner = inner
        self.source_id = inner.source_id
        self.one_step = one_step
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name == "rewrite_and_append_turn" and not self.one_step:
            raise AttributeError(name)  # a history that implements only HistoryProvider
        method = getattr(self.inner, name)
        if name not in WRITES:
            return method

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes.append(name)
            return await method(*args, **kwargs)

        return counted


def tool_model(during_call: Callable[[int], Awaitable[None]] | None = None) -> ScriptedChatClient:
    """Calls a tool on every question that starts with "Check", then answers; ``during_call(n)``,
    if given, runs inside the nth call first."""
    model = ScriptedChatClient(report_usage=False)
    tool_calls = itertools.count(1)

    async def reply(messages: Sequence[Message]) -> Message:
        if during_call is not None:
            await during_call(model.calls)
        last = messages[-1]
        if model.tools[-1] and last.role == "user" and last.text.startswith("Check"):
            return Message.assistant(calls=[FunctionCallContent(f"call_{next(tool_calls)}", "lookup", '{"item": "x"}')])
        return Message.assistant(f"answer {model.calls}")

    model.replies.append(reply)
    return model


def lookup(item: str) -> str:
    """A long report on an item."""
    return f"{item}: " + "report line. " * 40


def make_store(kind: str, directory: Path, name: str, redis: RedisServer | None) -> HistoryProvider:
    if kind == "memory":
        return InMemoryHistoryProvider()
    if kind == "sqlite":
        return SQLiteHistoryProvider(directory / f"{name}.sqlite3")
    assert redis is not None
    return RedisHistoryProvider(redis.url, namespace=f"turn-writes-{name}-{id(directory)}")


def build(history: HistoryProvider, *extra: Any, after: Any = None) -> tuple[Agent, ScriptedChatClient]:
    model = tool_model()
    compaction = CompactionProvider(
        before_strategy=SlidingWindowStrategy(keep_last_groups=6, stable_step=1),
        after_strategy=after or ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1),
        history_source_id=history.source_id,
    )
    return Agent(model, tools=[lookup], context_providers=[history, *extra, compaction]), model


QUESTIONS = [f"Check item {n}" if n % 3 != 2 else f"Thanks for item {n}" for n in range(14)]


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_kind(request: pytest.FixtureRequest) -> tuple[str, RedisServer | None]:
    redis = request.getfixturevalue("redis_server") if request.param == "redis" else None
    return request.param, redis


def test_each_turn_is_one_write_and_stores_what_two_writes_would(
    store_kind: tuple[str, RedisServer | None], tmp_path: Path
) -> None:
    kind, redis = store_kind

    async def scenario() -> None:
        one = Counted(make_store(kind, tmp_path, "one", redis))
        two = Counted(make_store(kind, tmp_path, "two", redis), one_step=False)
        assert isinstance(one, TurnRewriter)
        assert not isinstance(two, TurnRewriter)
        agent_one, model_one = build(one)
        agent_two, model_two = build(two)
        session_one, session_two = agent_one.create_session("s"), agent_two.create_session("s")
        for question in QUESTIONS:
            one.writes.clear()
            await agent_one.run(question, session=session_one)
            assert len(one.writes) == 1, one.writes  # the turn, and any reduction with it
            await agent_two.run(question, session=session_two)
            assert await one.load("s") == await two.load("s")
        assert model_one.requests == model_two.requests
        assert two.writes.count("rewrite") >= 8  # the reference did reduce, in a second write
        stored = await one.load("s")
        assert [m.role for m in stored].count("tool") == 1  # every older result collapsed
        assert len(await one.load_turns("s")) == len(QUESTIONS)
        for history in (one, two):
            await history.close()

    asyncio.run(scenario())


def test_another_writer_between_load_and_store_gets_no_stale_reduction(
    store_kind: tuple[str, RedisServer | None], tmp_path: Path
) -> None:
    kind, redis = store_kind

    async def scenario() -> None:
        store = make_store(kind, tmp_path, "shared", redis)
        # The other writer: the same store for memory, another connection for SQLite and Redis.
        other = store if kind == "memory" else make_store(kind, tmp_path, "shared", redis)
        history = Counted(store)
        compaction = CompactionProvider(
            after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1),
            history_source_id=history.source_id,
        )

        # Model calls 3 and 8: during a turn with no tool call (nothing to reduce) and during the
        # second call of a tool turn (whose reduction would have been written with it).
        async def interlude(call: int) -> None:  # another writer appends to the same session
            if call in (3, 8):
                await other.append("s", [Message.user(f"elsewhere {call}"), Message.assistant("noted")])

        model = tool_model(interlude)
        agent = Agent(model, tools=[lookup], context_providers=[history, compaction])
        session = agent.create_session("s")
        for number in range(8):
            await agent.run(f"Check item {number}" if number % 2 == 0 else f"Thanks {number}", session=session)
        stored = await store.load("s")
        texts = [m.text for m in stored]
        assert texts.count("elsewhere 3") == 1
        assert texts.count("elsewhere 8") == 1
        assert [m.role for m in stored].count("tool") == 1  # reduced again once the store was read anew
        turns = await store.load_turns("s")
        assert sorted(len(t.inputs) for t in turns) == [1] * 8  # each turn recorded once
        assert [m.text for m in stored if m.role == "user" and not m.text.startswith("elsewhere")] == [
            f"Check item {n}" if n % 2 == 0 else f"Thanks {n}" for n in range(8)
        ]
        await history.close()
        if other is not store:
            await other.close()

    asyncio.run(scenario())


def test_with_a_second_history_the_reduction_is_a_write_of_its_own() -> None:
    async def scenario() -> None:
        main, mirror = Counted(InMemoryHistoryProvider("main")), Counted(InMemoryHistoryProvider("mirror"))
        agent, _ = build(main, mirror)
        session = agent.create_session("s")
        for question in QUESTIONS[:6]:
            await agent.run(question, session=session)
        assert "rewrite_and_append_turn" not in main.writes
        assert main.writes.count("rewrite") >= 2
        assert [m.role for m in await main.load("s")].count("tool") == 1
        assert len(await mirror.load("s")) > len(await main.load("s"))  # the mirror keeps every turn whole

    asyncio.run(scenario())


def test_a_reduction_of_the_turns_own_messages_is_written_after_it() -> None:
    async def scenario() -> None:
        history = Counted(InMemoryHistoryProvider())
        # A window of one group drops everything but the last answer, and then that answer too
        # (a retained history never starts inside a turn): the turn's own messages change.
        agent, _ = build(history, after=SlidingWindowStrategy(keep_last_groups=1, stable_step=1))
        session = agent.create_session("s")
        for question in ("Thanks one", "Thanks two", "Thanks three"):
            history.writes.clear()
            await agent.run(question, session=session)
            assert history.writes == ["append_turn", "rewrite"]
            assert await history.load("s") == []

    asyncio.run(scenario())


class Reader(ContextProvider):
    """Reads the history the run was built on, before the model call and after the turn is stored."""

    def __init__(self) -> None:
        self.before: list[list[Message]] = []
        self.after: list[list[Message]] = []

    async def before_run(self, context: RunContext) -> None:
        self.before.append(context.messages_from("history"))

    async def after_run(self, context: RunContext) -> None:
        self.after.append(context.messages_from("history"))


def test_after_the_store_a_provider_still_reads_the_history_the_run_was_built_on() -> None:
    async def scenario() -> None:
        history = Counted(InMemoryHistoryProvider())
        reader = Reader()
        agent, _ = build(history, reader)
        session = agent.create_session("s")
        for question in QUESTIONS[:8]:
            await agent.run(question, session=session)
        assert "rewrite_and_append_turn" in history.writes
        assert reader.after == reader.before

    asyncio.run(scenario())


class KeepLastTurn(ContextProvider):
    """A provider of one's own: the stored history keeps only the newest turn, written with it."""

    source_id = "keep-last"

    def __init__(self) -> None:
        self.versions: list[object] = []

    async def before_store(self, context: RunContext) -> None:
        context.rewrite_with_turn("in_memory", 0, [])

    async def after_run(self, context: RunContext) -> None:
        self.versions.append(context.rewritten_with_turn("in_memory"))


def test_a_provider_of_ones_own_rewrites_the_history_with_the_turn() -> None:
    async def scenario() -> None:
        history = Counted(InMemoryHistoryProvider())
        keeper = KeepLastTurn()
        agent = Agent(tool_model(), context_providers=[history, keeper])
        session = agent.create_session("s")
        for question in ("one", "two", "three"):
            history.writes.clear()
            reply = await agent.run(question, session=session)
            assert history.writes == ["rewrite_and_append_turn"]
            assert await history.load("s") == [Message.user(question), *reply.messages]
        assert keeper.versions[-1] == await history.version("s")
        assert len(await history.load_turns("s")) == 3

    asyncio.run(scenario())


class BadRewrite(ContextProvider):
    def __init__(self, source_id: str, start: Any) -> None:
        self.target, self.start = source_id, start

    async def before_store(self, context: RunContext) -> None:
        context.rewrite_with_turn(self.target, self.start, [])


@pytest.mark.parametrize(
    ("source_id", "start", "match"),
    [
        ("archive", 0, "no history 'archive'"),
        ("in_memory", 3, "start must be an int from 0 to the 2 messages this run loaded, got 3"),
        ("in_memory", -1, "start must be an int from 0 to"),
        ("in_memory", True, "start must be an int from 0 to"),
    ],
)
def test_a_bad_rewrite_request_fails_the_run_before_anything_is_stored(source_id: str, start: Any, match: str) -> None:
    async def scenario() -> None:
        history = InMemoryHistoryProvider()
        agent = Agent(tool_model(), context_providers=[history])
        session = agent.create_session("s")
        await agent.run("first", session=session)
        before = await history.load("s")
        failing = Agent(tool_model(), context_providers=[history, BadRewrite(source_id, start)])
        with pytest.raises(ConfigurationError, match=match):
            await failing.run("second", session=session)
        assert await history.load("s") == before

    asyncio.run(scenario())
