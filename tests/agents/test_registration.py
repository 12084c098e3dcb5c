"""A provider registered on the client still takes part in the run, and offline tool calls stay unique."""

from __future__ import annotations

import asyncio

import pytest

from contextledger import validate
from contextledger.agents import Agent, CompactionProvider, Session, use_context_providers
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.compaction import SlidingWindowStrategy, ToolResultCompactionStrategy
from contextledger.exceptions import ConfigurationError
from contextledger.history import InMemoryHistoryProvider
from tests.tools import lookup_price


def test_a_provider_on_the_client_compacts_the_retained_history_after_the_run() -> None:
    async def scenario() -> None:
        history = InMemoryHistoryProvider()
        provider = CompactionProvider(
            SlidingWindowStrategy(keep_last_groups=20, stable_step=1),
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1),
            history_source_id=history.source_id,
        )
        agent = Agent(use_context_providers(OfflineModel(), provider), tools=[lookup_price], history=history)
        session = Session("s")
        for item in ("laptop", "phone", "tablet"):
            await agent.run(f"What's the price of a {item}?", session=session)
        stored = await history.load("s")
        assert sum(1 for m in stored if m.role == "tool") == 1  # after_strategy ran
        assert sum(1 for m in stored if m.is_summary) == 2
        assert "compaction:compaction" in session.state  # and its request-view state was saved

    asyncio.run(scenario())


def test_a_provider_on_the_client_is_checked_against_the_agent() -> None:
    provider = CompactionProvider(
        after_strategy=ToolResultCompactionStrategy(stable_step=1), history_source_id="elsewhere"
    )
    with pytest.raises(ConfigurationError, match="elsewhere"):
        Agent(use_context_providers(ScriptedChatClient(["ok"]), provider))


def test_offline_tool_calls_stay_unique_across_restarts_of_the_model() -> None:
    async def scenario() -> None:
        history = InMemoryHistoryProvider()
        for _ in range(3):  # a new process each time: a fresh model, agent and session over one store
            agent = Agent(OfflineModel(), tools=[lookup_price], history=history)
            await agent.run("What's the price of a laptop?", session=Session("s"))
        stored = await history.load("s")
        assert sum(1 for m in stored if m.role == "tool") == 3
        assert validate(stored) == []

    asyncio.run(scenario())
