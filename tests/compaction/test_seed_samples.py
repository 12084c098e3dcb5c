"""Every code sample of the compaction guide, run against contextledger.

The guide shows the same strategies twice: once in C# (trigger/target style) and
once in Python (keyword style).  Each sample is reproduced here with the library's
names and run on a conversation built so that the effect the guide promises can be
seen and checked exactly, not merely that the call succeeds.

Samples that register a strategy with an agent (``CompactionProvider`` inside
``UseAIContextProviders``, ``ChatClientAgentOptions`` or ``Agent(context_providers=...)``)
are not covered here: they need the agent integration, which has its own tests.
The strategies those samples build are the same objects exercised below.
"""

from __future__ import annotations

import asyncio
import itertools

from contextledger import FunctionCallContent, Message, to_openai
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    CharacterEstimatorTokenizer,
    GroupKind,
    MessageGroup,
    MessageIndex,
    PipelineStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    all_of,
    apply_compaction,
    compact_with_report,
    has_tool_calls,
    tokens_exceed,
    turns_exceed,
)

ESTIMATE = CharacterEstimatorTokenizer()


def tool_group(call_id: str, name: str, result: str, arguments: str = "{}") -> list[Message]:
    """An assistant call and its result: the atomic unit every strategy must keep together."""
    return [
        Message.assistant(calls=[FunctionCallContent(call_id, name, arguments)]),
        Message.tool(call_id, result),
    ]


def padded(label: str, tokens: int) -> str:
    """Text that the 4-characters-a-token estimate counts as about ``tokens`` tokens."""
    return f"{label} " + "x" * (4 * tokens)


def included(index: MessageIndex) -> list[MessageGroup]:
    return index.live


def excluded_for(index: MessageIndex, reason: str) -> list[MessageGroup]:
    return [g for g in index.groups if g.excluded and g.exclusion_reason == reason]


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


# Triggers -------------------------------------------------------------------------------------


def test_all_of_tool_calls_and_tokens_fires_only_when_both_hold() -> None:
    """C# ``CompactionTriggers.All(HasToolCalls(), TokensExceed(2000))``: an AND, so each
    condition alone must not fire it."""
    trigger = all_of(has_tool_calls(), tokens_exceed(2000))
    small_with_tools = MessageIndex([Message.user("weather?"), *tool_group("c1", "get_weather", "sunny")])
    big_without_tools = MessageIndex([Message.user(padded("long", 2100))])
    big_with_tools = MessageIndex([Message.user(padded("long", 2100)), *tool_group("c1", "get_weather", "sunny")])

    assert small_with_tools.included_tokens <= 2000
    assert big_without_tools.included_tokens > 2000
    assert trigger(small_with_tools) is False
    assert trigger(big_without_tools) is False
    assert trigger(big_with_tools) is True


def test_a_plain_function_on_the_index_is_a_trigger() -> None:
    """C# ``delegate bool CompactionTrigger(MessageIndex index)``: any callable on the index
    works, and with no target the strategy stops as soon as it no longer fires."""

    def more_than_five_messages(index: MessageIndex) -> bool:
        return index.included_messages > 5

    messages = [Message.system("sys")] + [Message.user(f"u{i}") for i in range(8)]
    strategy = TruncationStrategy(trigger=more_than_five_messages, minimum_preserved=1)
    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert texts(result) == ["sys", "u4", "u5", "u6", "u7"]


# Strategy protocol and tokenizer ------------------------------------------------------------------


def test_a_strategy_reports_whether_it_changed_the_index_it_was_given() -> None:
    """Python ``CompactionStrategy`` protocol: an async call that edits in place and returns
    True only when something changed; a second run with nothing left to do returns False."""
    index = MessageIndex([Message.system("sys")] + [Message.user(f"u{i}") for i in range(5)])
    strategy = TruncationStrategy(max_n=3)

    assert asyncio.run(strategy.compact(index)) is True
    assert texts(index.projection()) == ["sys", "u3", "u4"]
    assert asyncio.run(strategy.compact(index)) is False
    assert texts(index.projection()) == ["sys", "u3", "u4"]


