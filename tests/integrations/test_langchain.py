"""LangChain and LangGraph: lossless conversion both ways, and 30+ turn agents against a real
OpenAI-compatible server on 127.0.0.1 whose every request must be valid and compacted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sizes import examples

pytest.importorskip("langchain.agents", reason="the 'langchain' extra")
pytest.importorskip("langchain_openai", reason="LangChain's OpenAI model, in the dev extra")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from contextledger.compaction import SlidingWindowStrategy, apply_compaction
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.facts import FactStore
from contextledger.integrations.langchain import (
    CompactionMiddleware,
    FactsMiddleware,
    compaction_runnable,
    from_langchain,
    pre_model_hook,
    to_langchain,
)
from contextledger.messages import (
    SUMMARY_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    from_openai,
    validate,
)
from tests.integrations import scripted_turns as turns
from tests.integrations.conftest import ChatServer, completion, tool_call
from tests.integrations.json_data import identifiers, json_values, words

# Conversion ----------------------------------------------------------------------------------

metadata = st.dictionaries(identifiers, json_values, max_size=2)
blocks = st.one_of(
    words,
    st.builds(lambda text: {"type": "text", "text": text}, words),
    st.builds(lambda text: {"type": "reasoning", "reasoning": text}, words),
    st.builds(lambda url: {"type": "image_url", "image_url": {"url": url}}, words),
    st.builds(lambda text, ident: {"type": "text", "text": text, "id": ident}, words, identifiers),
)
contents = words | st.lists(blocks, max_size=4)
common = st.fixed_dictionaries(
    {},
    optional={
        "id": identifiers,
        "name": identifiers,
        "additional_kwargs": metadata,
        "response_metadata": metadata,
    },
)


@st.composite
def exchanges(draw: st.DrawFn, number: int) -> list[BaseMessage]:
    """A user turn, maybe an assistant turn with parallel tool calls and their results, a reply."""
    messages: list[BaseMessage] = [HumanMessage(content=draw(contents), **draw(common))]
    calls = [
        {
            "name": draw(identifiers),
            "args": draw(st.dictionaries(identifiers, json_values, max_size=3)),
            "id": f"c{number}-{k}",
        }
        for k in range(draw(st.integers(0, 3)))
    ]
    if calls:
        usage = draw(st.none() | st.just({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}))
        messages.append(AIMessage(content=draw(contents), tool_calls=calls, usage_metadata=usage, **draw(common)))
        for call in draw(st.permutations(calls)):
            extra: dict[str, Any] = draw(st.fixed_dictionaries({}, optional={"artifact": json_values}))
            status = draw(st.sampled_from(["success", "error"]))
            messages.append(
                ToolMessage(content=draw(contents), tool_call_id=call["id"], status=status, **extra, **draw(common))
            )
    reply = draw(contents)
    if draw(st.booleans()):  # a server-side (hosted) tool call and its result, inside the reply's content
        search = f"srv{number}"
        hosted_blocks: list[str | dict[str, Any]] = [
            {"type": "server_tool_call", "id": search, "name": "web_search", "args": {"query": draw(words)}},
            {"type": "server_tool_result", "tool_call_id": search, "status": "success", "output": draw(json_values)},
        ]
        reply = [*hosted_blocks, *([reply] if isinstance(reply, str) else reply)]
    messages.append(AIMessage(content=reply, **draw(common)))
    return messages


@st.composite
def langchain_conversations(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    if draw(st.booleans()):
        messages.append(SystemMessage(content=draw(contents), **draw(common)))
    for number in range(draw(st.integers(1, 4))):
        messages += draw(exchanges(number))
    return messages


@settings(max_examples=examples(150), deadline=None)
@given(langchain_conversations())
def test_langchain_messages_survive_a_round_trip_through_ours(messages: list[BaseMessage]) -> None:
    ours = from_langchain(messages)
    assert to_langchain(ours) == messages
    assert validate(ours) == []  # parallel calls and their results stay paired
    for message in ours:  # a hosted call and its result form a complete unit inside one assistant message
        if any(isinstance(c, HostedCallContent) for c in message.contents):
            assert message.role == "assistant"
            hosted = [call_id for call_id in message.opened_ids if call_id.startswith("srv")]
            assert hosted == [call_id for call_id in message.answered_ids if call_id.startswith("srv")] != []


texts = st.builds(TextContent, words)
parts = st.lists(
    texts | st.builds(ReasoningContent, words) | st.builds(lambda t: OpaqueContent({"type": "image", "url": t}), words),
    max_size=3,
)
properties = st.dictionaries(identifiers, json_values, max_size=2) | st.just({SUMMARY_PROPERTY: True})
arguments = st.dictionaries(identifiers, json_values, max_size=3).map(
    lambda value: json.dumps(value, ensure_ascii=False)
)


@st.composite
def our_conversations(draw: st.DrawFn) -> list[Message]:
    ids = st.none() | identifiers
    messages: list[Message] = []
    for number in range(draw(st.integers(1, 4))):
        messages.append(
            Message("user", tuple(draw(parts)), message_id=draw(ids), additional_properties=draw(properties))
        )
        calls = [
            FunctionCallContent(f"c{number}-{k}", draw(identifiers), draw(arguments))
            for k in range(draw(st.integers(0, 3)))
        ]
        messages.append(
            Message("assistant", (*draw(parts), *calls), author_name=draw(ids), additional_properties=draw(properties))
        )
        for call in calls:
            messages.append(Message("tool", (FunctionResultContent(call.call_id, draw(words)),), message_id=draw(ids)))
    return messages


@settings(max_examples=examples(150), deadline=None)
@given(our_conversations())
def test_our_messages_survive_a_round_trip_through_langchain(messages: list[Message]) -> None:
    assert from_langchain(to_langchain(messages)) == messages


def test_what_langchain_cannot_hold_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidMessageError, match="has no id"):
        from_langchain([AIMessage(content="", tool_calls=[{"name": "f", "args": {}, "id": None}])])
    with pytest.raises(InvalidMessageError, match="exactly one tool result"):
        to_langchain([Message("tool", (FunctionResultContent("a", "1"), FunctionResultContent("b", "2")))])
    with pytest.raises(InvalidMessageError, match="not JSON"):
        to_langchain([Message.assistant(calls=[FunctionCallContent("a", "f", "{oops")])])
    with pytest.raises(ConfigurationError):
        CompactionMiddleware("sliding")  # type: ignore[arg-type]


def test_the_runnable_goes_where_trim_messages_goes_and_keeps_the_callers_objects() -> None:
    history: list[BaseMessage] = [SystemMessage("Be brief.")]
    for number in range(10):
        history += [
            HumanMessage(f"question {number}"),
            AIMessage("", tool_calls=[{"name": "f", "args": {"n": number}, "id": f"c{number}"}]),
            ToolMessage(f"result {number}", tool_call_id=f"c{number}"),
            AIMessage(f"answer {number}"),
        ]
    before = list(history)
    strategy = SlidingWindowStrategy(keep_last_groups=5)
    chain = compaction_runnable(strategy) | RunnableLambda(lambda messages: messages)
    sent = chain.invoke(history)
    assert history == before
    expected = asyncio.run(apply_compaction(from_langchain(history), strategy=strategy))
    assert from_langchain(sent) == expected
    assert all(any(kept is original for original in history) for kept in sent)
    assert asyncio.run(chain.ainvoke(history)) == sent
    assert validate(from_langchain(sent)) == []
    assert len(sent) < len(history)


# Agents against a server on 127.0.0.1 --------------------------------------------------------


def chat_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model, speaking chat completions."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            results.append(
                message["content"] if isinstance(message["content"], str) else json.dumps(message["content"])
            )
        return completion(turns.answer_after_tools(results), usage={"prompt_tokens": 50, "completion_tokens": 5})
    text = messages[-1]["content"]
    number = turns.order_number(text if isinstance(text, str) else json.dumps(text))
    if number is None:
        return completion("Noted.", usage={"prompt_tokens": 50, "completion_tokens": 2})
    calls = [tool_call(call_id, name, args) for call_id, name, args in turns.calls_for(number)]
    return completion(None, tool_calls=calls, usage={"prompt_tokens": 50, "completion_tokens": 9})


def model_for(server: ChatServer) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.url, api_key="test-key", max_retries=0, timeout=30)  # type: ignore[arg-type]


def request_texts(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


def check_requests(requests: Sequence[dict[str, Any]]) -> None:
    """Every request is valid to send and compacted; the block always rides in the system message."""
    assert len(requests) >= 2 * turns.TOOL_TURNS
    collapsed = 0
    for body in requests:
        ours = from_openai(body["messages"])
        assert validate(ours) == [], body["messages"]
        assert sum(1 for message in ours if message.role == "user") <= turns.WINDOW_TURNS
        assert ours[0].role == "system"
        assert ours[0].text.startswith(turns.INSTRUCTIONS)
        assert "Facts" in ours[0].text or "facts" in ours[0].text
        collapsed += any(message.text.startswith("[Tool results") for message in ours)
    assert collapsed > turns.TOOL_TURNS / 2  # old tool results are collapsed inside the window too


def check_facts_during_the_run(store: FactStore, requests: Sequence[dict[str, Any]]) -> None:
    assert {fact.key: fact.value for fact in store.facts()} == {"module": "Billing", "database": "SQL Server 2022"}
    last = requests[-1]
    assert turns.QUESTION in request_texts(last)
    system = last["messages"][0]["content"]
    assert 'module = "Billing"' in system
    assert 'database = "SQL Server 2022"' in system
    for stale in ("Reporting", "PostgreSQL"):
        assert stale not in request_texts(last)


def check_full_history(messages: Sequence[BaseMessage]) -> None:
    """The framework's own state kept every turn: compaction changed only what the model saw."""
    humans = [message for message in messages if isinstance(message, HumanMessage)]
    assert [message.text for message in humans] == turns.script()
    expected_results = sum(len(turns.calls_for(number)) for number in range(turns.TOOL_TURNS))
    assert sum(1 for message in messages if isinstance(message, ToolMessage)) == expected_results
    assert not any(message.text.startswith("[Tool results") for message in messages)


