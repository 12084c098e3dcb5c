"""The compaction guide's Python samples, run inside real MAF agents with contextledger's strategies.

Each sample is written as the guide writes it, with the strategies imported from
``contextledger.integrations.maf`` instead of ``agent_framework._compaction``.  The
agent talks through MAF's own OpenAI client to a server on 127.0.0.1, which records
every request; each request the agent sent is compared with what
``contextledger.compaction.apply_compaction`` computes on the same messages.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeAlias

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger import compaction
from contextledger.clients import ScriptedChatClient
from contextledger.exceptions import ConfigurationError, ModelError
from contextledger.messages import Message, validate
from tests.integrations.conftest import ChatServer
from tests.optional_imports import try_import
from tests.sizes import examples

with try_import("maf") as maf_extra:
    import agent_framework as maf
    from agent_framework import Agent, CompactionProvider, InMemoryHistoryProvider

    from contextledger.integrations.maf import (
        AgentFrameworkChatClient,
        AgentFrameworkStrategy,
        AgentFrameworkTokenizer,
        CharacterEstimatorTokenizer,
        ContextLedgerChatClient,
        ContextWindowCompactionStrategy,
        SelectiveToolCallCompactionStrategy,
        SlidingWindowStrategy,
        SummarizationStrategy,
        TokenBudgetComposedStrategy,
        ToolResultCompactionStrategy,
        TruncationStrategy,
        apply_compaction,
        from_maf_messages,
    )
    from tests.integrations.maf_support import (
        AGENT_NAME,
        CUSTOM_PROMPT,
        INSTRUCTIONS,
        Shop,
        difference,
        expected,
        is_agent_request,
        maf_client,
        question,
        sent,
        summary_reply,
    )

pytestmark = maf_extra.skip

TURNS = 12
RESULT_CHARS = 12_000  # 12 turns of these pass every threshold in the guide (32 000 tokens is the largest)

# Each sample builds its strategy from a summariser client, so the agent side can use MAF's
# client on the test server and the reference side a scripted client giving the same answers.
Sample: TypeAlias = "Callable[[Any], AgentFrameworkStrategy]"


def truncation(summarizer_client: Any) -> AgentFrameworkStrategy:
    return TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer())


def sliding_window(summarizer_client: Any) -> AgentFrameworkStrategy:
    return SlidingWindowStrategy(keep_last_groups=20)


def tool_result(summarizer_client: Any) -> AgentFrameworkStrategy:
    return ToolResultCompactionStrategy(keep_last_tool_call_groups=1)


def selective_tool(summarizer_client: Any) -> AgentFrameworkStrategy:
    return SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)


def summarization(summarizer_client: Any) -> AgentFrameworkStrategy:
    return SummarizationStrategy(client=summarizer_client, target_count=4, threshold=2)


def summarization_with_prompt(summarizer_client: Any) -> AgentFrameworkStrategy:
    return SummarizationStrategy(client=summarizer_client, target_count=4, prompt=CUSTOM_PROMPT)


def token_budget(summarizer_client: Any) -> AgentFrameworkStrategy:
    tokenizer = CharacterEstimatorTokenizer()
    return TokenBudgetComposedStrategy(
        token_budget=16_000,
        tokenizer=tokenizer,
        strategies=[
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            SummarizationStrategy(client=summarizer_client, target_count=4, threshold=2),
            SlidingWindowStrategy(keep_last_groups=20),
        ],
    )


SAMPLES: dict[str, Sample] = {
    "truncation": truncation,
    "sliding_window": sliding_window,
    "tool_result": tool_result,
    "selective_tool": selective_tool,
    "summarization": summarization,
    "summarization_with_prompt": summarization_with_prompt,
    "token_budget": token_budget,
}


def included(stored: list[maf.Message]) -> list[maf.Message]:
    return [m for m in stored if not m.additional_properties.get("_excluded")]


def agent_requests(server: ChatServer, start: int) -> list[dict[str, Any]]:
    return [request for request in server.requests[start:] if is_agent_request(request)]


async def shopping_session(
    server: ChatServer,
    compaction_provider: CompactionProvider,
    history: InMemoryHistoryProvider,
    reference: compaction.CompactionStrategy,
    shop: Shop,
) -> list[tuple[bool, dict[str, Any]]]:
    """The guide's registration sample, run for :data:`TURNS` questions; each turn's first request
    is checked against contextledger's own projection of the history it was built from.

    Returns, per turn, whether compaction changed what was sent, and the turn's first request.
    """
    agent = Agent(
        client=maf_client(server),
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=[shop.tool()],
        context_providers=[history, compaction_provider],
    )
    session = agent.create_session()
    turns: list[tuple[bool, dict[str, Any]]] = []
    for number in range(TURNS):
        stored = session.state.get(history.source_id, {}).get("messages", [])
        before = from_maf_messages(included(stored))
        projection = await compaction.apply_compaction(before, strategy=reference)
        start = len(server.requests)
        await agent.run(question(number), session=session)
        first, *follow_ups = agent_requests(server, start)
        want = expected([Message.system(INSTRUCTIONS), *projection, Message.user(question(number))])
        assert sent(first) == want, f"turn {number}: {difference(sent(first), want)}"
        for follow_up in follow_ups:  # the tool loop appends the call and its result, compacting nothing more
            assert sent(follow_up)[: len(want)] == want
        turns.append((len(projection) != len(before), first))
    return turns


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_seed_sample_as_before_strategy_sends_contextledgers_projection(chat_server: ChatServer, name: str) -> None:
    """``CompactionProvider(before_strategy=<sample>, history_source_id=history.source_id)`` inside a MAF
    agent: every request equals apply_compaction's projection, and the strategy really compacted."""
    shop = Shop(result_chars=RESULT_CHARS)
    chat_server.respond = shop.respond
    sample = SAMPLES[name]
    history = InMemoryHistoryProvider()
    provider = CompactionProvider(before_strategy=sample(maf_client(chat_server)), history_source_id=history.source_id)
    reference = sample(ScriptedChatClient([summary_reply])).strategy
    turns = asyncio.run(shopping_session(chat_server, provider, history, reference, shop))
    assert any(changed for changed, _ in turns), f"{name} never compacted in {TURNS} turns; the sample was not run"
    for request in chat_server.requests:
        assert validate(from_openai_request(request)) == [], "a request separated a tool call from its result"