def test_character_estimator_counts_four_characters_a_token() -> None:
    """``tokenizer = CharacterEstimatorTokenizer()``: the 4-character heuristic, rounded up,
    plus the per-message framing, and labelled as an estimate."""
    tokenizer = CharacterEstimatorTokenizer()

    assert tokenizer.is_estimate is True
    assert tokenizer.name == "estimate/4"
    assert [tokenizer.count_text(t) for t in ("", "abc", "abcd", "abcde", "a" * 8)] == [0, 1, 1, 2, 2]
    assert tokenizer.count_message(Message.user("abcde")) == 3 + 2


# Truncation -----------------------------------------------------------------------------------


def test_csharp_truncation_drops_oldest_until_32k_tokens() -> None:
    """``TruncationCompactionStrategy(trigger: TokensExceed(0x8000), minimumPreserved: 10)``:
    the oldest groups go, and only as many as needed to get back to 32,768 tokens."""
    messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 1000)) for i in range(40)]
    strategy = TruncationStrategy(trigger=tokens_exceed(0x8000), minimum_preserved=10)
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    dropped = excluded_for(result.index, "truncation")
    assert result.after["included_tokens"] <= 0x8000
    assert result.after["included_tokens"] + dropped[-1].token_count > 0x8000  # one fewer would not do
    assert result.messages == [messages[0], *messages[1 + len(dropped) :]]
    assert len(result.messages) - 1 > 10


def test_csharp_truncation_keeps_ten_groups_even_over_budget() -> None:
    """``minimumPreserved: 10`` is a floor: when ten groups alone exceed the budget, ten remain."""
    messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 5000)) for i in range(12)]
    strategy = TruncationStrategy(trigger=tokens_exceed(0x8000), minimum_preserved=10)
    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert result == [messages[0], *messages[-10:]]
    assert sum(ESTIMATE.count_messages(result)) > 0x8000


def test_python_truncation_trims_from_32000_to_16000_tokens() -> None:
    """``TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=..., prefix_stable=False)``:
    fires above 32,000 tokens and stops at the first point at or under 16,000 (the seed's rule)."""
    messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 1000)) for i in range(40)]
    strategy = TruncationStrategy(
        max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer(), prefix_stable=False
    )
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    dropped = excluded_for(result.index, "truncation")
    assert result.before["included_tokens"] > 32_000
    assert result.after["included_tokens"] <= 16_000
    assert result.after["included_tokens"] + dropped[-1].token_count > 16_000
    assert result.messages == [messages[0], *messages[1 + len(dropped) :]]


def test_python_truncation_by_default_cuts_in_whole_steps_of_16000_tokens() -> None:
    """The seed's sample as written (prefix-stable, design.md#prefix-stability): the oldest groups go in whole steps of
    max_n - compact_to = 16,000 tokens, the fewest that bring the history to 32,000 or under, so the
    same cut serves every request until the history has grown by another 16,000 tokens."""
    strategy = TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer())
    cuts: list[int] = []
    for count in range(30, 80):
        messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 1000)) for i in range(count)]
        result = asyncio.run(compact_with_report(messages, strategy=strategy))
        assert result.after["included_tokens"] <= 32_000
        dropped = excluded_for(result.index, "truncation")
        assert result.messages == [messages[0], *messages[1 + len(dropped) :]]
        cuts.append(len(dropped))
    # 1,003 tokens a message (and 5 for the system message): the cut moves by 16 messages (the fewest
    # reaching 16,000 tokens) each time 16 more messages have come, and not in between.
    assert sorted(set(cuts)) == [0, 16, 32, 48]
    moves = [count for count, (before, after) in enumerate(itertools.pairwise(cuts), 31) if before != after]
    assert [b - a for a, b in itertools.pairwise(moves)] == [16, 16]


def test_python_truncation_leaves_a_history_under_32000_tokens_alone() -> None:
    """The same strategy does nothing until the trigger threshold is crossed, even though the
    history is far above ``compact_to``."""
    messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 1000)) for i in range(30)]
    strategy = TruncationStrategy(max_n=32_000, compact_to=16_000, tokenizer=CharacterEstimatorTokenizer())
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    assert 16_000 < result.before["included_tokens"] <= 32_000
    assert result.messages == messages
    assert result.events == []


