"""The model's own compaction controls (``CompactionProvider(agent_tools=True)``), end to end: a
runtime agent on the OpenAI-compatible client against a scripted chat-completions server on
127.0.0.1 that answers from what each request holds."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from contextledger._forgotten import REMOVED_MARKER
from contextledger.agents import Agent, CompactionProvider, FactsProvider, Session, use_context_providers
from contextledger.compaction import (
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.exceptions import ConfigurationError
from contextledger.facts import FactStore, RuleWriter, forget_facts
from contextledger.facts._forget import history_target
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import Message
from tests.loopback import json_endpoint
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    import openai  # noqa: F401  (OpenAIChatClient's SDK)

    from contextledger.clients.openai import OpenAIChatClient

pytestmark = openai_extra.skip

REF = re.compile(r'ref="([0-9a-f]+)"')


def stock_report(item: str) -> str:
    """A long tool result whose every line matters to whoever reads it again."""
    return "\n".join(f"{item} warehouse {n}: {n * 7 + len(item)} units, shelf {item}-{n:03d}" for n in range(60))


def lookup_stock(item: str) -> str:
    """Look up the stock of an item."""
    return stock_report(item)


def _reply(content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for call_id, name, arguments in calls
        ]
    return {
        "id": "chatcmpl-agent-tools",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _refusal(body: dict[str, Any]) -> str | None:
    """What a chat-completions API refuses: a tool message answering no open call, a call left
    unanswered before the next non-tool message, an empty message."""
    open_calls: set[str] = set()
    for message in body["messages"]:
        role = message["role"]
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return f"tool message answers no call: {message.get('tool_call_id')}"
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return f"calls left unanswered: {sorted(open_calls)}"
        if role == "assistant" and message.get("tool_calls"):
            open_calls = {call["id"] for call in message["tool_calls"]}
        elif not message.get("content"):
            return f"a {role} message with no content"
    return None


class ScriptedModel:
    """Answers each request from its last message: a user asks for stock, recall or compaction;
    a tool result is acknowledged.  Every request is recorded and checked as the API would."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        refused = _refusal(body)
        if refused is not None:
            return 400, {"error": {"message": refused, "type": "invalid_request_error"}}
        last = body["messages"][-1]
        self.calls += 1
        call_id = f"call_{self.calls}"
        if last["role"] == "tool":
            return 200, _reply(f"done ({len(last['content'])} characters read)")
        text = last["content"] if isinstance(last["content"], str) else ""
        if text.startswith("stock "):
            return 200, _reply(calls=[(call_id, "lookup_stock", {"item": text.split()[1]})])
        if text.startswith("recall"):
            refs = REF.findall(" ".join(str(m.get("content")) for m in body["messages"]))
            ref = refs[0] if refs else "none"
            return 200, _reply(calls=[(call_id, "recall_context", {"ref": text.split()[1] if " " in text else ref})])
        if text.startswith("find "):
            ref = REF.findall(" ".join(str(m.get("content")) for m in body["messages"]))[0]
            return 200, _reply(calls=[(call_id, "recall_context", {"ref": ref, "query": text.removeprefix("find ")})])
        if text.startswith("query "):
            return 200, _reply(calls=[(call_id, "query_database", {"name": text.split()[1]})])
        if text.startswith("compact"):
            return 200, _reply(calls=[(call_id, "compact_context", {"note": "long results"})])
        return 200, _reply("ok")


def query_database(name: str) -> str:
    """Describe a database."""
    return f"{name}: 12 tables, 3 replicas, owner team-ops; {name} answers in 4 ms"


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {entry["function"]["name"] for entry in body.get("tools", ())}


def _size(body: dict[str, Any]) -> int:
    return len(json.dumps(body["messages"]))


def _tool_results(messages: list[Message]) -> list[str]:
    return [c.result for m in messages for c in m.function_results]