def from_openai_request(request: dict[str, Any]) -> list[Message]:
    from contextledger.messages import from_openai  # noqa: PLC0415

    return from_openai(request["messages"])


def test_summariser_usage_reported_by_maf_client_is_recorded(chat_server: ChatServer) -> None:
    """The summariser is MAF's client; the usage the server reported reaches the strategy unchanged."""
    shop = Shop(result_chars=200)
    chat_server.respond = shop.respond
    strategy = SummarizationStrategy(client=maf_client(chat_server), target_count=4, threshold=2)
    history = InMemoryHistoryProvider()
    provider = CompactionProvider(before_strategy=strategy, history_source_id=history.source_id)
    reference = summarization(ScriptedChatClient([summary_reply])).strategy
    asyncio.run(shopping_session(chat_server, provider, history, reference, shop))
    summariser_requests = [r for r in chat_server.requests if not is_agent_request(r)]
    assert summariser_requests, "the summariser was never called"
    last = shop.respond(summariser_requests[-1])["usage"]
    usage = strategy.strategy.last_usage  # type: ignore[attr-defined]
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (last["prompt_tokens"], last["completion_tokens"])


def test_after_strategy_collapses_stored_history_and_never_sends_originals(chat_server: ChatServer) -> None:
    """The guide's ``before_strategy=SlidingWindowStrategy(keep_last_groups=20)`` with
    ``after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1)``: after each run the
    stored history holds one-line summaries in place of older tool groups (originals kept but excluded),
    and no request carries both a summary and the tool results it replaced."""
    shop = Shop(result_chars=3_000)
    chat_server.respond = shop.respond
    history = InMemoryHistoryProvider()
    provider = CompactionProvider(
        before_strategy=SlidingWindowStrategy(keep_last_groups=20),
        after_strategy=ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        history_source_id=history.source_id,
    )
    reference = compaction.SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False)  # MAF's exact window
    turns = asyncio.run(shopping_session(chat_server, provider, history, reference, shop))
    # MAF runs after_run providers in reverse order, so with [history, compaction] the collapse sees the
    # history as it was before the run: the newest kept group and the run's own stay verbatim.
    for number, (_, first) in enumerate(turns):
        messages = from_openai_request(first)
        verbatim = {m.text.split(":")[0] for m in messages if m.role == "tool"}
        collapsed = {m.text.split(": ")[2] for m in messages if m.text.startswith("[Tool results: lookup_price")}
        assert len(verbatim) == min(number, 2), f"turn {number}: {sorted(verbatim)} sent verbatim"
        assert not verbatim & collapsed, f"turn {number}: {sorted(verbatim & collapsed)} sent twice"
        if number < 6:  # later, the window of 20 groups drops the oldest summaries too
            assert len(collapsed) == max(number - 2, 0), f"turn {number}: summaries of {sorted(collapsed)}"
    assert collapsed, "the after strategy never collapsed anything"