# Sliding window -------------------------------------------------------------------------------


def test_csharp_sliding_window_keeps_only_the_last_four_user_turns() -> None:
    """``SlidingWindowCompactionStrategy(trigger: TurnsExceed(4))``: whole turns (user message,
    tool calls and replies) are dropped oldest first until four remain; system stays."""
    messages = [Message.system("sys")]
    for turn in range(1, 7):
        messages += [
            Message.user(f"q{turn}"),
            *tool_group(f"c{turn}", "lookup_price", f"{turn}0 EUR"),
            Message.assistant(f"a{turn}"),
        ]
    result = asyncio.run(compact_with_report(messages, strategy=SlidingWindowStrategy(trigger=turns_exceed(4))))

    assert result.after["included_turns"] == 4
    assert [m.text for m in result.messages if m.role == "user"] == ["q3", "q4", "q5", "q6"]
    assert result.messages == [messages[0], *messages[1 + 2 * 4 :]]  # each turn is 4 messages
    assert {g.turn for g in excluded_for(result.index, "sliding_window")} == {1, 2}


def test_python_sliding_window_by_default_moves_20_groups_at_a_time() -> None:
    """``SlidingWindowStrategy(keep_last_groups=20)`` with the default prefix-stable step: the 20
    newest groups always stay, and the older ones go 20 at a time, so the request's start changes
    once every 20 groups (design.md#prefix-stability): 30 groups keep all 30, 50 keep the newest 30."""
    for turns, kept in ((15, 30), (25, 30), (29, 38)):
        messages = [Message.system("sys")]
        for turn in range(turns):
            messages += [Message.user(f"q{turn}"), Message.assistant(f"a{turn}")]
        result = asyncio.run(apply_compaction(messages, strategy=SlidingWindowStrategy(keep_last_groups=20)))
        assert result == [messages[0], *messages[len(messages) - kept :]], turns


def test_python_sliding_window_keeps_the_last_20_groups() -> None:
    """``SlidingWindowStrategy(keep_last_groups=20)`` as the seed states it (``prefix_stable=False``):
    exactly the 20 newest non-system groups survive, plus the system message."""
    messages = [Message.system("sys")]
    for turn in range(15):
        messages += [Message.user(f"q{turn}"), Message.assistant(f"a{turn}")]
    result = asyncio.run(
        apply_compaction(messages, strategy=SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False))
    )

    assert result == [messages[0], *messages[-20:]]


# Tool results ---------------------------------------------------------------------------------


def test_csharp_tool_result_collapse_stops_once_under_512_tokens() -> None:
    """``ToolResultCompactionStrategy(trigger: TokensExceed(0x200))``: oldest tool groups become
    ``[Tool results: ...]`` lines until the history fits 512 tokens; the newest two groups
    (``MinimumPreserved`` 2) and everything that is not a tool group are untouched."""
    messages = [
        Message.system("You are a helpful assistant."),
        Message.user("Weather in Rome, then find docs."),
    ]
    messages += tool_group("w", "get_weather", "sunny, 18°C", '{"city": "Rome"}')
    for i in range(3):
        messages += tool_group(f"d{i}", "search_docs", f"doc {i}: " + "z" * 800)
    messages.append(Message.assistant("Here is what I found."))
    strategy = ToolResultCompactionStrategy(trigger=tokens_exceed(0x200))
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    collapsed = excluded_for(result.index, "collapsed")
    assert [g.messages[0].function_calls[0].call_id for g in collapsed] == ["w", "d0"]
    assert result.before["included_tokens"] > 0x200
    assert result.after["included_tokens"] <= 0x200
    assert texts(result.messages[2:4]) == [
        "[Tool results: get_weather: sunny, 18°C]",
        f"[Tool results: search_docs: doc 0: {'z' * 72}…]",  # each result capped at 80 characters
    ]
    assert result.messages[:2] == messages[:2]
    assert result.messages[4:] == messages[-5:]  # d1 was not needed, d2 and the reply are the floor


