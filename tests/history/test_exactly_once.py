"""Every turn is stored exactly once, on every backend, whatever the caller lost on the way.

The two failures that used to report an error and store the turn anyway are reproduced with
real parts: a redis-server stopped (SIGSTOP) or paused (``CLIENT PAUSE``) longer than the
client's ``socket_timeout`` while the turn is written, and a SQLite file whose write lock
another connection holds while the caller's ``asyncio.wait_for`` runs out.  After each, a retry
with the caller's turn id finds the turn stored once and returns it without a model call.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextledger.agents import Agent, AgentResponse, CompactionProvider
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import SlidingWindowStrategy
from contextledger.exceptions import (
    ConfigurationError,
    HistoryUnavailableError,
    TurnIdReusedError,
    TurnOutcomeUnknownError,
)
from contextledger.history import HistoryProvider, InMemoryHistoryProvider, RedisHistoryProvider, SQLiteHistoryProvider
from contextledger.messages import Message
from tests.history.support import Backend, RedisServer
from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis.asyncio

pytestmark = redis_extra.skip


def counting_model() -> ScriptedChatClient:
    """A model that answers ``answer N`` to its Nth call."""
    model = ScriptedChatClient(report_usage=False)
    model.replies.append(lambda messages: f"answer {model.calls}")
    return model


def pausing(model: ScriptedChatClient, pause: Callable[[], Awaitable[None]]) -> Callable[..., Awaitable[str]]:
    """A reply that runs ``pause`` (to freeze a store) while the model answers, then answers as usual."""

    async def reply(messages: Sequence[Message]) -> str:
        await pause()
        return f"answer {model.calls}"

    return reply


def texts(messages: Sequence[Message]) -> list[str]:
    return [f"{m.role}:{m.text}" for m in messages]


def agent_on(model: ScriptedChatClient, history: HistoryProvider, *, reducing: bool) -> Agent:
    """An agent on ``history``; ``reducing`` adds a retained-history window of the last turn, so
    every turn is written together with the reduction it brings about (one store operation)."""
    if not reducing:
        return Agent(model, history=history)
    compaction = CompactionProvider(
        after_strategy=SlidingWindowStrategy(keep_last_groups=2), history_source_id=history.source_id
    )
    return Agent(model, context_providers=[history, compaction])


def test_every_run_has_a_turn_id() -> None:
    async def scenario() -> None:
        agent = Agent(counting_model())
        session = agent.create_session()
        first = await agent.run("one", session=session)
        second = await agent.run("two", session=session, turn_id="caller-chosen")
        assert len(first.turn_id) == 32
        assert first.turn_id != second.turn_id
        assert second.turn_id == "caller-chosen"
        assert not first.replayed
        assert not second.replayed
        assert await agent.history.load_turn(session.session_id, first.turn_id) is not None

    asyncio.run(scenario())


@pytest.mark.parametrize("turn_id", ["", "x" * 257, "tab\there", 5])
def test_a_bad_turn_id_is_refused_before_anything_happens(turn_id: Any) -> None:
    model = counting_model()
    agent = Agent(model)
    session = agent.create_session()
    with pytest.raises(ConfigurationError, match="turn_id must be printable text"):
        asyncio.run(agent.run("hello", session=session, turn_id=turn_id))
    assert model.calls == 0
    assert asyncio.run(agent.history.load(session.session_id)) == []


def test_a_retry_of_a_stored_turn_replays_it_without_a_model_call(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        model = counting_model()
        agent = Agent(model, history=history)
        session = agent.create_session()
        first = await agent.run("hello", session=session, turn_id="t-1")
        again = await agent.run("hello", session=session, turn_id="t-1")
        assert model.calls == 1
        assert again.replayed
        assert again.model_calls == ()
        assert (again.text, again.messages, again.turn_id) == (first.text, first.messages, "t-1")
        assert texts(await history.load(session.session_id)) == ["user:hello", "assistant:answer 1"]
        nxt = await agent.run("next", session=session, turn_id="t-2")
        assert (nxt.text, nxt.replayed, model.calls) == ("answer 2", False, 2)

    backend.run(scenario)


def test_a_turn_id_reused_with_other_input_is_refused(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        model = counting_model()
        agent = Agent(model, history=history)
        session = agent.create_session()
        await agent.run("hello", session=session, turn_id="t-1")
        with pytest.raises(TurnIdReusedError, match=r"'t-1'.*already stored with other input"):
            await agent.run("something else", session=session, turn_id="t-1")
        assert model.calls == 1
        assert texts(await history.load(session.session_id)) == ["user:hello", "assistant:answer 1"]

    backend.run(scenario)


def test_concurrent_runs_of_one_turn_store_it_once_and_agree(backend: Backend) -> None:
    async def scenario(history: HistoryProvider) -> None:
        agent = Agent(counting_model(), history=history)
        session = agent.create_session()
        responses = await asyncio.gather(*(agent.run("hi", session=session, turn_id="same") for _ in range(6)))
        assert len({response.text for response in responses}) == 1
        assert sum(not response.replayed for response in responses) == 1
        stored = await history.load(session.session_id)
        assert texts(stored) == ["user:hi", f"assistant:{responses[0].text}"]

    backend.run(scenario)


def test_a_turn_missing_from_a_mirror_is_completed_by_the_retry() -> None:
    async def scenario() -> None:
        main, mirror = InMemoryHistoryProvider("main"), InMemoryHistoryProvider("mirror")
        model = counting_model()
        agent = Agent(model, context_providers=[main, mirror])
        session = agent.create_session()
        # As if the turn's write to the mirror had an unknown outcome that turned out "not stored".
        await main.append_turn(session.session_id, "t-1", [Message.user("hi")], [Message.assistant("stored")])
        response = await agent.run("hi", session=session, turn_id="t-1")
        assert (response.text, response.replayed, model.calls) == ("stored", True, 0)
        assert texts(await mirror.load(session.session_id)) == ["user:hi", "assistant:stored"]

    asyncio.run(scenario())


# Redis paused or stopped longer than socket_timeout while the turn is written -------------------


async def stored_count(url: str, namespace: str, session_id: str, turn_id: str) -> tuple[int, bool]:
    history = RedisHistoryProvider(url, namespace=namespace)
    try:
        loaded = await history.load(session_id)
        return sum(m.text == "question" for m in loaded), await history.load_turn(session_id, turn_id) is not None
    finally:
        await history.close()


@pytest.mark.redis
@pytest.mark.parametrize("reducing", [False, True], ids=["turn", "turn-with-reduction"])
@pytest.mark.parametrize("pause", ["sigstop", "client-pause"])
def test_redis_paused_during_the_write_then_retried_stores_the_turn_once(
    own_redis_server: tuple[RedisServer, subprocess.Popen[bytes]], pause: str, reducing: bool
) -> None:
    server, process = own_redis_server
    namespace = f"pause-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        history = RedisHistoryProvider(server.url, namespace=namespace, socket_timeout=0.3)
        model = counting_model()
        agent = agent_on(model, history, reducing=reducing)
        session = agent.create_session()
        await agent.run("warm up", session=session)
        admin = redis.asyncio.Redis.from_url(server.url)

        async def pause_the_server() -> None:  # the model answers while Redis freezes
            if pause == "sigstop":
                process.send_signal(signal.SIGSTOP)
            else:
                await admin.client_pause(1500, all=False)  # writes only

        model.replies.append(pausing(model, pause_the_server))  # the next call, after the warm-up's
        with pytest.raises(TurnOutcomeUnknownError, match="'turn-7'") as caught:
            await agent.run("question", session=session, turn_id="turn-7")
        assert caught.value.turn_id == "turn-7"
        assert caught.value.session_id == session.session_id
        model.replies.append(model.replies[0])  # and plain answers again
        if pause == "sigstop":
            # A retry while the server is still stopped cannot even read: it stores nothing.
            with pytest.raises(HistoryUnavailableError):
                await agent.run("question", session=session, turn_id="turn-7")
            process.send_signal(signal.SIGCONT)
        else:
            await asyncio.sleep(1.6)
        # SIGSTOP: the server runs the script it had read once it resumes, so the turn is stored.
        # CLIENT PAUSE: Redis 7 drops a paused client's command when the client has hung up, so
        # it is not (observed, not promised: the test takes whichever the server did).  Either
        # way the retry settles it, and the turn is stored exactly once.
        for _ in range(100):
            if (await stored_count(server.url, namespace, session.session_id, "turn-7"))[1] or pause != "sigstop":
                break
            await asyncio.sleep(0.05)
        count, stored_by_first = await stored_count(server.url, namespace, session.session_id, "turn-7")
        assert count == int(stored_by_first)
        assert stored_by_first or pause != "sigstop"
        retried = await agent.run("question", session=session, turn_id="turn-7")
        assert retried.replayed is stored_by_first
        assert retried.text == ("answer 2" if stored_by_first else "answer 3")
        assert model.calls == (2 if stored_by_first else 3)  # a replay calls no model
        assert await stored_count(server.url, namespace, session.session_id, "turn-7") == (1, True)
        again = await agent.run("question", session=session, turn_id="turn-7")
        assert again.replayed
        assert again.text == retried.text
        assert await stored_count(server.url, namespace, session.session_id, "turn-7") == (1, True)
        if reducing:  # the window of one turn was written with it, or by the retry
            assert texts(await history.load(session.session_id)) == ["user:question", f"assistant:{retried.text}"]
        await history.close()
        await admin.aclose()

    asyncio.run(scenario())


@pytest.mark.redis
def test_a_cancelled_run_against_a_stopped_redis_is_stored_at_most_once(
    own_redis_server: tuple[RedisServer, subprocess.Popen[bytes]],
) -> None:
    server, process = own_redis_server
    namespace = f"cancel-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        history = RedisHistoryProvider(server.url, namespace=namespace, socket_timeout=5)
        model = counting_model()
        agent = Agent(model, history=history)
        session = agent.create_session()
        await agent.run("warm up", session=session)

        async def stop_the_server() -> None:
            process.send_signal(signal.SIGSTOP)

        model.replies.append(pausing(model, stop_the_server))  # the next call, after the warm-up's
        with pytest.raises(TimeoutError):
            # Long enough that the write is surely in flight when the caller gives up (a collector
            # pause in a long test session can take a few tenths of a second), well inside the
            # 5 s socket timeout the write then waits on.
            await asyncio.wait_for(agent.run("question", session=session, turn_id="turn-c"), 1.5)
        model.replies.append(model.replies[0])  # and plain answers again
        process.send_signal(signal.SIGCONT)
        first = await agent.run("question", session=session, turn_id="turn-c")
        second = await agent.run("question", session=session, turn_id="turn-c")
        assert second.replayed
        assert second.text == first.text
        assert await stored_count(server.url, namespace, session.session_id, "turn-c") == (1, True)
        await history.close()

    asyncio.run(scenario())


# SQLite: the caller gives up while another connection holds the write lock ----------------------


@pytest.mark.parametrize("reducing", [False, True], ids=["turn", "turn-with-reduction"])
@pytest.mark.parametrize("retry_with", ["same provider", "another provider"])
def test_sqlite_write_lock_held_past_the_callers_timeout_then_retried_stores_the_turn_once(
    tmp_path: Path, retry_with: str, reducing: bool
) -> None:
    path = tmp_path / "history.sqlite3"

    async def scenario() -> None:
        history = SQLiteHistoryProvider(path)
        model = counting_model()
        agent = agent_on(model, history, reducing=reducing)
        session = agent.create_session()
        await agent.run("warm up", session=session)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
        try:
            with pytest.raises(TimeoutError):
                # Long enough that the write is surely waiting for the lock when the caller gives up
                # (a collector pause in a long test session can take a few tenths of a second), well
                # inside the 10 s busy timeout it waits with.
                await asyncio.wait_for(agent.run("question", session=session, turn_id="turn-9"), 1.5)
            assert texts(await SQLiteHistoryProvider(path).load(session.session_id))[-1] == "assistant:answer 1"
        finally:
            other.execute("ROLLBACK")
            other.close()
        if retry_with == "same provider":
            retrying = agent  # its load waits for the write it still has in flight
        else:
            await asyncio.sleep(0.5)  # the first attempt commits once the lock is free
            retrying = agent_on(model, SQLiteHistoryProvider(path), reducing=reducing)
        retried = await retrying.run("question", session=session, turn_id="turn-9")
        assert retried.replayed
        assert retried.text == "answer 2"
        assert model.calls == 2
        stored = await SQLiteHistoryProvider(path).load(session.session_id)
        turn = ["user:question", "assistant:answer 2"]
        assert texts(stored) == (turn if reducing else ["user:warm up", "assistant:answer 1", *turn])
        await history.close()

    asyncio.run(scenario())


def test_sqlite_retry_racing_the_first_attempt_stores_the_turn_once(tmp_path: Path) -> None:
    """The retry runs (and calls the model) before the first attempt commits; the store still
    takes one of them, and both answers are the stored one."""
    path = tmp_path / "history.sqlite3"

    async def scenario() -> AgentResponse:
        model = counting_model()
        first_agent = Agent(model, history=SQLiteHistoryProvider(path))
        second_agent = Agent(model, history=SQLiteHistoryProvider(path))
        session = first_agent.create_session()
        other = sqlite3.connect(path, isolation_level=None)
        await first_agent.history.load(session.session_id)  # creates the file and its tables
        other.execute("BEGIN IMMEDIATE")
        first = asyncio.ensure_future(first_agent.run("question", session=session, turn_id="turn-r"))
        second = asyncio.ensure_future(second_agent.run("question", session=session, turn_id="turn-r"))
        await asyncio.sleep(0.3)
        other.execute("ROLLBACK")
        other.close()
        responses = await asyncio.gather(first, second)
        assert responses[0].text == responses[1].text
        assert sorted(response.replayed for response in responses) == [False, True]
        stored = await SQLiteHistoryProvider(path).load(session.session_id)
        assert texts(stored) == ["user:question", f"assistant:{responses[0].text}"]
        return responses[0]

    asyncio.run(scenario())


def test_a_session_reads_what_another_writer_stored_and_nothing_twice(backend: Backend) -> None:
    """Each agent keeps its own copy of the history between turns; a turn stored by another
    process (here another agent and session object) must show up in the next request, once."""

    async def scenario(history: HistoryProvider) -> None:
        from contextledger.agents import CompactionProvider, Session  # noqa: PLC0415
        from contextledger.compaction import ToolResultCompactionStrategy  # noqa: PLC0415

        model = counting_model()
        compaction = CompactionProvider(
            after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            history_source_id=history.source_id,
        )
        first = Agent(model, context_providers=[history, compaction])
        second = Agent(model, history=history)
        mine, theirs = Session("shared"), Session("shared")
        await first.run("one", session=mine)
        await second.run("two", session=theirs)
        await first.run("three", session=mine)
        await history.replace("shared", [Message.user("rewritten")])
        await first.run("four", session=mine)
        assert texts(model.requests[2]) == [
            "user:one",
            "assistant:answer 1",
            "user:two",
            "assistant:answer 2",
            "user:three",
        ]
        assert texts(model.requests[3]) == ["user:rewritten", "user:four"]
        assert texts(await history.load("shared")) == ["user:rewritten", "user:four", "assistant:answer 4"]

    backend.run(scenario)