def test_agent_compaction_strategy_compacts_every_model_call(chat_server: ChatServer) -> None:
    """``Agent(compaction_strategy=...)`` runs the strategy on MAF's whole message list before every
    model call, tool-loop calls included; each request equals contextledger's projection of that list."""
    shop = Shop(result_chars=500)
    chat_server.respond = shop.respond
    history = InMemoryHistoryProvider()
    window = SlidingWindowStrategy(keep_last_groups=4)
    agent = Agent(
        client=maf_client(chat_server),
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=[shop.tool()],
        context_providers=[history],
        compaction_strategy=window,
    )

    async def main() -> None:
        session = agent.create_session()
        for number in range(6):
            stored = from_maf_messages(session.state.get(history.source_id, {}).get("messages", []))
            start = len(chat_server.requests)
            await agent.run(question(number), session=session)
            first, follow_up = agent_requests(chat_server, start)
            conversation = [*stored, Message.user(question(number))]
            projection = await compaction.apply_compaction(conversation, strategy=window.strategy)
            assert sent(first) == expected([Message.system(INSTRUCTIONS), *projection])
            # The loop's second call sees the call and its result too, compacted again.
            call, result = from_openai_request(follow_up)[-2:]
            projection = await compaction.apply_compaction([*conversation, call, result], strategy=window.strategy)
            assert sent(follow_up)[1:] == expected(projection)

    asyncio.run(main())


def test_ad_hoc_apply_compaction_sample_leaves_input_untouched() -> None:
    """The guide's ad hoc sample on MAF messages: ``await apply_compaction(messages, strategy=
    TruncationStrategy(max_n=8_000, compact_to=4_000, tokenizer=tokenizer), tokenizer=tokenizer)``."""
    tokenizer = CharacterEstimatorTokenizer()
    messages: list[maf.Message] = [maf.Message("system", ["Be brief."])]
    for number in range(40):
        messages.append(maf.Message("user", [f"question {number} " + "detail " * 200]))
        messages.append(maf.Message("assistant", [f"answer {number} " + "more " * 200], author_name=AGENT_NAME))
    snapshot = [m.to_dict() for m in messages]

    compacted = asyncio.run(
        apply_compaction(
            messages,
            strategy=TruncationStrategy(max_n=8_000, compact_to=4_000, tokenizer=tokenizer),
            tokenizer=tokenizer,
        )
    )

    assert [m.to_dict() for m in messages] == snapshot, "apply_compaction changed the caller's messages"
    reference = asyncio.run(
        compaction.apply_compaction(
            from_maf_messages(messages),
            strategy=compaction.TruncationStrategy(
                max_n=8_000, compact_to=4_000, tokenizer=tokenizer, prefix_stable=False
            ),
            tokenizer=tokenizer,
        )
    )
    assert expected(from_maf_messages(compacted)) == expected(reference)
    assert len(compacted) < len(messages)
    assert compacted[0] is messages[0], "kept messages are the caller's own objects"
    assert sum(tokenizer.count_messages(reference)) <= 4_000