def test_python_tool_result_collapse_keeps_only_the_newest_tool_group_verbatim() -> None:
    """``ToolResultCompactionStrategy(keep_last_tool_call_groups=1)`` as the seed states it
    (``prefix_stable=False``): every older tool group is
    replaced, in place and in its own turn, by one ``[Tool results: ...]`` summary message."""
    messages = [
        Message.system("sys"),
        Message.user("weather in Rome?"),
        *tool_group("c1", "get_weather", "sunny, 18°C"),
        Message.assistant("Sunny."),
        Message.user("and find the docs"),
        *tool_group("c2", "search_docs", "3 documents"),
        *tool_group("c3", "search_docs", "2 more documents"),
        Message.assistant("Found five."),
    ]
    strategy = ToolResultCompactionStrategy(keep_last_tool_call_groups=1, prefix_stable=False)
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    assert texts(result.messages) == [
        "sys",
        "weather in Rome?",
        "[Tool results: get_weather: sunny, 18°C]",
        "Sunny.",
        "and find the docs",
        "[Tool results: search_docs: 3 documents]",
        "",
        "2 more documents",
        "Found five.",
    ]
    assert result.messages[6:8] == messages[-3:-1]
    summaries = [g for g in result.index.live if g.kind is GroupKind.SUMMARY]
    assert [g.turn for g in summaries] == [1, 2]
    assert all(g.messages[0].additional_properties["_summary_source"] == "tool_results" for g in summaries)


# Summarisation --------------------------------------------------------------------------------


def test_csharp_summarization_replaces_old_groups_and_keeps_newest_four() -> None:
    """``SummarizationCompactionStrategy(chatClient, TokensExceed(0x500), minimumPreserved: 4)``:
    the oldest groups, just enough to get under 1,280 tokens, go to the separate client and
    come back as one ``[Summary]`` message placed where they were."""
    messages = [Message.system("sys")]
    for i in range(6):
        messages += [Message.user(padded(f"q{i}", 200)), Message.assistant(padded(f"a{i}", 200))]
    client = ScriptedChatClient(["The user asked six questions."])
    strategy = SummarizationStrategy(chat_client=client, trigger=tokens_exceed(0x500), minimum_preserved=4)
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    summarized = excluded_for(result.index, "summarized")
    kept = messages[1 + len(summarized) :]
    assert result.messages[0] == messages[0]
    assert result.messages[1].text == "[Summary] The user asked six questions."
    assert result.messages[1].is_summary
    assert result.messages[2:] == kept
    assert len(kept) >= 4
    assert sum(ESTIMATE.count_messages([messages[0], *kept])) <= 0x500
    assert sum(ESTIMATE.count_messages([messages[0], *kept])) + summarized[-1].token_count > 0x500
    assert len(client.requests) == 1
    transcript = client.requests[0][1].text
    assert all(g.messages[0].text in transcript for g in summarized)
    assert all(m.text not in transcript for m in kept)


def test_csharp_summarization_minimum_preserved_four_is_a_floor() -> None:
    """With groups so large that four of them exceed 1,280 tokens, exactly four are kept."""
    messages = [Message.system("sys")] + [Message.user(padded(f"q{i}", 1000)) for i in range(6)]
    client = ScriptedChatClient(["Six long questions."])
    strategy = SummarizationStrategy(chat_client=client, trigger=tokens_exceed(0x500), minimum_preserved=4)
    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert texts(result[:2]) == ["sys", "[Summary] Six long questions."]
    assert result[2:] == messages[-4:]


def test_csharp_summarization_sends_the_custom_prompt_as_system_message() -> None:
    """``summarizationPrompt: "Summarize the key decisions and user preferences only."``: that text,
    and not the default prompt, is the system message the summariser receives."""
    prompt = "Summarize the key decisions and user preferences only."
    messages = [Message.system("sys")] + [Message.user(padded(f"q{i}", 300)) for i in range(8)]
    client = ScriptedChatClient(["Prefers aisle seats."])
    strategy = SummarizationStrategy(chat_client=client, trigger=tokens_exceed(0x500), summarization_prompt=prompt)
    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert len(client.requests) == 1
    request = client.requests[0]
    assert [m.role for m in request] == ["system", "user"]
    assert request[0].text == prompt
    assert result[1].text == "[Summary] Prefers aisle seats."
    assert result[-4:] == messages[-4:]


