"""The seed's "compaction with an agent" samples, run end to end against the built-in offline model.

The Python sample (a shopping assistant with a price-lookup tool, the token-budget pipeline of
tool-result collapse, summarisation and sliding window, an in-memory history provider and a
compaction provider) runs as written, modulo the import path; the C# builder registration is
translated to ``use_context_providers``.  Tool calls are really executed.
"""

from __future__ import annotations

import asyncio

from contextledger import validate
from contextledger.agents import Agent, CompactionProvider, use_context_providers
from contextledger.clients import OfflineModel, ScriptedChatClient
from contextledger.compaction import (
    CharacterEstimatorTokenizer,
    PipelineStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
    tokens_exceed,
    turns_exceed,
)
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import SUMMARY_PROPERTY, Message
from tests.tools import PriceList

PRICES = {"laptop": "$999", "phone": "$599", "tablet": "$449", "monitor": "$199", "keyboard": "$49"}


def _questions(rounds: int) -> list[str]:
    out = []
    for i in range(rounds):
        item = list(PRICES)[i % len(PRICES)]
        out.append(f"What's the price of a {item}?")
        out.append(f"customer=Customer{i}; priority=p{i}")
    return out


def test_python_sample_runs_the_pipeline_with_tools_executed() -> None:
    async def scenario() -> None:
        client = OfflineModel()
        summarizer_client = OfflineModel()
        book = PriceList(PRICES, detail_chars=1120)
        tokenizer = CharacterEstimatorTokenizer()
        pipeline = TokenBudgetComposedStrategy(
            prefix_stable=False,
            token_budget=1_600,
            tokenizer=tokenizer,
            strategies=[
                ToolResultCompactionStrategy(keep_last_tool_call_groups=1, prefix_stable=False),
                SummarizationStrategy(client=summarizer_client, target_count=4, threshold=2),
                SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False),
            ],
        )
        history = InMemoryHistoryProvider()
        compaction = CompactionProvider(before_strategy=pipeline, history_source_id=history.source_id)
        agent = Agent(
            client=client,
            name="ShoppingAssistant",
            instructions="You are a helpful shopping assistant.",
            tools=[book.lookup_price],
            context_providers=[history, compaction],
        )
        session = agent.create_session()

        first = await agent.run("What's the price of a laptop?", session=session)
        assert book.calls == ["laptop"]
        assert "$999" in first.text
        assert [m.role for m in first.messages] == ["assistant", "tool", "assistant"]
        assert first.messages[0].function_calls[0].name == "lookup_price"

        responses = [first]
        for question in _questions(12):
            responses.append(await agent.run(question, session=session))
        assert len(book.calls) == 13  # every price question ran the tool

        # The stored history is complete: every turn, every tool result, nothing summarised.
        stored = await history.load(session.session_id)
        assert sum(1 for m in stored if m.role == "user") == 25
        assert sum(1 for m in stored if m.role == "tool") == 13
        assert not any(m.additional_properties.get(SUMMARY_PROPERTY) for m in stored)

        # What was sent was compacted within budget: older tool results collapsed, a summary written.
        last_request = responses[-1].model_calls[0].request
        assert validate(list(last_request)) == []
        assert last_request[0].role == "system"
        assert last_request[0].text == "You are a helpful shopping assistant."
        assert sum(tokenizer.count_messages(list(last_request[1:]))) <= 1_600
        assert len(last_request) < len(stored)
        sent_results = [m for m in last_request if m.role == "tool"]
        assert len(sent_results) <= 1  # keep_last_tool_call_groups=1
        assert any(m.is_summary for r in responses for c in r.model_calls for m in c.request)
        # The newest question is always sent and answered from its tool result or the context.
        assert last_request[-1].text == _questions(12)[-1]

    asyncio.run(scenario())


def test_single_strategy_and_after_strategy_samples() -> None:
    async def scenario() -> None:
        book = PriceList(PRICES, detail_chars=1120)
        history = InMemoryHistoryProvider()
        compaction = CompactionProvider(
            before_strategy=SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False),
            after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1, prefix_stable=False),
            history_source_id=history.source_id,
        )
        agent = Agent(
            client=OfflineModel(),
            name="ShoppingAssistant",
            instructions="You are a helpful shopping assistant.",
            tools=[book.lookup_price],
            context_providers=[history, compaction],
        )
        session = agent.create_session()
        for item in ("laptop", "phone", "tablet"):
            reply = await agent.run(f"What's the price of a {item}?", session=session)
            assert PRICES[item] in reply.text
        stored = await history.load(session.session_id)
        # after_strategy rewrote the retained history: only the newest tool group keeps its raw result.
        assert [m for m in stored if m.role == "tool"] == [stored[-2]]
        collapsed = [m for m in stored if m.is_summary]
        assert len(collapsed) == 2
        assert all("lookup_price" in m.text for m in collapsed)
        assert validate(stored) == []

    asyncio.run(scenario())


def test_csharp_builder_registration_compacts_before_every_call_of_the_tool_loop() -> None:
    async def scenario() -> None:
        book = PriceList(PRICES, detail_chars=1120)
        summarizer_client = OfflineModel()
        pipeline = PipelineStrategy(
            ToolResultCompactionStrategy(tokens_exceed(0x200)),
            SummarizationStrategy(summarizer_client, tokens_exceed(0x500)),
            SlidingWindowStrategy(turns_exceed(4)),
            TruncationStrategy(tokens_exceed(0x8000)),
        )
        model = ScriptedChatClient([OfflineModel()])  # the offline model, every request kept
        sent = model.requests
        client = use_context_providers(model, CompactionProvider(pipeline))
        agent = Agent(
            client,
            name="ShoppingAssistant",
            instructions="You are a helpful shopping assistant.",
            tools=[book.lookup_price],
        )
        session = agent.create_session()
        for question in _questions(6):
            await agent.run(question, session=session)
        assert len(book.calls) == 6
        # Inside each tool loop the second call (after the tool result) was compacted too:
        # no request ever exceeds the last-resort budget, and none splits a call from its result.
        assert len(sent) == 18  # 6 price questions x 2 calls + 6 statements x 1 call
        for request in sent:
            assert validate(request) == []
            assert request[0].text == "You are a helpful shopping assistant."
        stored = await agent.history.load(session.session_id)
        assert sum(1 for m in stored if m.role == "user") == 12
        assert len(sent[-1]) < len(stored) + 1
        user_turns = [sum(1 for m in r if m.role == "user") for r in sent[-4:]]
        assert max(user_turns) <= 5  # the sliding window keeps the last turns only

    asyncio.run(scenario())


def test_ad_hoc_compaction_without_a_session() -> None:
    messages = [Message.user(f"message {i} " + "x" * 400) for i in range(40)]
    compacted = asyncio.run(apply_compaction(messages, strategy=TruncationStrategy(tokens_exceed(8000 // 10))))
    assert 0 < len(compacted) < len(messages)
    assert compacted == messages[-len(compacted) :]