def test_a_maf_tokenizer_counts_inside_contextledgers_strategies() -> None:
    """A sample that keeps MAF's own ``CharacterEstimatorTokenizer`` still runs: its counts drive the
    thresholds (so a smaller chars-per-token tokenizer compacts more)."""
    from agent_framework._compaction import CharacterEstimatorTokenizer as MafTokenizer  # noqa: PLC0415

    messages = [maf.Message("user" if n % 2 == 0 else "assistant", ["word " * 400]) for n in range(20)]
    maf_strategy = TruncationStrategy(max_n=2_000, compact_to=1_000, tokenizer=MafTokenizer())
    kept = asyncio.run(apply_compaction(messages, strategy=maf_strategy, tokenizer=MafTokenizer()))
    counted = [MafTokenizer().count_tokens(m.text) + 3 for m in kept]
    assert 0 < sum(counted) <= 1_000 < sum(MafTokenizer().count_tokens(m.text) + 3 for m in messages)


def test_a_failing_maf_summariser_fails_closed_inside_the_agent(chat_server: ChatServer) -> None:
    """The summariser (MAF's client) gets HTTP 500: nothing is replaced, the agent still answers, and
    what it sends is the uncompacted history."""
    shop = Shop(result_chars=100)

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        if not is_agent_request(request):
            raise RuntimeError("summariser down")
        return shop.respond(request)

    chat_server.respond = respond
    history = InMemoryHistoryProvider()
    strategy = SummarizationStrategy(client=maf_client(chat_server), target_count=4, threshold=2)
    provider = CompactionProvider(before_strategy=strategy, history_source_id=history.source_id)
    turns = asyncio.run(
        shopping_session(
            chat_server, provider, history, compaction.SlidingWindowStrategy(keep_last_groups=10_000), shop
        )
    )
    assert not any(changed for changed, _ in turns)
    assert any(not is_agent_request(r) for r in chat_server.requests), "the summariser was never asked"
    assert not any("[Summary]" in json.dumps(first) for _, first in turns)