def forgotten_everywhere(messages: Sequence[BaseMessage], *values: str) -> bool:
    dumped = json.dumps([message.model_dump() for message in messages], ensure_ascii=False, default=str)
    return not any(value in dumped for value in values)


def test_a_create_agent_with_our_middleware_runs_the_whole_script(chat_server: ChatServer) -> None:
    chat_server.respond = chat_reply
    store = FactStore()
    facts = FactsMiddleware(store)
    agent = create_agent(
        model_for(chat_server),
        tools=[tool(turns.lookup_order), tool(turns.lookup_status)],
        system_prompt=turns.INSTRUCTIONS,
        middleware=[facts, CompactionMiddleware(turns.strategy())],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "desk-1"}}
    for number, text in enumerate(turns.script()):
        agent.invoke({"messages": [HumanMessage(text)]}, config)
        if number == 0:
            assert {fact.key: fact.value for fact in store.facts()} == {"module": "Reporting", "database": "PostgreSQL"}
        if number == 1:
            assert facts.last_turn is not None
            assert facts.last_turn.admission is not None
            assert {fact.key for fact in facts.last_turn.admission.replaced} == {"module", "database"}
    check_requests(chat_server.requests)
    check_facts_during_the_run(store, chat_server.requests)
    check_full_history(agent.get_state(config).values["messages"])

    facts.forget("module", graphs=[(agent, config)])
    assert [fact.key for fact in store.facts()] == ["database"]
    state = agent.get_state(config).values["messages"]
    assert forgotten_everywhere(state, "module=", "Reporting", "Billing")
    assert not forgotten_everywhere(state, "database=SQL Server 2022")
    facts.forget(graphs=[(agent, config)])
    assert store.facts() == []
    agent.invoke({"messages": [HumanMessage(turns.QUESTION)]}, config)
    assert store.facts() == []
    last = request_texts(chat_server.requests[-1])
    for value in ("Reporting", "Billing", "PostgreSQL", "SQL Server 2022"):
        assert value not in last
    assert forgotten_everywhere(
        agent.get_state(config).values["messages"], "Reporting", "Billing", "PostgreSQL", "SQL Server"
    )


