"""recall_context and compact_context through LangChain's agent middleware: the tools reach every
model call of a ``create_agent`` agent, against a scripted chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

from tests.integrations.conftest import ChatServer
from tests.optional_imports import try_import

with try_import("langchain") as langchain_extra:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    from contextledger.integrations.langchain import CompactionMiddleware

from contextledger.compaction import ToolResultCompactionStrategy, tokens_below, tokens_exceed
from tests.agents.test_agent_tools import REF, ScriptedModel, lookup_stock, stock_report

pytestmark = langchain_extra.skip


def _agent(server: ChatServer, middleware: Any) -> Any:
    model = ChatOpenAI(model="test-model", base_url=server.url, api_key="test-key", max_retries=0, timeout=30)  # type: ignore[arg-type]
    return create_agent(model, tools=[tool(lookup_stock)], middleware=[middleware], checkpointer=InMemorySaver())


def _names(body: dict[str, Any]) -> set[str]:
    return {entry["function"]["name"] for entry in body.get("tools", ())}


def test_the_middleware_offers_both_tools_in_every_call_and_recall_returns_the_collapsed_result_whole(
    chat_server: ChatServer,
) -> None:
    scripted = ScriptedModel()
    chat_server.respond = lambda body: scripted(body)[1]
    collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
    agent = _agent(chat_server, CompactionMiddleware(collapse, agent_tools=True))
    config: Any = {"configurable": {"thread_id": "t"}}
    for item in ("apples", "pears", "plums"):
        agent.invoke({"messages": [HumanMessage(f"stock {item}")]}, config)
    lines = [m["content"] for m in chat_server.requests[-1]["messages"] if "[Tool results:" in str(m["content"])]
    assert len(lines) == 2
    assert all(REF.search(line) for line in lines)
    agent.invoke({"messages": [HumanMessage("recall")]}, config)
    state = agent.get_state(config).values["messages"]
    recalled = [m for m in state if isinstance(m, ToolMessage) and m.name == "recall_context"][-1].text
    assert stock_report("apples") in recalled
    assert all(_names(body) == {"lookup_stock", "recall_context", "compact_context"} for body in chat_server.requests)
    # The graph state keeps every result whole; the collapsed lines were the request's only.
    results = [m.text for m in state if isinstance(m, ToolMessage) and m.name == "lookup_stock"]
    assert results == [stock_report(item) for item in ("apples", "pears", "plums")]


def test_compact_context_through_the_middleware_holds_from_the_next_call_on(chat_server: ChatServer) -> None:
    scripted = ScriptedModel()
    chat_server.respond = lambda body: scripted(body)[1]
    strategy = ToolResultCompactionStrategy(tokens_exceed(100_000), target=tokens_below(1_500))
    agent = _agent(chat_server, CompactionMiddleware(strategy, agent_tools=True))
    config: Any = {"configurable": {"thread_id": "t"}}
    for item in ("apples", "pears", "plums"):
        agent.invoke({"messages": [HumanMessage(f"stock {item}")]}, config)
    agent.invoke({"messages": [HumanMessage("compact now")]}, config)
    asked, after = chat_server.requests[-2], chat_server.requests[-1]
    assert len(json.dumps(after["messages"])) < len(json.dumps(asked["messages"])) // 2
    answer = [m for m in agent.get_state(config).values["messages"] if isinstance(m, ToolMessage)][-1].text
    assert answer.startswith("Compacted with tool_result_collapse")
    agent.invoke({"messages": [HumanMessage("stock figs")]}, config)
    later = chat_server.requests[-2]  # the new turn's first call: still compacted
    assert len(json.dumps(later["messages"])) < len(json.dumps(asked["messages"])) // 2