def test_the_maf_client_adapter_reports_failures_as_model_errors(chat_server: ChatServer) -> None:
    def fail(request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("down")

    chat_server.respond = fail
    adapter = AgentFrameworkChatClient(maf_client(chat_server))
    with pytest.raises(ModelError, match="Agent Framework client"):
        asyncio.run(adapter.get_response([Message.user("hi")]))


# --- What MAF hands a strategy, and what it reads back ----------------------------------------


def _call(call_id: str, name: str = "get_weather") -> maf.Content:
    return maf.Content.from_function_call(call_id=call_id, name=name, arguments="{}")


def _result(call_id: str, result: str) -> maf.Message:
    return maf.Message("tool", [maf.Content.from_function_result(call_id=call_id, result=result)])


def test_the_adapters_estimator_is_a_maf_tokenizer_too() -> None:
    """The estimator handed to MAF (``Agent(tokenizer=...)``) answers MAF's ``count_tokens`` with the
    same rule contextledger counts text with, and a MAF agent runs with it."""
    tokenizer = CharacterEstimatorTokenizer()
    for text in ("", "a", "abcd", "abcde", "こんにちは" * 7):
        assert tokenizer.count_tokens(text) == tokenizer.count_text(text) == -(-len(text) // 4)
    scripted = ScriptedChatClient(["fine"])
    agent = maf.Agent(
        client=ContextLedgerChatClient(scripted),
        tokenizer=tokenizer,
        compaction_strategy=SlidingWindowStrategy(keep_last_groups=2),
    )
    history = [maf.Message("user", ["first " * 50]), maf.Message("assistant", ["reply " * 50])]

    async def run() -> maf.AgentResponse[Any]:
        return await agent.run([*history, maf.Message("user", ["and now?"])])

    response = asyncio.run(run())

    assert response.text == "fine"
    assert [message.text for message in scripted.requests[0]] == [history[1].text, "and now?"]


class _ExcludeOldestNonSystem:
    """A strategy written against MAF's own API: group annotations in, ``_excluded`` out."""

    async def __call__(self, messages: list[maf.Message]) -> bool:
        for message in messages:
            if message.role != "system":
                group = message.additional_properties["_group"]["id"]
                for other in messages:
                    if other.additional_properties["_group"]["id"] == group:
                        other.additional_properties["_excluded"] = True
                return True
        return False


def test_apply_compaction_runs_a_strategy_written_against_mafs_api() -> None:
    messages = [maf.Message("system", ["sys"]), maf.Message("user", ["hello"]), maf.Message("assistant", ["world"])]
    snapshot = [message.to_dict() for message in messages]

    projected = asyncio.run(apply_compaction(messages, strategy=_ExcludeOldestNonSystem()))

    assert projected == [messages[0], messages[2]]
    assert projected[0] is messages[0], "kept messages are the caller's"
    assert projected[1] is messages[2], "kept messages are the caller's"
    assert [message.to_dict() for message in messages] == snapshot, "the caller's list was annotated or changed"


def test_apply_compaction_refuses_what_is_no_strategy() -> None:
    class _AnswersNone:
        async def __call__(self, messages: list[maf.Message]) -> None:
            return None

    messages = [maf.Message("user", ["hello"])]
    with pytest.raises(ConfigurationError, match="must return True or False"):
        asyncio.run(apply_compaction(messages, strategy=_AnswersNone()))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="strategy must be a contextledger strategy or a MAF one"):
        asyncio.run(apply_compaction(messages, strategy="truncate"))  # type: ignore[arg-type]
    assert messages[0].additional_properties == {}


def _weather_history() -> list[maf.Message]:
    return [
        maf.Message("user", ["weather?"], message_id="u1"),
        maf.Message("assistant", [_call("c1")], message_id="a1"),
        maf.Message("tool", [maf.Content.from_function_result(call_id="c1", result="sunny")], message_id="t1"),
        maf.Message("assistant", [_call("c2", "search_docs")], message_id="a2"),
        maf.Message("tool", [maf.Content.from_function_result(call_id="c2", result="3 docs")], message_id="t2"),
        maf.Message("assistant", ["done"], message_id="a3"),
    ]


def test_summaries_written_through_the_adapter_carry_ids_and_maf_trace_links() -> None:
    """Each summary gets a message id of its own and MAF's links both ways, so MAF's tool loop and a
    user auditing a summary can tell what it stands for."""
    messages = _weather_history()
    maf.annotate_message_groups(messages)

    assert asyncio.run(ToolResultCompactionStrategy(keep_last_tool_call_groups=0)(messages)) is True

    summaries = [message for message in messages if (message.text or "").startswith("[Tool results:")]
    assert [summary.text for summary in summaries] == [
        "[Tool results: get_weather: sunny]",
        "[Tool results: search_docs: 3 docs]",
    ]
    ids = [summary.message_id for summary in summaries]
    assert all(ids)
    assert len(set(ids)) == 2
    for summary, originals in zip(summaries, (["a1", "t1"], ["a2", "t2"])):
        links = summary.additional_properties["_group"]
        assert links["_summary_of_message_ids"] == originals
        assert summary.additional_properties["_excluded"] is False
        assert links["kind"], "MAF's own annotation covers the summary"
        assert links["id"]
        for message in messages:
            if message.message_id in originals:
                assert message.additional_properties["_excluded"] is True
                assert message.additional_properties["_group"]["_summarized_by_summary_id"] == summary.message_id


def test_a_summarisation_summary_links_the_groups_it_replaced() -> None:
    messages = [maf.Message("user" if n % 2 == 0 else "assistant", [f"m{n}"], message_id=f"m{n}") for n in range(6)]
    strategy = SummarizationStrategy(client=ScriptedChatClient(["they talked"]), target_count=2, threshold=0)

    assert asyncio.run(strategy(messages)) is True

    summary = next(
        message for message in messages if "_summary_of_message_ids" in message.additional_properties.get("_group", {})
    )
    assert summary.message_id
    assert summary.text.endswith("they talked")
    replaced = summary.additional_properties["_group"]["_summary_of_message_ids"]
    assert replaced == ["m0", "m1", "m2", "m3"]
    assert [m.message_id for m in messages if m.additional_properties.get("_excluded")] == replaced


def test_a_tool_group_one_of_whose_results_maf_excluded_still_collapses() -> None:
    """MAF (or an earlier strategy) excluded one result of a two-call group: the rest of the unit still
    collapses, the summary quotes only what was still included, and the excluded result is linked."""
    messages = [
        maf.Message("user", ["u"], message_id="u"),
        maf.Message("assistant", [_call("c1"), _call("c2", "search_docs")], message_id="calls"),
        maf.Message("tool", [maf.Content.from_function_result(call_id="c1", result="sunny")], message_id="r1"),
        maf.Message("tool", [maf.Content.from_function_result(call_id="c2", result="x" * 8_000)], message_id="r2"),
        maf.Message("assistant", ["done"], message_id="done"),
    ]
    messages[3].additional_properties["_excluded"] = True

    assert asyncio.run(ToolResultCompactionStrategy(keep_last_tool_call_groups=0)(messages)) is True

    projected = [message for message in messages if not message.additional_properties.get("_excluded")]
    assert [message.text for message in projected] == ["u", "[Tool results: get_weather: sunny]", "done"]
    summary = projected[1]
    assert summary.additional_properties["_group"]["_summary_of_message_ids"] == ["calls", "r1", "r2"]
    excluded_result = next(message for message in messages if message.message_id == "r2")
    assert excluded_result.additional_properties["_group"]["_summarized_by_summary_id"] == summary.message_id


def test_a_call_still_waiting_for_its_result_is_not_hidden() -> None:
    """Only results MAF excluded hide their call; a call with no result yet (an approval pending) stays
    as it is, and the window keeps the incomplete unit whole."""
    messages = [
        maf.Message("user", ["u"]),
        maf.Message("assistant", ["a"]),
        maf.Message("user", ["pay it"]),
        maf.Message("assistant", [_call("pending", "pay")]),
    ]
    kept = asyncio.run(apply_compaction(messages, strategy=SlidingWindowStrategy(keep_last_groups=2)))
    assert kept[-1] is messages[-1]
    assert [content.call_id for content in kept[-1].contents] == ["pending"]


def test_mafs_summarisation_spellings_are_accepted() -> None:
    from agent_framework._compaction import CharacterEstimatorTokenizer as MafTokenizer  # noqa: PLC0415

    client = ScriptedChatClient(["short"])
    spelled = SummarizationStrategy(client=client, max_summary_input_tokens=1_000, tokenizer=MafTokenizer())
    assert isinstance(spelled.strategy, compaction.SummarizationStrategy)
    assert spelled.strategy.max_input_tokens == 1_000
    assert isinstance(spelled.strategy.tokenizer, AgentFrameworkTokenizer)
    with pytest.raises(ConfigurationError, match="same setting"):
        SummarizationStrategy(client=client, max_summary_input_tokens=1_000, max_input_tokens=2_000)


def test_the_context_window_policy_runs_under_mafs_name_and_arguments() -> None:
    """MAF's harness default, spelled as MAF spells it: an old tool round over half the input budget is
    collapsed to its one-line summary, the newest kept verbatim, nothing truncated."""
    messages = [maf.Message("system", ["rules"])]
    for number in range(3):
        messages.append(maf.Message("user", [f"u{number}"]))
        messages.append(maf.Message("assistant", [_call(f"c{number}")]))
        messages.append(_result(f"c{number}", "x" * 2_000))
    strategy = ContextWindowCompactionStrategy(
        max_context_window_tokens=2_000, max_output_tokens=200, keep_last_tool_call_groups=1
    )

    assert asyncio.run(strategy(messages)) is True

    sent = [message for message in messages if not message.additional_properties.get("_excluded")]
    assert [message.text for message in sent if message.role == "user"] == ["u0", "u1", "u2"]
    assert [message.contents[0].call_id for message in sent if message.role == "tool"] == ["c2"]
    assert sum(1 for message in sent if (message.text or "").startswith("[Tool results: get_weather:")) == 2
    with pytest.raises(ConfigurationError, match="max_output_tokens"):
        ContextWindowCompactionStrategy(max_context_window_tokens=1_000, max_output_tokens=1_000)


def test_sliding_window_takes_preserve_system_false_but_never_drops_a_system_message() -> None:
    window = SlidingWindowStrategy(keep_last_groups=1, preserve_system=False)
    plain = [maf.Message("user", ["u1"]), maf.Message("assistant", ["a1"]), maf.Message("user", ["u2"])]
    assert asyncio.run(window(plain)) is True
    assert [m.additional_properties.get("_excluded", False) for m in plain] == [True, True, False]

    with_system = [maf.Message("system", ["rules"]), *[maf.Message("user", [f"u{n}"]) for n in range(3)]]
    with pytest.raises(ConfigurationError, match="always keeps system messages"):
        asyncio.run(window(with_system))
    assert all(not m.additional_properties for m in with_system), "state left as it was"
    with pytest.raises(ConfigurationError, match="preserve_system must be True or False"):
        SlidingWindowStrategy(keep_last_groups=1, preserve_system="no")


# --- The adapter's mapping keeps every call with its results ----------------------------------


@st.composite
def maf_histories(draw: st.DrawFn) -> list[maf.Message]:
    """Turns of user text, tool rounds (one or two calls, their results) and replies; some messages
    already excluded by MAF, as an earlier strategy or the host may have left them."""
    messages: list[maf.Message] = [maf.Message("system", ["rules"])]
    calls = 0
    for turn in range(draw(st.integers(1, 5))):
        messages.append(maf.Message("user", [f"question {turn} " + "q" * draw(st.integers(0, 300))]))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{calls + n}" for n in range(draw(st.integers(1, 2)))]
            calls += len(ids)
            messages.append(maf.Message("assistant", [_call(call_id) for call_id in ids]))
            messages.extend(_result(call_id, "r" * draw(st.integers(1, 400))) for call_id in ids)
        messages.append(maf.Message("assistant", [f"answer {turn}"]))
    for message in messages[1:]:
        if draw(st.integers(0, 9)) == 0:
            message.additional_properties["_excluded"] = True
    return messages


def _unanswered_and_orphans(messages: list[maf.Message]) -> tuple[set[str | None], set[str | None]]:
    """Calls sent without one of their results, and results sent without their call."""
    sent = [message for message in messages if not message.additional_properties.get("_excluded")]
    called = {c.call_id for m in sent for c in m.contents if c.type == "function_call"}
    answered = {c.call_id for m in sent for c in m.contents if c.type == "function_result"}
    every = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    return {call for call in called if call in every and call not in answered}, answered - called


ADAPTER_STRATEGIES: dict[str, Callable[[], AgentFrameworkStrategy]] = {
    "truncation": lambda: TruncationStrategy(max_n=300, compact_to=200, tokenizer=CharacterEstimatorTokenizer()),
    "window": lambda: SlidingWindowStrategy(keep_last_groups=3),
    "tool results": lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
    "selective": lambda: SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=0),
    "budget": lambda: TokenBudgetComposedStrategy(
        token_budget=250,
        tokenizer=CharacterEstimatorTokenizer(),
        strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=0)],
    ),
}