def test_recall_returns_the_collapsed_result_whole_and_the_tools_are_offered_in_every_call() -> None:
    model = ScriptedModel()
    history = InMemoryHistoryProvider()

    async def scenario(url: str) -> None:
        collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            history=history,
            context_providers=[CompactionProvider(collapse, agent_tools=True)],
        )
        session = Session("s")
        for item in ("apples", "pears", "plums"):
            await agent.run(f"stock {item}", session=session)
        collapsed = [m["content"] for m in model.requests[-1]["messages"] if "[Tool results:" in str(m["content"])]
        assert len(collapsed) == 2
        assert all(REF.search(line) for line in collapsed)
        response = await agent.run("recall", session=session)  # the first ref the request shows: apples
        recalled = response.messages[1].function_results[0].result
        assert stock_report("apples") in recalled
        assert recalled.startswith('[recalled ref="')
        assert "cut" not in recalled.splitlines()[0]

    with json_endpoint(model) as url:
        asyncio.run(scenario(url))
    assert all(_tool_names(body) == {"lookup_stock", "recall_context", "compact_context"} for body in model.requests)
    assert len(model.requests) == 8  # a tool round and an answer per turn
    # The same collapsed line, byte for byte, in every request after it was written.
    first_lines = [
        next(m["content"] for m in b["messages"] if "[Tool results:" in str(m["content"])) for b in model.requests[4:]
    ]
    assert len(set(first_lines)) == 1
    stored = asyncio.run(history.load("s"))
    assert _tool_results(stored)[:3] == [stock_report(item) for item in ("apples", "pears", "plums")]
    assert not any("[Tool results:" in m.text or "set aside" in m.text for m in stored)  # lines of the view only


@pytest.mark.parametrize("facts_first", [False, True], ids=["alone", "after-a-facts-provider"])
def test_compact_context_makes_the_next_request_smaller_and_keeps_the_stored_history_whole(facts_first: bool) -> None:
    model = ScriptedModel()
    history = InMemoryHistoryProvider()

    async def scenario(url: str) -> str:
        # Its trigger never fires by itself here: only the model's request compacts.
        strategy = ToolResultCompactionStrategy(tokens_exceed(100_000), target=tokens_below(1_500))
        provider = CompactionProvider(strategy, agent_tools=True)
        # A facts block placed before the newest user message shapes what the compaction reads.
        facts = [FactsProvider(FactStore(), RuleWriter())] if facts_first else []
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            history=history,
            context_providers=[*facts, provider],
        )
        if facts_first:
            await agent.run("database=PostgreSQL", session=Session("s"))
        session = Session("s")
        for item in ("apples", "pears", "plums"):
            await agent.run(f"stock {item}", session=session)
        response = await agent.run("compact now", session=session)
        return response.messages[1].function_results[0].result

    with json_endpoint(model) as url:
        answer = asyncio.run(scenario(url))
    asked, after = model.requests[-2], model.requests[-1]
    assert _size(after) < _size(asked) // 2
    assert "[Tool results: lookup_stock" not in json.dumps(asked["messages"])  # never cut the call that asked
    assert asked["messages"][-1]["content"] == "compact now"
    numbers = [int(n) for n in re.findall(r"(\d+) to (\d+) tokens", answer)[0]]
    assert numbers[1] < numbers[0]
    assert "Compacted with tool_result_collapse" in answer
    stored = asyncio.run(history.load("s"))
    assert _tool_results(stored)[:3] == [stock_report(item) for item in ("apples", "pears", "plums")]


