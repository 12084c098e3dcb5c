"""MAF agents running on contextledger's chat clients: a scripted one (tools called through MAF's own
function loop) and the local SmolLM2 model (real tokens, no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextledger.clients import ScriptedChatClient
from contextledger.exceptions import ConfigurationError
from contextledger.facts import FactStore
from contextledger.messages import FunctionCallContent, Message
from tests.optional_imports import try_import
from tests.tools import PriceList

with try_import("maf") as maf_extra:
    from agent_framework import Agent, AgentResponse, InMemoryHistoryProvider

    from contextledger.integrations.maf import ContextLedgerChatClient, FactsContextProvider
    from tests.integrations.maf_support import INSTRUCTIONS

with try_import("local") as local_extra:
    from contextledger.clients.local import LocalChatClient

pytestmark = maf_extra.skip


def run(agent: Agent, text: str) -> AgentResponse[Any]:
    async def main() -> AgentResponse[Any]:
        return await agent.run(text, session=session)

    session = agent.create_session()
    return asyncio.run(main())


def test_a_maf_agent_calls_tools_through_a_contextledger_client() -> None:
    scripted = ScriptedChatClient(
        [
            Message.assistant(calls=[FunctionCallContent("c1", "lookup_price", '{"item": "laptop"}')]),
            "A laptop costs 999 EUR.",
        ]
    )
    agent = Agent(
        client=ContextLedgerChatClient(scripted),
        name="shop",
        instructions=INSTRUCTIONS,
        tools=[PriceList().lookup_price],
        context_providers=[InMemoryHistoryProvider()],
    )
    response = run(agent, "What's the price of a laptop?")

    assert response.text == "A laptop costs 999 EUR."
    first, second = scripted.requests
    assert first == [Message.system(INSTRUCTIONS), Message.user("What's the price of a laptop?")]
    assert [tool["function"]["name"] for tool in scripted.tools[0]] == ["lookup_price"]
    call, result = second[-2:]
    assert call.function_calls[0].call_id == "c1"
    assert result.role == "tool"
    assert result.function_results[0].result == "laptop: 999 EUR", "MAF ran the tool and sent back its output"
    assert response.usage_details is not None
    assert (response.usage_details.get("input_token_count") or 0) > 0


@pytest.mark.local_model
@local_extra.skip
def test_a_maf_agent_runs_on_the_local_model_with_controlled_facts() -> None:
    store = FactStore()
    local = LocalChatClient(max_tokens=12, n_ctx=1024)
    agent = Agent(
        client=ContextLedgerChatClient(local),
        instructions="You are a support desk. Answer in one short sentence.",
        context_providers=[InMemoryHistoryProvider(), FactsContextProvider(store)],
    )
    response = run(agent, "module=Billing")
    assert response.text.strip(), "the local model said nothing"
    assert response.usage_details is not None
    assert (response.usage_details.get("input_token_count") or 0) > 20  # the facts block and instructions too
    assert 0 < (response.usage_details.get("output_token_count") or 0) <= 12
    assert [(fact.key, fact.value) for fact in store.facts()] == [("module", "Billing")]


def test_only_contextledger_clients_are_wrapped_and_streaming_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="contextledger chat client"):
        ContextLedgerChatClient(object())
    agent = Agent(client=ContextLedgerChatClient(ScriptedChatClient(["hi"])))

    async def streamed() -> None:
        async for _ in agent.run("hello", stream=True):
            pass

    with pytest.raises(ConfigurationError, match="does not stream"):
        asyncio.run(streamed())