def test_python_summarization_fires_above_six_and_keeps_four_newest() -> None:
    """``SummarizationStrategy(client=..., target_count=4, threshold=2, prefix_stable=False)``:
    seven non-system messages trigger it, the four newest stay verbatim, the rest become one
    summary (the seed's rule; by default the cut falls on the grid of design.md#prefix-stability, see
    tests/compaction/test_summary_cache.py)."""
    conversation = [Message.system("sys")] + [
        Message.user(f"u{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(7)
    ]
    client = ScriptedChatClient(["Earlier: u0, a1, u2."])
    strategy = SummarizationStrategy(client=client, target_count=4, threshold=2, prefix_stable=False)

    six = asyncio.run(apply_compaction(conversation[:7], strategy=strategy))
    assert six == conversation[:7]
    assert client.requests == []

    seven = asyncio.run(apply_compaction(conversation, strategy=strategy))
    assert texts(seven) == ["sys", "[Summary] Earlier: u0, a1, u2.", "a3", "u4", "a5", "u6"]
    assert seven[2:] == conversation[-4:]
    assert client.requests[0][1].text == "user: u0\nassistant: a1\nuser: u2"


def test_python_summarization_with_custom_prompt() -> None:
    """``SummarizationStrategy(client=..., target_count=4, prompt=..., prefix_stable=False)``: the
    prompt given is what the summariser is told; the threshold keeps its default of 2."""
    prompt = "Summarize the key decisions and user preferences only."
    conversation = [Message.system("sys")] + [Message.user(f"u{i}") for i in range(7)]
    client = ScriptedChatClient(["Decided on u0-u2."])
    strategy = SummarizationStrategy(client=client, target_count=4, prompt=prompt, prefix_stable=False)
    result = asyncio.run(apply_compaction(conversation, strategy=strategy))

    assert client.requests[0][0].role == "system"
    assert client.requests[0][0].text == prompt
    assert texts(result) == ["sys", "[Summary] Decided on u0-u2.", "u3", "u4", "u5", "u6"]


# Pipeline -------------------------------------------------------------------------------------


def test_csharp_pipeline_runs_its_four_stages_in_order() -> None:
    """``PipelineCompactionStrategy(ToolResult(512), Summarization(1280), SlidingWindow(4 turns),
    Truncation(32K))``: on a history that needs all four, each stage acts, in order: old tool
    results collapse, the oldest turn is summarised, only four turns are kept, and the
    emergency backstop trims what is still above 32,768 tokens."""
    messages = [Message.system("You are a helpful shopping assistant.")]
    messages += [
        Message.user("What's the weather in Rome?"),
        *tool_group("c1", "get_weather", "sunny, 18°C"),
        Message.assistant("It is sunny."),
    ]
    # Too large for the summariser's input budget: summarisation stops before it.
    messages += [Message.user(padded("doc", 20_000)), Message.assistant("Noted.")]
    messages += [
        Message.user("Price of a laptop?"),
        *tool_group("c3", "lookup_price", "999 EUR"),
        Message.assistant("999 EUR."),
    ]
    for turn in (4, 5, 6, 7):
        messages += [Message.user(f"question {turn}"), Message.assistant(f"answer {turn}")]
    messages.append(Message.user("Write the long report."))
    parts = [Message.assistant(padded(f"part {i}", 975)) for i in range(34)]
    messages += parts

    client = ScriptedChatClient(["The user asked about the weather in Rome; it was sunny."])
    pipeline = PipelineStrategy(
        ToolResultCompactionStrategy(tokens_exceed(0x200)),
        SummarizationStrategy(client, tokens_exceed(0x500)),
        SlidingWindowStrategy(turns_exceed(4)),
        TruncationStrategy(tokens_exceed(0x8000)),
    )
    result = asyncio.run(compact_with_report(messages, strategy=pipeline))
    index = result.index

    assert [e.strategy for e in result.events] == [
        "tool_result_collapse",
        "summarization",
        "sliding_window",
        "truncation",
    ]
    # 1. tool results collapsed (gentle)
    assert [(g.kind, g.turn) for g in excluded_for(index, "collapsed")] == [
        (GroupKind.TOOL_CALL, 1),
        (GroupKind.TOOL_CALL, 3),
    ]
    # 2. the oldest turn summarised (moderate), its tool summary included
    assert {g.turn for g in excluded_for(index, "summarized")} == {1}
    assert "(earlier summary) [Tool results: get_weather: sunny, 18°C]" in client.requests[0][1].text
    summary = next(g for g in index.groups if g.origin == "summarization")
    assert summary.messages[0].text == "[Summary] The user asked about the weather in Rome; it was sunny."
    # 3. only the last four user turns kept (aggressive)
    assert {g.turn for g in excluded_for(index, "sliding_window")} == {2, 3, 4}
    # 4. oldest groups dropped while still over 32K (backstop), the summary first
    truncated = excluded_for(index, "truncation")
    assert truncated[0] is summary
    assert [g.turn for g in truncated[1:]] == [5, 5, 6, 6, 7, 7, 8, 8]
    assert result.after["included_tokens"] <= 0x8000
    assert result.after["included_tokens"] + truncated[-1].token_count > 0x8000
    assert result.messages == [messages[0], *parts[1:]]


# Selective tool-call removal ------------------------------------------------------------------


def test_python_selective_tool_call_removal_keeps_most_recent_tool_group() -> None:
    """``SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)`` as the seed states it
    (``prefix_stable=False``): older tool groups
    vanish entirely (call and result together, no summary), user and assistant text stay."""
    messages = [
        Message.system("sys"),
        Message.user("q1"),
        *tool_group("c1", "get_weather", "sunny"),
        Message.assistant("a1"),
        Message.user("q2"),
        *tool_group("c2", "search_docs", "3 documents"),
        *tool_group("c3", "search_docs", "2 documents"),
        Message.assistant("a2"),
    ]
    strategy = SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1, prefix_stable=False)
    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert result == [messages[0], messages[1], messages[4], messages[5], *messages[8:]]
    assert not any(m.is_summary for m in result)