@settings(max_examples=examples(60), deadline=None)
@given(maf_histories(), st.sampled_from(sorted(ADAPTER_STRATEGIES)), st.booleans())
def test_what_maf_sends_after_any_strategy_never_splits_a_call_from_its_results(
    messages: list[maf.Message], name: str, annotated_by_maf: bool
) -> None:
    """On lists MAF has annotated (as its chat client does before a strategy) or not."""
    if annotated_by_maf:
        maf.annotate_message_groups(messages)
    unanswered_before, orphans_before = _unanswered_and_orphans(messages)
    excluded_before = [message for message in messages if message.additional_properties.get("_excluded")]

    asyncio.run(ADAPTER_STRATEGIES[name]()(messages))

    unanswered, orphans = _unanswered_and_orphans(messages)
    assert unanswered <= unanswered_before, f"{name} sent calls without their results: {unanswered}"
    assert orphans <= orphans_before, f"{name} sent results without their call: {orphans}"
    assert all(message.additional_properties["_excluded"] for message in excluded_before), "MAF's exclusions undone"
    assert messages[0].additional_properties.get("_excluded") is not True, "the system message was dropped"
    summaries = [
        message for message in messages if "_summary_of_message_ids" in message.additional_properties.get("_group", {})
    ]
    assert len({summary.message_id for summary in summaries}) == len(summaries)
