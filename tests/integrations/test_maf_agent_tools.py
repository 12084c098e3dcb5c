"""recall_context and compact_context in a MAF agent (a context provider adds them, with the chat
middleware that compacts every call), on MAF's own OpenAI client against a scripted server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from contextledger.compaction import ToolResultCompactionStrategy, tokens_below, tokens_exceed
from tests.agents.test_agent_tools import REF, ScriptedModel, lookup_stock, stock_report
from tests.integrations.conftest import ChatServer
from tests.optional_imports import try_import

with try_import("maf") as maf_extra:
    from agent_framework import Agent, InMemoryHistoryProvider

    from contextledger.integrations.maf import AgentToolsContextProvider
    from tests.integrations.maf_support import maf_client

pytestmark = maf_extra.skip


def _agent(server: ChatServer, provider: Any) -> Any:
    return Agent(
        client=maf_client(server),
        name="stock",
        instructions="You look up stock.",
        tools=[lookup_stock],
        context_providers=[InMemoryHistoryProvider(), provider],
    )


def _names(body: dict[str, Any]) -> set[str]:
    return {entry["function"]["name"] for entry in body.get("tools", ())}


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


def test_the_provider_offers_both_tools_in_every_call_and_recall_returns_the_collapsed_result_whole(
    chat_server: ChatServer,
) -> None:
    scripted = ScriptedModel()
    chat_server.respond = lambda body: scripted(body)[1]
    collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
    agent = _agent(chat_server, AgentToolsContextProvider(collapse))

    async def scenario() -> None:
        session = agent.create_session()
        for item in ("apples", "pears", "plums"):
            await agent.run(f"stock {item}", session=session)
        await agent.run("recall", session=session)

    asyncio.run(scenario())
    asking = chat_server.requests[-2]
    lines = [str(m.get("content")) for m in asking["messages"] if "[Tool results:" in str(m.get("content"))]
    assert len(lines) == 2
    assert all(REF.search(line) for line in lines)
    recalled = _tool_texts(chat_server.requests[-1])[-1]
    assert stock_report("apples") in recalled
    assert all(_names(body) == {"lookup_stock", "recall_context", "compact_context"} for body in chat_server.requests)


def test_compact_context_in_a_maf_run_makes_the_next_request_smaller(chat_server: ChatServer) -> None:
    scripted = ScriptedModel()
    chat_server.respond = lambda body: scripted(body)[1]
    strategy = ToolResultCompactionStrategy(tokens_exceed(100_000), target=tokens_below(1_500))
    agent = _agent(chat_server, AgentToolsContextProvider(strategy))

    async def scenario() -> None:
        session = agent.create_session()
        for item in ("apples", "pears", "plums"):
            await agent.run(f"stock {item}", session=session)
        await agent.run("compact now", session=session)

    asyncio.run(scenario())
    asked, after = chat_server.requests[-2], chat_server.requests[-1]
    assert len(json.dumps(after["messages"])) < len(json.dumps(asked["messages"])) // 2
    assert _tool_texts(after)[-1].startswith("Compacted with tool_result_collapse")