class GraphState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    llm_input_messages: list[AnyMessage]


def test_a_hand_built_langgraph_graph_with_our_pre_model_hook_runs_the_whole_script(chat_server: ChatServer) -> None:
    chat_server.respond = chat_reply
    store = FactStore()
    facts = FactsMiddleware(store)
    tools = [tool(turns.lookup_order), tool(turns.lookup_status)]
    model = model_for(chat_server).bind_tools(tools)

    async def begin(state: GraphState) -> dict[str, Any]:
        facts.begin(state["messages"])
        return {}

    async def call_model(state: GraphState) -> dict[str, Any]:
        system = facts.system_message(SystemMessage(turns.INSTRUCTIONS))
        return {"messages": [await model.ainvoke([system, *state["llm_input_messages"]])]}

    async def finish(state: GraphState) -> dict[str, Any]:
        await facts.finish(state["messages"])
        return {}

    builder = StateGraph(GraphState)
    builder.add_node("begin", begin)
    builder.add_node("compact", pre_model_hook(turns.strategy()))
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_node("finish", finish)
    builder.add_edge(START, "begin")
    builder.add_edge("begin", "compact")
    builder.add_edge("compact", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "finish"})
    builder.add_edge("tools", "compact")
    builder.add_edge("finish", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "desk-2"}}

    async def run_script() -> None:
        for text in turns.script():
            await graph.ainvoke(cast(Any, {"messages": [HumanMessage(text)]}), config)

    asyncio.run(run_script())
    check_requests(chat_server.requests)
    check_facts_during_the_run(store, chat_server.requests)
    check_full_history(graph.get_state(config).values["messages"])

    asyncio.run(facts.aforget("module", graphs=[(graph, config)]))
    assert forgotten_everywhere(graph.get_state(config).values["messages"], "module=", "Reporting", "Billing")
    asyncio.run(facts.aforget(graphs=[(graph, config)]))
    asyncio.run(graph.ainvoke(cast(Any, {"messages": [HumanMessage(turns.QUESTION)]}), config))
    assert store.facts() == []
    for value in ("Reporting", "Billing", "PostgreSQL", "SQL Server 2022"):
        assert value not in request_texts(chat_server.requests[-1])