# Token-budget composition -----------------------------------------------------------------------


def budget_pipeline(client: ScriptedChatClient, budget: int = 16_000) -> TokenBudgetComposedStrategy:
    """The guide's ``TokenBudgetComposedStrategy`` sample, with the budget as a parameter (and the
    seed's one-shot summarisation rule, ``prefix_stable=False``)."""
    tokenizer = CharacterEstimatorTokenizer()
    return TokenBudgetComposedStrategy(
        prefix_stable=False,
        token_budget=budget,
        tokenizer=tokenizer,
        strategies=[
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1, prefix_stable=False),
            SummarizationStrategy(client=client, target_count=4, threshold=2, prefix_stable=False),
            SlidingWindowStrategy(keep_last_groups=20, prefix_stable=False),
        ],
    )


def test_python_token_budget_pipeline_stops_once_the_budget_is_met() -> None:
    """When collapsing tool results alone fits 16,000 tokens, the summariser is never called and
    the window never runs (``early_stop=True`` is the default)."""
    messages = [Message.system("sys"), Message.user("research this")]
    for i in range(4):
        messages += tool_group(f"c{i}", "search_docs", padded(f"result {i}", 6000))
    messages.append(Message.assistant("done"))
    client = ScriptedChatClient(["never used"])
    result = asyncio.run(compact_with_report(messages, strategy=budget_pipeline(client)))

    assert result.before["included_tokens"] > 16_000
    assert result.after["included_tokens"] <= 16_000
    assert [e.strategy for e in result.events] == ["tool_result_collapse"]
    assert client.requests == []
    assert result.messages[-3:] == messages[-3:]


def test_python_token_budget_pipeline_summarises_when_collapse_is_not_enough() -> None:
    """Without tool output to collapse, the second stage (summarisation) brings the history
    under budget, and the third stage is skipped."""
    messages = [Message.system("sys")] + [Message.user(padded(f"q{i}", 950)) for i in range(18)]
    client = ScriptedChatClient(["Fourteen questions, summarised."])
    result = asyncio.run(compact_with_report(messages, strategy=budget_pipeline(client)))

    assert [e.strategy for e in result.events] == ["summarization"]
    assert result.after["included_tokens"] <= 16_000
    assert texts(result.messages[:2]) == ["sys", "[Summary] Fourteen questions, summarised."]
    assert result.messages[2:] == messages[-4:]


