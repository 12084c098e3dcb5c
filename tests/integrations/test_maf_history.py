"""contextledger's history stores (memory, SQLite, Redis) behind MAF's history-provider interface, used by
real MAF agents: what a run stores is what MAF produced, field for field, and a new agent process on the
same store continues the conversation."""

from __future__ import annotations

import asyncio

import pytest

from contextledger import compaction
from contextledger.exceptions import ConfigurationError, HistoryError
from contextledger.history import HistoryProvider, InMemoryHistoryProvider
from contextledger.messages import Message
from tests.history.conftest import backend  # noqa: F401  (the fixture: one store per backend)
from tests.history.support import Backend
from tests.integrations.conftest import ChatServer
from tests.optional_imports import try_import

with try_import("maf") as maf_extra:
    from agent_framework import Agent, AgentSession

    from contextledger.integrations.maf import (
        ContextLedgerHistoryProvider,
        SlidingWindowStrategy,
        from_maf_messages,
    )
    from tests.integrations.maf_support import (
        AGENT_NAME,
        INSTRUCTIONS,
        Shop,
        expected,
        is_agent_request,
        maf_client,
        question,
        sent,
    )

pytestmark = maf_extra.skip


def shop_agent(server: ChatServer, shop: Shop, history: ContextLedgerHistoryProvider) -> Agent:
    return Agent(
        client=maf_client(server),
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=[shop.tool()],
        context_providers=[history],
    )


def test_a_store_keeps_what_maf_produced_and_a_new_agent_continues_from_it(
    chat_server: ChatServer,
    backend: Backend,  # noqa: F811
) -> None:
    shop = Shop(result_chars=300)
    chat_server.respond = shop.respond
    session_id = "maf-session-1"

    async def first_process(store: HistoryProvider) -> list[Message]:
        agent = shop_agent(chat_server, shop, ContextLedgerHistoryProvider(store))
        session = AgentSession(session_id=session_id)
        produced: list[Message] = []
        for number in range(2):
            response = await agent.run(question(number), session=session)
            produced += [Message.user(question(number)), *from_maf_messages(response.messages)]
        stored = await store.load(session_id)
        assert stored == produced, "the store does not hold exactly what the MAF runs produced"
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * 2
        assert stored[1].author_name == AGENT_NAME
        assert stored[1].function_calls
        return stored

    async def second_process(store: HistoryProvider) -> None:
        agent = shop_agent(chat_server, shop, ContextLedgerHistoryProvider(store))
        start = len(chat_server.requests)
        await agent.run(question(2), session=AgentSession(session_id=session_id))
        first = next(r for r in chat_server.requests[start:] if is_agent_request(r))
        want = expected([Message.system(INSTRUCTIONS), *stored, Message.user(question(2))])
        assert sent(first) == want
        assert len(await store.load(session_id)) == 12

    stored = backend.run(first_process)
    backend.run(second_process)


def test_a_reducer_replaces_the_retained_history_with_the_reduced_list(chat_server: ChatServer) -> None:
    """A reduced retained history: after each save the stored list is the strategy's projection, so the
    removed messages are gone from the store and from every later request."""
    shop = Shop(result_chars=100)
    chat_server.respond = shop.respond
    store = InMemoryHistoryProvider()
    history = ContextLedgerHistoryProvider(store, reducer=SlidingWindowStrategy(keep_last_groups=3))
    agent = shop_agent(chat_server, shop, history)
    window = compaction.SlidingWindowStrategy(keep_last_groups=3)

    async def main() -> None:
        session = agent.create_session()
        retained: list[Message] = []
        for number in range(4):
            start = len(chat_server.requests)
            response = await agent.run(question(number), session=session)
            first = next(r for r in chat_server.requests[start:] if is_agent_request(r))
            assert sent(first) == expected([Message.system(INSTRUCTIONS), *retained, Message.user(question(number))])
            grown = [*retained, Message.user(question(number)), *from_maf_messages(response.messages)]
            retained = await compaction.apply_compaction(grown, strategy=window)
            assert await store.load(session.session_id) == retained
        assert len(retained) < 4 * 4

    asyncio.run(main())


def test_a_request_view_exclusion_never_reaches_the_stored_history(chat_server: ChatServer) -> None:
    """A per-call strategy marks the very message objects MAF then stores; the store keeps the whole
    conversation all the same, without MAF's annotations, and the next turn loads all of it."""
    shop = Shop(result_chars=100)
    chat_server.respond = shop.respond
    store = InMemoryHistoryProvider()
    agent = Agent(
        client=maf_client(chat_server),
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=[shop.tool()],
        context_providers=[ContextLedgerHistoryProvider(store)],
        compaction_strategy=SlidingWindowStrategy(keep_last_groups=1),
    )

    async def main() -> None:
        session = agent.create_session()
        for number in range(3):
            await agent.run(question(number), session=session)
        stored = await store.load(session.session_id)
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"] * 3
        assert not any(key.startswith(("_group", "_exclu")) for m in stored for key in m.additional_properties)
        loaded = await ContextLedgerHistoryProvider(store).get_messages(session.session_id)
        assert len(loaded) == len(stored)

    asyncio.run(main())


def test_a_history_needs_a_session_id() -> None:
    history = ContextLedgerHistoryProvider(InMemoryHistoryProvider())
    with pytest.raises(HistoryError, match="session's id"):
        asyncio.run(history.get_messages(None))


def test_only_contextledger_stores_and_strategies_are_accepted() -> None:
    with pytest.raises(ConfigurationError, match="HistoryProvider"):
        ContextLedgerHistoryProvider(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="reducer"):
        ContextLedgerHistoryProvider(InMemoryHistoryProvider(), reducer=object())  # type: ignore[arg-type]


def test_each_run_is_one_turn_stored_once_and_a_reduced_history_starts_at_a_turn(chat_server: ChatServer) -> None:
    """Each MAF run is stored under a turn id of its own (the test server answers every call with
    the same response id, so that is not what the id is made of); a window that cuts a run in two
    (four groups: the last answer of one run, then the three groups of the next) leaves the newest
    run whole and nothing of the one before."""
    shop = Shop(result_chars=100)
    chat_server.respond = shop.respond
    store = InMemoryHistoryProvider()
    history = ContextLedgerHistoryProvider(store, reducer=SlidingWindowStrategy(keep_last_groups=4))
    agent = shop_agent(chat_server, shop, history)

    async def main() -> None:
        session = agent.create_session()
        for number in range(3):
            await agent.run(question(number), session=session)
            stored = await store.load(session.session_id)
            assert stored[0].role == "user", [m.role for m in stored]
            assert stored[0].text == question(number)
        assert len(await store.load_turns(session.session_id)) == 3
        # A save whose outcome was lost is retried by its turn id: the stored turn stands.
        (recorded,) = [t for t in await store.load_turns(session.session_id) if t.inputs[0].text == question(2)]
        outcome = await history.save_turn(session.session_id, recorded.turn_id, recorded.inputs, [])
        assert not outcome.stored
        assert outcome.earlier == recorded
        assert len(await store.load_turns(session.session_id)) == 3

    asyncio.run(main())