def test_a_failed_run_admits_nothing_and_the_next_run_admits_its_own_declaration(chat_server: ChatServer) -> None:
    failing = {"on": True}

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        if failing["on"]:
            raise RuntimeError("the model is down")
        return chat_reply(body)

    chat_server.respond = respond
    store = FactStore()
    facts = FactsMiddleware(store)
    agent = create_agent(model_for(chat_server), tools=[], middleware=[facts], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "desk-3"}}
    with pytest.raises(Exception, match="model is down"):
        agent.invoke({"messages": [HumanMessage(turns.FIRST)]}, config)
    assert store.facts() == []
    failing["on"] = False
    agent.invoke({"messages": [HumanMessage(turns.SECOND)]}, config)
    assert {fact.key: fact.value for fact in store.facts()} == {"module": "Billing", "database": "SQL Server 2022"}
    assert facts.last_turn is not None
    assert facts.last_turn.rejection is None


def test_the_facts_block_follows_the_system_prompt_and_keeps_its_blocks() -> None:
    store = FactStore()
    facts = FactsMiddleware(store)
    block = store.to_prompt_block()
    assert facts.system_message(None).content == block
    plain = facts.system_message(SystemMessage("Be brief.", id="sys"))
    assert (plain.content, plain.id) == (f"Be brief.\n\n{block}", "sys")
    cached = SystemMessage([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
    assert facts.system_message(cached).content == [*cached.content, {"type": "text", "text": block}]
    assert cached.content == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