def test_an_invented_reference_and_a_reduced_one_are_error_results_saying_which() -> None:
    model = ScriptedModel()

    async def scenario(url: str) -> tuple[str, str]:
        history = InMemoryHistoryProvider()
        window = SlidingWindowStrategy(turns_exceed(2), minimum_preserved_turns=1)
        provider = CompactionProvider(window, agent_tools=True)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            history=history,
            context_providers=[provider],
        )
        session = Session("s")
        for item in ("apples", "pears", "plums", "figs"):
            await agent.run(f"stock {item}", session=session)
        notices = [m["content"] for m in model.requests[-1]["messages"] if "set aside" in str(m["content"])]
        assert notices
        assert REF.search(notices[0])
        ref = REF.findall(notices[0])[0]
        invented = (await agent.run("recall 0123456789ab", session=session)).messages[1].function_results[0].result
        # A retained-history reduction (here: the history rewritten by hand) removes what the ref named.
        kept = await history.load("s")
        await history.replace("s", kept[8:])
        gone = (await agent.run(f"recall {ref}", session=session)).messages[1].function_results[0].result
        return invented, gone

    with json_endpoint(model) as url:
        invented, gone = asyncio.run(scenario(url))
    assert invented.startswith("Error:")
    assert "names nothing this conversation set aside" in invented
    assert gone.startswith("Error:")
    assert "retained-history reduction removed them" in gone


def test_without_agent_tools_nothing_changes_and_bad_settings_are_refused() -> None:
    collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
    assert CompactionProvider(collapse).model_tools() == ()
    with pytest.raises(ConfigurationError, match="before_strategy"):
        CompactionProvider(after_strategy=collapse, agent_tools=True)
    with pytest.raises(ConfigurationError, match="recall_limit"):
        CompactionProvider(collapse, agent_tools=True, recall_limit=10)

    def recall_context(ref: str) -> str:
        """A tool of the application's own with the provider's name."""
        return ref

    from contextledger.clients import OfflineModel  # noqa: PLC0415

    with pytest.raises(ConfigurationError, match="recall_context"):
        Agent(
            OfflineModel(), tools=[recall_context], context_providers=[CompactionProvider(collapse, agent_tools=True)]
        )


def test_after_forget_recall_returns_the_rewritten_text_never_the_forgotten_value() -> None:
    model = ScriptedModel()
    history = InMemoryHistoryProvider()
    store = FactStore()

    async def scenario(url: str) -> tuple[str, str]:
        collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[query_database, lookup_stock],
            history=history,
            context_providers=[FactsProvider(store, RuleWriter()), CompactionProvider(collapse, agent_tools=True)],
        )
        session = Session("s")
        await agent.run("database=PostgreSQL", session=session)
        await agent.run("query PostgreSQL", session=session)
        await agent.run("stock apples", session=session)  # the query's group is collapsed now
        line = next(
            m["content"] for m in model.requests[-1]["messages"] if "[Tool results: query_database" in str(m["content"])
        )
        ref = REF.findall(line)[0]
        before = (await agent.run(f"recall {ref}", session=session)).messages[1].function_results[0].result
        assert query_database("PostgreSQL") in before
        await forget_facts(store, "database", histories=[history_target(history, "s")])
        after = (await agent.run(f"recall {ref}", session=session)).messages[1].function_results[0].result
        return line, after

    with json_endpoint(model) as url:
        line, after = asyncio.run(scenario(url))
    assert "PostgreSQL" in line  # the collapsed line itself named the value before the forget
    assert not after.startswith("Error:")
    assert REMOVED_MARKER in after
    assert "PostgreSQL" not in after
    assert "PostgreSQL" not in json.dumps(model.requests[-1]["messages"])  # nor anything else sent since


def test_a_recalled_group_longer_than_the_bound_is_cut_with_a_marker_that_says_so() -> None:
    model = ScriptedModel()

    async def scenario(url: str) -> str:
        collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            context_providers=[CompactionProvider(collapse, agent_tools=True, recall_limit=500)],
        )
        session = Session("s")
        for item in ("apples", "pears"):
            await agent.run(f"stock {item}", session=session)
        return (await agent.run("recall", session=session)).messages[1].function_results[0].result

    with json_endpoint(model) as url:
        recalled = asyncio.run(scenario(url))
    head, *body = recalled.splitlines()
    assert "cut at 500 of" in head
    assert body[-1].startswith("[... cut here:")
    assert "recall_context returns at most 500" in body[-1]
    kept = "\n".join(body[:-1])
    assert len(kept) == 500
    assert kept.startswith("assistant called lookup_stock")