def test_python_token_budget_pipeline_falls_back_to_dropping_oldest() -> None:
    """When the three strategies together cannot reach the budget, the oldest non-system groups
    are excluded until it is met (emergency backstop); the system message stays."""
    messages = [Message.system("sys")] + [Message.user(padded(f"q{i}", 1500)) for i in range(34)]
    client = ScriptedChatClient(["Older questions, summarised."])
    result = asyncio.run(compact_with_report(messages, strategy=budget_pipeline(client)))

    assert [e.strategy for e in result.events] == ["summarization", "sliding_window", "token_budget"]
    summary = next(g for g in result.index.groups if g.kind is GroupKind.SUMMARY)
    dropped = excluded_for(result.index, "token_budget_fallback")
    assert dropped[0] is summary  # the oldest non-system group goes first
    assert result.after["included_tokens"] <= 16_000
    assert result.after["included_tokens"] + dropped[-1].token_count > 16_000
    kept = len(result.messages) - 1
    assert result.messages == [messages[0], *messages[-kept:]]


# Ad-hoc compaction ----------------------------------------------------------------------------


def test_csharp_ad_hoc_compaction_with_truncation_at_8000_tokens() -> None:
    """``CompactionProvider.CompactAsync(new TruncationCompactionStrategy(TokensExceed(8000)),
    existingMessages)``: returns the compacted list; with the default floor of 32 groups, a
    history of 40 groups of 400 tokens keeps exactly its newest 32, and the input is intact."""
    existing = [Message.system("sys")] + [Message.user(padded(f"m{i}", 400)) for i in range(40)]
    snapshot = to_openai(existing, metadata=True)
    compacted = asyncio.run(apply_compaction(existing, strategy=TruncationStrategy(trigger=tokens_exceed(8000))))

    assert compacted == [existing[0], *existing[-32:]]
    assert to_openai(existing, metadata=True) == snapshot
    assert len(existing) == 41


def test_python_ad_hoc_apply_compaction_trims_to_4000_tokens() -> None:
    """``apply_compaction(messages, strategy=TruncationStrategy(max_n=8_000, compact_to=4_000,
    tokenizer=tokenizer), tokenizer=tokenizer)``: the result fits 8,000 tokens, cut on the grid of
    4,000-token steps (design.md#prefix-stability); with ``prefix_stable=False`` (the seed's one-shot rule) it fits
    4,000 tokens with the fewest exclusions.  ``messages`` is left as it was."""
    tokenizer = CharacterEstimatorTokenizer()
    messages = [Message.system("sys")] + [Message.user(padded(f"m{i}", 500)) for i in range(20)]
    before = list(messages)
    stable = asyncio.run(
        apply_compaction(
            messages,
            strategy=TruncationStrategy(max_n=8_000, compact_to=4_000, tokenizer=tokenizer),
            tokenizer=tokenizer,
        )
    )
    # 10,084 tokens (4 for the system message, 504 a message): one step of 4,000 takes the 8
    # oldest messages (4,032 tokens), leaving 12.
    assert sum(tokenizer.count_messages(stable)) == 4 + 12 * 504
    compacted = asyncio.run(
        apply_compaction(
            messages,
            strategy=TruncationStrategy(max_n=8_000, compact_to=4_000, tokenizer=tokenizer, prefix_stable=False),
            tokenizer=tokenizer,
        )
    )

    total = sum(tokenizer.count_messages(compacted))
    assert sum(tokenizer.count_messages(messages)) > 8_000
    assert total <= 4_000
    dropped = len(messages) - len(compacted)
    assert total + tokenizer.count_message(messages[dropped]) > 4_000
    assert compacted == [messages[0], *messages[dropped + 1 :]]
    assert messages == before
    assert all(a is b for a, b in zip(messages, before))