def test_registered_on_the_client_the_tools_are_offered_and_recall_works_the_same() -> None:
    model = ScriptedModel()

    async def scenario(url: str) -> str:
        collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
        client = use_context_providers(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            CompactionProvider(collapse, agent_tools=True),
        )
        agent = Agent(client, tools=[lookup_stock])
        session = Session("s")
        for item in ("apples", "pears"):
            await agent.run(f"stock {item}", session=session)
        return (await agent.run("recall", session=session)).messages[1].function_results[0].result

    with json_endpoint(model) as url:
        recalled = asyncio.run(scenario(url))
    assert stock_report("apples") in recalled
    assert all(_tool_names(body) == {"lookup_stock", "recall_context", "compact_context"} for body in model.requests)


def test_a_ref_whose_group_the_provider_s_own_after_strategy_removed_is_an_error_result() -> None:
    model = ScriptedModel()

    async def scenario(url: str) -> tuple[str, str]:
        collapse = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1)
        # The retained history keeps the last two turns once it holds more than three.
        reduce = SlidingWindowStrategy(turns_exceed(3), minimum_preserved_turns=2)
        provider = CompactionProvider(collapse, reduce, agent_tools=True)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            context_providers=[provider],
        )
        session = Session("s")
        await agent.run("stock apples", session=session)
        await agent.run("stock pears", session=session)
        line = next(m["content"] for m in model.requests[-1]["messages"] if "[Tool results:" in str(m["content"]))
        ref = REF.findall(line)[0]
        kept = (await agent.run(f"recall {ref}", session=session)).messages[1].function_results[0].result
        for item in ("plums", "figs"):
            await agent.run(f"stock {item}", session=session)
        gone = (await agent.run(f"recall {ref}", session=session)).messages[1].function_results[0].result
        return kept, gone

    with json_endpoint(model) as url:
        kept, gone = asyncio.run(scenario(url))
    assert stock_report("apples") in kept
    assert gone.startswith('Error: ref="')
    assert "a retained-history reduction removed them" in gone


def test_a_query_recalls_only_the_messages_that_best_match_it_a_call_with_its_result() -> None:
    """A notice can stand for a long run of turns; the model that looks for one detail names it and
    gets back the messages that hold it (inflections aside), not the whole run."""
    model = ScriptedModel()
    said = [
        "the deploy region is eu-north-5",
        "the budget cap is 956 dollars, never exceeded without approval",
        "stock apples",
        "the on-call owner this week is Aura",
        "reviews happen on Thursdays",
        "the staging host is jjspq.internal",
    ]

    async def scenario(url: str) -> list[str]:
        window = SlidingWindowStrategy(turns_exceed(3), minimum_preserved_turns=2)
        agent = Agent(
            OpenAIChatClient("scripted", base_url=url, api_key="test-key"),
            tools=[lookup_stock],
            context_providers=[CompactionProvider(window, agent_tools=True)],
        )
        session = Session("s")
        for text in said:
            await agent.run(text, session=session)
        found = []
        for query in ("find What is the budget cap?", "find which apples were stocked", "find zebra crossings"):
            found.append((await agent.run(query, session=session)).messages[1].function_results[0].result)
        return found

    with json_endpoint(model) as url:
        budget, apples, nothing = asyncio.run(scenario(url))
    recall = next(entry for entry in model.requests[-1]["tools"] if entry["function"]["name"] == "recall_context")
    assert "query" in recall["function"]["parameters"]["properties"]
    assert budget.startswith('[recalled ref="')
    assert "the ones closest to 'What is the budget cap?'" in budget.splitlines()[0]
    assert "user: the budget cap is 956 dollars" in budget
    for elsewhere in ("eu-north-5", "Aura", "jjspq"):
        assert elsewhere not in budget
    # "stocked" finds "stock", and the call comes back with its whole result.
    assert "assistant called lookup_stock" in apples
    assert stock_report("apples") in apples
    assert "budget" not in apples
    assert "4 of its 12 messages" in apples.splitlines()[0]  # the exchange: asked, called, result, answer
    assert "none of its" in nothing
    assert "without a query" in nothing
