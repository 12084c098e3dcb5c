"""Strategy defaults, floors, failure handling and argument checking.

Each documented default is pinned where it makes a difference: one group either
side of the floor, one message either side of the threshold.  A default that
drifted by one would silently keep more or less history than users were told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from contextledger import (
    ConfigurationError,
    FunctionCallContent,
    Message,
    OpenAITokenizer,
    SummarizationError,
    to_openai,
)
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    CharacterEstimatorTokenizer,
    CompactionStrategy,
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
    always,
    apply_compaction,
    compact_with_report,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from tests.optional_imports import try_import

with try_import("exact") as exact_extra:
    import toktok  # noqa: F401  (OpenAITokenizer's exact counts)

ESTIMATE = CharacterEstimatorTokenizer()


def untyped(value: object) -> Any:
    """Pass a deliberately wrong value past the type checker, as an untyped caller would."""
    return value


def tool_group(call_id: str, name: str = "get_weather", result: str = "sunny") -> list[Message]:
    return [
        Message.assistant(calls=[FunctionCallContent(call_id, name, "{}")]),
        Message.tool(call_id, result),
    ]


def exchanges(count: int, system: str | None = "sys") -> list[Message]:
    """``count`` single-message groups alternating user/assistant, after an optional system message."""
    head = [Message.system(system)] if system is not None else []
    return head + [Message.user(f"u{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(count)]


def turns(count: int) -> list[Message]:
    """A system message, then ``count`` user turns of a question and an answer."""
    messages = [Message.system("sys")]
    for turn in range(1, count + 1):
        messages += [Message.user(f"q{turn}"), Message.assistant(f"a{turn}")]
    return messages


def run(strategy: CompactionStrategy, messages: Sequence[Message]) -> tuple[bool, MessageIndex]:
    index = MessageIndex(messages)
    changed = asyncio.run(strategy.compact(index))
    return changed, index


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages]


def with_reason(index: MessageIndex, reason: str) -> list[MessageGroup]:
    return [g for g in index.groups if g.exclusion_reason == reason]


# Truncation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("non_system", [33, 34])
def test_truncation_trigger_style_keeps_32_newest_groups_by_default(non_system: int) -> None:
    """``minimum_preserved`` defaults to 32: with a trigger that never lets go, exactly the 32
    newest non-system groups remain (plus the system message)."""
    messages = exchanges(non_system)
    strategy = TruncationStrategy(trigger=always())
    changed, index = run(strategy, messages)

    assert strategy.minimum_preserved == 32
    assert changed is True
    assert index.projection() == [messages[0], *messages[-32:]]


def test_truncation_trigger_style_leaves_exactly_32_groups_alone() -> None:
    changed, index = run(TruncationStrategy(trigger=always()), exchanges(32))

    assert changed is False
    assert index.projection() == exchanges(32)


def test_truncation_keyword_style_counts_messages_without_a_tokenizer() -> None:
    """Without a tokenizer ``max_n`` is a message count: twelve long messages are under
    ``max_n=20`` however many tokens they hold; with a tokenizer the same numbers are tokens."""
    messages = [Message.system("sys")] + [Message.user("x" * 400) for _ in range(11)]
    assert sum(ESTIMATE.count_messages(messages)) > 20

    by_messages = TruncationStrategy(max_n=20, compact_to=10)
    by_tokens = TruncationStrategy(max_n=20, compact_to=10, tokenizer=CharacterEstimatorTokenizer())

    changed_messages, index_messages = run(by_messages, messages)
    changed_tokens, index_tokens = run(by_tokens, messages)
    assert changed_messages is False
    assert index_messages.projection() == messages
    assert changed_tokens is True
    assert index_tokens.projection() == [messages[0], messages[-1]]  # only the floor of one group


@pytest.mark.parametrize(("count", "expected"), [(10, 10), (11, 10), (12, 10)])
def test_truncation_compact_to_defaults_to_max_n(count: int, expected: int) -> None:
    """``compact_to`` defaults to ``max_n``: at ``max_n`` messages nothing happens, one over
    and exactly ``max_n`` remain (the system message counts as a message)."""
    strategy = TruncationStrategy(max_n=10)
    messages = exchanges(count - 1)
    changed, index = run(strategy, messages)

    assert strategy.compact_to == strategy.max_n == 10
    assert changed is (count > 10)
    assert index.projection() == [messages[0], *messages[len(messages) - expected + 1 :]]


def test_truncation_keyword_style_trims_to_compact_to() -> None:
    messages = exchanges(12)
    changed, index = run(TruncationStrategy(max_n=10, compact_to=5, prefix_stable=False), messages)

    assert changed is True
    assert index.projection() == [messages[0], *messages[-4:]]


def test_truncation_keyword_style_floor_is_the_newest_group() -> None:
    """In keyword style only the newest group is protected, so ``compact_to=1`` leaves the
    system message and one group, above the target rather than empty."""
    messages = exchanges(6)
    _, index = run(TruncationStrategy(max_n=1, compact_to=1), messages)

    assert index.projection() == [messages[0], messages[-1]]


def test_truncation_keeps_system_messages_wherever_they_are() -> None:
    messages = [
        Message.system("s0"),
        Message.user("u1"),
        Message.system("s1"),
        Message.user("u2"),
        Message.user("u3"),
    ]
    _, index = run(TruncationStrategy(trigger=always(), minimum_preserved=0), messages)

    assert texts(index.projection()) == ["s0", "s1", "u3"]


def test_truncation_tool_group_goes_as_one_unit() -> None:
    messages = [Message.system("s"), Message.user("q"), *tool_group("c1"), Message.assistant("done")]
    _, index = run(TruncationStrategy(max_n=3), messages)

    assert index.projection() == [messages[0], messages[-1]]


# Sliding window -------------------------------------------------------------------------------------


def test_sliding_window_keeps_one_turn_by_default() -> None:
    """``minimum_preserved`` defaults to one turn: with ``always()`` only the newest turn stays."""
    strategy = SlidingWindowStrategy(trigger=always())
    changed, index = run(strategy, turns(4))

    assert strategy.minimum_preserved == 1
    assert changed is True
    assert texts(index.projection()) == ["sys", "q4", "a4"]


def test_sliding_window_minimum_preserved_counts_turns() -> None:
    _, index = run(SlidingWindowStrategy(trigger=always(), minimum_preserved=2), turns(4))

    assert texts(index.projection()) == ["sys", "q3", "a3", "q4", "a4"]


@pytest.mark.parametrize(("count", "kept"), [(3, ["q1", "q2", "q3"]), (4, ["q2", "q3", "q4"])])
def test_sliding_window_turns_exceed_boundary(count: int, kept: list[str]) -> None:
    _, index = run(SlidingWindowStrategy(trigger=turns_exceed(3)), turns(count))

    assert [m.text for m in index.projection() if m.role == "user"] == kept


def test_sliding_window_always_keeps_system_turn_zero_and_summaries() -> None:
    """System messages, what came before the first user message (turn 0) and summaries written by
    summarisation survive any window: they are the conversation's standing context."""
    summary = Message.assistant(
        "[Summary] earlier", additional_properties={"_is_summary": True, "_summary_source": "summarization"}
    )
    messages = [Message.system("sys"), Message.assistant("welcome"), summary, *turns(3)[1:]]
    _, index = run(SlidingWindowStrategy(trigger=always()), messages)

    assert index.projection() == [messages[0], messages[1], summary, *messages[-2:]]


def test_sliding_window_excludes_tool_result_summaries_with_their_turn() -> None:
    """A ``[Tool results: ...]`` line stands in for a tool group and belongs to its turn, so it
    leaves with that turn; only conversation summaries are kept regardless."""
    collapsed = Message.assistant(
        "[Tool results: get_weather: sunny]",
        additional_properties={"_is_summary": True, "_summary_source": "tool_results"},
    )
    messages = [
        Message.system("sys"),
        Message.user("q1"),
        collapsed,
        Message.user("q2"),
        Message.assistant("a2"),
    ]
    _, index = run(SlidingWindowStrategy(trigger=always()), messages)

    assert texts(index.projection()) == ["sys", "q2", "a2"]


@pytest.mark.parametrize(("groups", "excluded"), [(3, 0), (4, 1), (6, 3)])
def test_sliding_window_keep_last_groups_boundary(groups: int, excluded: int) -> None:
    """``keep_last_groups=3`` keeps exactly the three newest groups; at three it does nothing."""
    messages = [Message.system("sys"), Message.assistant("welcome"), *exchanges(groups, system=None)]
    changed, index = run(SlidingWindowStrategy(keep_last_groups=3, stable_step=1), messages)

    assert changed is (excluded > 0)
    assert index.projection() == messages[:2] + messages[-3:]
    assert len(with_reason(index, "sliding_window")) == excluded


# Tool results -----------------------------------------------------------------------------------------


def three_tool_groups(final_reply: bool) -> list[Message]:
    messages = [Message.system("sys"), Message.user("q")]
    for i in range(3):
        messages += tool_group(f"c{i}", result=f"{i}°C")
    if final_reply:
        messages.append(Message.assistant("done"))
    return messages


def test_tool_result_default_keeps_the_newest_tool_group() -> None:
    """No arguments means ``keep_last_tool_call_groups=1``: every older tool group becomes one
    summary message in its place and turn, the original excluded as "collapsed"."""
    strategy = ToolResultCompactionStrategy(stable_step=1)
    messages = three_tool_groups(final_reply=True)
    changed, index = run(strategy, messages)

    assert strategy.keep_last_tool_call_groups == 1
    assert changed is True
    assert texts(index.projection()) == [
        "sys",
        "q",
        "[Tool results: get_weather: 0°C]",
        "[Tool results: get_weather: 1°C]",
        "",
        "2°C",
        "done",
    ]
    assert index.projection()[4:] == messages[-3:]
    collapsed = with_reason(index, "collapsed")
    assert [g.messages for g in collapsed] == [messages[2:4], messages[4:6]]
    summaries = [g for g in index.live if g.kind is GroupKind.SUMMARY]
    assert [g.turn for g in summaries] == [1, 1]
    assert all(
        g.messages[0].additional_properties == {"_is_summary": True, "_summary_source": "tool_results"}
        for g in summaries
    )


def test_tool_result_default_with_a_single_tool_group_changes_nothing() -> None:
    messages = [Message.system("s"), Message.user("q"), *tool_group("c1"), Message.assistant("a")]
    changed, index = run(ToolResultCompactionStrategy(), messages)

    assert changed is False
    assert index.projection() == messages


@pytest.mark.parametrize(("final_reply", "collapsed"), [(False, 1), (True, 2)])
def test_tool_result_trigger_style_leaves_two_newest_groups_by_default(final_reply: bool, collapsed: int) -> None:
    """In trigger style the floor is the 2 newest non-system groups of any kind: with the tool
    groups last, two of them stay; with a reply after them, only one does."""
    strategy = ToolResultCompactionStrategy(trigger=always(), stable_step=1)
    changed, index = run(strategy, three_tool_groups(final_reply))

    assert strategy.minimum_preserved == 2
    assert changed is True
    assert len(with_reason(index, "collapsed")) == collapsed
    assert index.included_tool_call_groups == 3 - collapsed


def test_tool_result_never_touches_user_or_assistant_text() -> None:
    messages = [
        Message.system("s"),
        Message.user("q" * 400),
        Message.assistant("a" * 400),
        Message.user("next"),
    ]
    changed, index = run(ToolResultCompactionStrategy(trigger=always(), minimum_preserved=0), messages)

    assert changed is False
    assert index.projection() == messages


# Selective tool-call removal ------------------------------------------------------------------------------


def test_selective_default_keeps_the_newest_tool_group() -> None:
    strategy = SelectiveToolCallCompactionStrategy(stable_step=1)
    messages = three_tool_groups(final_reply=True)
    changed, index = run(strategy, messages)

    assert strategy.keep_last_tool_call_groups == 1
    assert changed is True
    assert index.projection() == [*messages[:2], *messages[-3:]]
    assert len(with_reason(index, "tool_call_removed")) == 2
    assert not any(m.is_summary for m in index.projection())


@pytest.mark.parametrize(("final_reply", "removed"), [(False, 1), (True, 2)])
def test_selective_trigger_style_leaves_two_newest_groups_by_default(final_reply: bool, removed: int) -> None:
    strategy = SelectiveToolCallCompactionStrategy(trigger=always(), stable_step=1)
    _, index = run(strategy, three_tool_groups(final_reply))

    assert strategy.minimum_preserved == 2
    assert len(with_reason(index, "tool_call_removed")) == removed


# Summarisation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix_stable", [True, False])
@pytest.mark.parametrize(("non_system", "fires"), [(6, False), (7, True)])
def test_summarization_keyword_defaults_fire_above_six_messages(
    non_system: int, fires: bool, prefix_stable: bool
) -> None:
    """Defaults ``target_count=4``, ``threshold=2``: it fires at 7 non-system messages, not at 6,
    and then summarises the oldest 2 (one step of ``threshold`` on the prefix-stable grid) or,
    with ``prefix_stable=False``, keeps the newest groups holding 4 messages."""
    client = ScriptedChatClient(["earlier"])
    strategy = SummarizationStrategy(client=client, prefix_stable=prefix_stable)
    messages = exchanges(non_system)
    changed, index = run(strategy, messages)

    assert (strategy.target_count, strategy.threshold) == (4, 2)
    assert changed is fires
    assert len(client.requests) == int(fires)
    if fires:
        kept = 5 if prefix_stable else 4
        assert texts(index.projection()) == ["sys", "[Summary] earlier", *texts(messages[-kept:])]
    else:
        assert index.projection() == messages


def test_summarization_keyword_style_counts_system_messages_out() -> None:
    """Seven messages including a system message are six non-system ones: no summary."""
    client = ScriptedChatClient(["earlier"])
    changed, _ = run(SummarizationStrategy(client=client), exchanges(6))

    assert changed is False


@pytest.mark.parametrize(("prefix_stable", "kept"), [(True, 6), (False, 4)])
def test_summarization_keyword_style_keeps_whole_groups_holding_target_count(prefix_stable: bool, kept: int) -> None:
    """The newest 4 messages are kept by whole groups: a tool group counts its 2 messages.  On the
    prefix-stable grid 8 non-system messages go down by one step of 2, to 6."""
    client = ScriptedChatClient(["earlier"])
    messages = [*exchanges(4), Message.user("q"), *tool_group("c1"), Message.assistant("done")]
    _, index = run(SummarizationStrategy(client=client, prefix_stable=prefix_stable), messages)

    assert index.projection()[2:] == messages[-kept:]


@pytest.mark.parametrize(("non_system", "summarized"), [(5, 1), (7, 3)])
def test_summarization_trigger_style_keeps_four_newest_groups_by_default(non_system: int, summarized: int) -> None:
    client = ScriptedChatClient(["earlier"])
    strategy = SummarizationStrategy(client, always())
    messages = exchanges(non_system)
    _, index = run(strategy, messages)

    assert strategy.minimum_preserved == 4
    assert len(with_reason(index, "summarized")) == summarized
    assert index.projection() == [messages[0], index.projection()[1], *messages[-4:]]


def test_summarization_trigger_style_with_four_groups_has_nothing_to_summarise() -> None:
    """Everything is inside the floor of four: not a failure, so nothing is reported and the
    result does not claim a change."""
    client = ScriptedChatClient(["earlier"])
    changed, index = run(SummarizationStrategy(client, always()), exchanges(4))

    assert changed is False
    assert client.requests == []
    assert index.projection() == exchanges(4)
    assert index.events == []
    result = asyncio.run(compact_with_report(exchanges(4), strategy=SummarizationStrategy(client, always())))
    assert result.changed is False


def test_summary_is_one_message_in_place_of_the_first_summarised_group() -> None:
    messages = [
        Message.system("sys"),
        *exchanges(5, system=None),
        Message.system("late rule"),
        *exchanges(3, None),
    ]
    client = ScriptedChatClient(["earlier"])
    _, index = run(SummarizationStrategy(client, always()), messages)

    summaries = [g for g in index.live if g.kind is GroupKind.SUMMARY]
    assert len(summaries) == 1
    assert summaries[0].turn is None
    assert summaries[0].messages[0].additional_properties == {
        "_is_summary": True,
        "_summary_source": "summarization",
    }
    projection = index.projection()
    assert projection[0] == messages[0]
    assert projection[1] is summaries[0].messages[0]
    assert "late rule" in texts(projection)  # system messages are never summarised away


def unchanged(index: MessageIndex, messages: list[Message]) -> bool:
    fresh = MessageIndex(messages)
    return (
        index.projection() == messages
        and index.metrics() == fresh.metrics()
        and not any(g.excluded for g in index.groups)
        and not any(g.kind is GroupKind.SUMMARY for g in index.groups)
    )


FAILURES: list[object] = [RuntimeError("model down"), "", "   \n\t"]


@pytest.mark.parametrize("reply", FAILURES, ids=["raises", "empty", "whitespace"])
def test_summarization_fails_closed(reply: object) -> None:
    """A failing or empty summariser must not cost the user history: every group it took is put
    back, nothing is inserted, and the failure is recorded."""
    messages = exchanges(10)
    client = ScriptedChatClient([untyped(reply)])
    changed, index = run(SummarizationStrategy(client=client), messages)

    assert changed is False
    assert len(client.requests) == 1
    assert unchanged(index, messages)
    assert [e.action for e in index.events] == ["failed"]


@pytest.mark.parametrize("reply", FAILURES, ids=["raises", "empty", "whitespace"])
def test_summarization_on_error_raise_raises_after_restoring(reply: object) -> None:
    messages = exchanges(10)
    client = ScriptedChatClient([untyped(reply)])
    index = MessageIndex(messages)

    with pytest.raises(SummarizationError):
        asyncio.run(SummarizationStrategy(client=client, on_error="raise").compact(index))
    assert unchanged(index, messages)


def test_summarization_cancellation_restores_and_propagates() -> None:
    """Cancellation is not a failure to report: it must reach the caller, with the index as it
    was before the attempt."""
    messages = exchanges(10)
    client = ScriptedChatClient([asyncio.CancelledError()])  # the call is cancelled while in flight
    index = MessageIndex(messages)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(SummarizationStrategy(client=client).compact(index))
    assert client.calls == 1
    assert unchanged(index, messages)
    assert index.events == []


def test_summarization_cancellation_propagates_through_apply_compaction() -> None:
    messages = exchanges(10)
    before = list(messages)
    cancelled = ScriptedChatClient([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(apply_compaction(messages, strategy=SummarizationStrategy(client=cancelled)))
    assert messages == before


def test_summariser_input_is_bounded_by_max_input_tokens() -> None:
    """Only the oldest groups that fit ``max_input_tokens`` (with the prompt) are sent; the rest
    stay included and wait for a later round."""
    messages = [Message.system("s")] + [
        Message.user("x" * 400) if i % 2 == 0 else Message.assistant("y" * 400) for i in range(10)
    ]
    client = ScriptedChatClient(["two messages"])
    strategy = SummarizationStrategy(client=client, max_input_tokens=400)
    changed, index = run(strategy, messages)

    group_tokens = index.groups[2].token_count
    prompt_tokens = ESTIMATE.count_text(strategy.prompt)
    assert prompt_tokens + 2 * group_tokens <= 400 < prompt_tokens + 3 * group_tokens
    assert changed is True
    summarized = with_reason(index, "summarized")
    assert [g.messages[0] for g in summarized] == messages[1:3]
    assert sum(ESTIMATE.count_messages(client.requests[0])) <= 400
    assert index.projection()[2:] == messages[3:]


def test_summariser_request_fits_max_input_tokens_at_the_boundary() -> None:
    """The bound is on what is sent: the request (prompt message plus transcript message),
    counted with the index's tokenizer, must fit even when the budget is exactly what the
    prompt and one group cost on their own."""
    messages = [Message.system("s")] + [Message.user("x" * 400) for _ in range(10)]
    prompt_tokens = ESTIMATE.count_text(SummarizationStrategy(client=ScriptedChatClient(["x"])).prompt)
    budget = prompt_tokens + ESTIMATE.count_message(messages[1])
    client = ScriptedChatClient(["summary"])
    run(SummarizationStrategy(client=client, max_input_tokens=budget), messages)

    for request in client.requests:
        assert sum(ESTIMATE.count_messages(request)) <= budget


def test_a_group_too_big_to_summarise_is_left_as_it_is_and_the_rest_summarised() -> None:
    """design.md#strategies: one oversized group never stalls summarisation."""
    messages = [Message.system("s"), Message.user("x" * 4000), *exchanges(8, system=None)]
    client = ScriptedChatClient(["gist"])
    changed, index = run(SummarizationStrategy(client=client, max_input_tokens=500), messages)

    assert changed is True
    assert len(client.requests) == 1
    assert "x" * 100 not in client.requests[0][1].text
    projection = index.projection()
    assert projection[:2] == messages[:2]
    assert projection[2].is_summary
    assert [e.action for e in index.events] == ["summarized"]


def test_summariser_is_not_called_when_every_group_alone_is_too_big() -> None:
    messages = [Message.system("s"), *(Message.user("x" * 4000) for _ in range(8))]
    client = ScriptedChatClient(["never"])
    changed, index = run(SummarizationStrategy(client=client, max_input_tokens=500), messages)

    assert changed is False
    assert client.requests == []
    assert unchanged(index, messages)
    assert [e.action for e in index.events] == ["failed"]


# Nothing to do with one group --------------------------------------------------------------------------------


def aggressive_strategies(client: ScriptedChatClient) -> list[CompactionStrategy]:
    """One of each strategy, configured to compact as hard as it can."""
    return [
        TruncationStrategy(trigger=always(), minimum_preserved=0),
        TruncationStrategy(trigger=always(), minimum_preserved=0, preserve_system=False),
        TruncationStrategy(max_n=1, compact_to=1),
        SlidingWindowStrategy(trigger=always(), minimum_preserved=0),
        SlidingWindowStrategy(keep_last_groups=1),
        ToolResultCompactionStrategy(keep_last_tool_call_groups=0),
        SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=0),
        SummarizationStrategy(client, always(), minimum_preserved=0),
        TokenBudgetComposedStrategy(token_budget=1),
    ]


STRATEGY_NAMES = [
    "truncation",
    "truncation-no-system",
    "truncation-keyword",
    "window-turns",
    "window-groups",
    "tool-result",
    "selective",
    "summarization",
    "token-budget",
    "pipeline",
]


def strategy_named(name: str, client: ScriptedChatClient) -> CompactionStrategy:
    strategies = aggressive_strategies(client)
    if name == "pipeline":
        return PipelineStrategy(*strategies)
    return strategies[STRATEGY_NAMES.index(name)]


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_no_strategy_acts_on_a_single_non_system_group(name: str) -> None:
    """With one non-system group there is nothing older to drop: the newest group is never
    excluded, and system messages are not compacted for its sake."""
    messages = [Message.system("s" * 400), Message.system("t" * 400), *tool_group("c1", result="r" * 4000)]
    client = ScriptedChatClient(["summary"])
    changed, index = run(strategy_named(name, client), messages)

    assert changed is False
    assert index.projection() == messages
    assert index.events == []
    assert client.requests == []


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_no_strategy_acts_when_only_one_non_system_group_is_still_included(name: str) -> None:
    """The rule is about included groups: history already excluded does not count."""
    messages = [Message.system("sys"), *exchanges(6, system=None), *tool_group("c1", result="r" * 4000)]
    index = MessageIndex(messages)
    for group in index.groups[1:-1]:
        index.exclude(group, "earlier")
    before = index.projection()
    client = ScriptedChatClient(["summary"])

    changed = asyncio.run(strategy_named(name, client).compact(index))

    assert changed is False
    assert index.projection() == before
    assert index.events == []


# Targets ----------------------------------------------------------------------------------------------------


def three_tool_groups_left(index: MessageIndex) -> bool:
    return index.included_tool_call_groups <= 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: TruncationStrategy(trigger=always(), target=three_tool_groups_left, minimum_preserved=1),
        lambda: SelectiveToolCallCompactionStrategy(trigger=always(), target=three_tool_groups_left),
        lambda: ToolResultCompactionStrategy(trigger=always(), target=three_tool_groups_left),
    ],
    ids=["truncation", "selective", "tool-result"],
)
def test_custom_target_stops_a_strategy_whose_trigger_is_always(
    make: Callable[[], CompactionStrategy],
) -> None:
    """A strategy re-checks its target after each step and stops as soon as it is met, whatever
    the trigger: five tool groups and a target of "three left" must leave three."""
    messages = [Message.system("s"), Message.user("q")]
    for i in range(5):
        messages += tool_group(f"c{i}", result=f"{i}°C")
    messages.append(Message.assistant("done"))
    changed, index = run(make(), messages)

    assert changed is True
    assert index.included_tool_call_groups == 3


def test_tokens_below_as_target_stops_at_the_first_point_under_it() -> None:
    messages = [Message.system("sys")] + [Message.user("x" * 40) for _ in range(10)]
    strategy = TruncationStrategy(
        trigger=tokens_exceed(100), target=tokens_below(60), minimum_preserved=0, prefix_stable=False
    )
    _, index = run(strategy, messages)

    assert index.included_tokens < 60
    assert index.included_tokens + with_reason(index, "truncation")[-1].token_count >= 60


# Token-budget composition --------------------------------------------------------------------------------------


def bulky_tool_history() -> list[Message]:
    messages = [Message.system("sys"), Message.user("research")]
    for i in range(3):
        messages += tool_group(f"c{i}", "search_docs", "r" * 4000)
    messages.append(Message.assistant("done"))
    return messages


@pytest.mark.parametrize("early_stop", [True, False])
def test_token_budget_early_stop(early_stop: bool) -> None:
    """With ``early_stop`` (the default) the children after the one that met the budget do not
    run; without it they all run even though the budget is already met."""
    messages = bulky_tool_history()
    strategy = TokenBudgetComposedStrategy(
        prefix_stable=False,
        token_budget=1500,
        strategies=[
            ToolResultCompactionStrategy(stable_step=1),
            SlidingWindowStrategy(keep_last_groups=1, stable_step=1),
        ],
        early_stop=early_stop,
    )
    result = asyncio.run(compact_with_report(messages, strategy=strategy))

    assert result.after["included_tokens"] <= 1500
    if early_stop:
        assert [e.strategy for e in result.events] == ["tool_result_collapse"]
        assert result.messages[-3:] == messages[-3:]
        assert len(result.messages) == 7
    else:
        assert [e.strategy for e in result.events] == ["tool_result_collapse", "sliding_window"]
        assert result.messages == [messages[0], messages[-1]]


def test_token_budget_early_stop_is_the_default() -> None:
    assert TokenBudgetComposedStrategy(token_budget=10).early_stop is True


def test_token_budget_fallback_drops_oldest_until_within_budget() -> None:
    messages = [Message.system("sys")] + [Message.user("x" * 400) for _ in range(10)]
    result = asyncio.run(
        compact_with_report(messages, strategy=TokenBudgetComposedStrategy(prefix_stable=False, token_budget=500))
    )

    dropped = with_reason(result.index, "token_budget_fallback")
    assert result.after["included_tokens"] <= 500
    assert result.after["included_tokens"] + dropped[-1].token_count > 500
    assert result.messages == [messages[0], *messages[1 + len(dropped) :]]


def test_token_budget_fallback_never_drops_system_messages_or_the_newest_group() -> None:
    """When the system messages and the newest group alone exceed the budget, the result stays
    over budget rather than losing instructions or sending nothing."""
    messages = [
        Message.system("s" * 400),
        *exchanges(4, system=None),
        Message.system("t" * 400),
        *exchanges(3, system=None),
        *tool_group("c1", result="r" * 4000),
    ]
    result = asyncio.run(compact_with_report(messages, strategy=TokenBudgetComposedStrategy(token_budget=5)))

    assert result.messages == [messages[0], messages[5], *messages[-2:]]
    assert result.after["included_tokens"] > 5


# apply_compaction --------------------------------------------------------------------------------------------------


def mutating_candidates() -> list[CompactionStrategy]:
    client = ScriptedChatClient(["summary"])
    return [
        TruncationStrategy(max_n=4),
        SlidingWindowStrategy(trigger=turns_exceed(1)),
        ToolResultCompactionStrategy(stable_step=1),
        SelectiveToolCallCompactionStrategy(stable_step=1),
        SummarizationStrategy(client=client),
        TokenBudgetComposedStrategy(token_budget=40),
    ]


@pytest.mark.parametrize("position", range(6), ids=["trunc", "window", "tool", "select", "summary", "budget"])
def test_apply_compaction_never_mutates_its_input(position: int) -> None:
    strategy = mutating_candidates()[position]
    messages = [Message.system("sys")]
    for turn in range(4):
        messages += [
            Message.user(f"q{turn}"),
            *tool_group(f"c{turn}", result=f"{turn}°C"),
            Message.assistant("a"),
        ]
    before = list(messages)
    snapshot = to_openai(messages, metadata=True)

    result = asyncio.run(apply_compaction(messages, strategy=strategy))

    assert result != messages
    assert len(messages) == len(before)
    assert all(a is b for a, b in zip(messages, before))
    assert to_openai(messages, metadata=True) == snapshot


def test_tokenizer_mismatch_is_rejected() -> None:
    """A strategy whose thresholds are in one tokenizer's units must not be measured with another."""
    strategy = TruncationStrategy(max_n=10, tokenizer=CharacterEstimatorTokenizer(3))

    with pytest.raises(ConfigurationError, match=r"estimate/3.*estimate/4"):
        asyncio.run(apply_compaction(exchanges(20), strategy=strategy, tokenizer=CharacterEstimatorTokenizer()))


def test_tokenizer_mismatch_inside_a_composition_is_rejected() -> None:
    inner = TruncationStrategy(max_n=10, tokenizer=CharacterEstimatorTokenizer(3))

    with pytest.raises(ConfigurationError, match="estimate/3"):
        asyncio.run(apply_compaction(exchanges(20), strategy=PipelineStrategy(inner), tokenizer=ESTIMATE))
    with pytest.raises(ConfigurationError, match="estimate/3"):
        asyncio.run(
            apply_compaction(
                exchanges(20),
                strategy=TokenBudgetComposedStrategy(token_budget=10, tokenizer=ESTIMATE, strategies=[inner]),
            )
        )


@exact_extra.skip
def test_exact_tokenizers_with_different_vocabularies_are_rejected() -> None:
    strategy = TruncationStrategy(max_n=10, tokenizer=OpenAITokenizer("cl100k_base"))

    with pytest.raises(ConfigurationError, match="o200k_base"):
        asyncio.run(apply_compaction(exchanges(20), strategy=strategy, tokenizer=OpenAITokenizer("o200k_base")))


def test_same_tokenizer_by_name_is_accepted_and_used() -> None:
    """Two instances of the same vocabulary agree, and the strategy's tokenizer is the one used
    when none is passed."""
    strategy = TruncationStrategy(max_n=10, tokenizer=CharacterEstimatorTokenizer(3))
    result = asyncio.run(
        compact_with_report(exchanges(20), strategy=strategy, tokenizer=CharacterEstimatorTokenizer(3))
    )
    implied = asyncio.run(compact_with_report(exchanges(20), strategy=strategy))

    assert result.index.tokenizer.name == implied.index.tokenizer.name == "estimate/3"
    assert result.messages == implied.messages


# Bad parameters ----------------------------------------------------------------------------------------------------

CLIENT = ScriptedChatClient(["summary"])

BAD_PARAMETERS: list[tuple[str, Callable[[], object], str]] = [
    # Truncation
    ("truncation-nothing", TruncationStrategy, "needs a trigger"),
    ("truncation-mixed", lambda: TruncationStrategy(trigger=always(), max_n=10), "not both"),
    ("truncation-target-mixed", lambda: TruncationStrategy(target=always(), max_n=10), "not both"),
    ("truncation-max-n-zero", lambda: TruncationStrategy(max_n=0), "got 0"),
    ("truncation-max-n-negative", lambda: TruncationStrategy(max_n=-5), "got -5"),
    ("truncation-max-n-float", lambda: TruncationStrategy(max_n=untyped(1.5)), "got 1.5"),
    ("truncation-compact-to-zero", lambda: TruncationStrategy(max_n=10, compact_to=0), "got 0"),
    ("truncation-compact-to-above", lambda: TruncationStrategy(max_n=10, compact_to=11), r"\(11\).*\(10\)"),
    ("truncation-compact-to-alone", lambda: TruncationStrategy(compact_to=5), "needs max_n"),
    ("truncation-floor-negative", lambda: TruncationStrategy(always(), -1), "got -1"),
    ("truncation-floor-bool", lambda: TruncationStrategy(always(), untyped(True)), "got True"),
    ("truncation-trigger", lambda: TruncationStrategy(trigger=untyped("tokens")), "'tokens'"),
    ("truncation-target", lambda: TruncationStrategy(trigger=always(), target=untyped(5)), "got 5"),
    # Sliding window
    ("window-nothing", SlidingWindowStrategy, "needs a trigger"),
    ("window-keep-zero", lambda: SlidingWindowStrategy(keep_last_groups=0), "got 0"),
    ("window-keep-negative", lambda: SlidingWindowStrategy(keep_last_groups=-1), "got -1"),
    ("window-mixed", lambda: SlidingWindowStrategy(trigger=always(), keep_last_groups=3), "not both"),
    (
        "window-floor-negative",
        lambda: SlidingWindowStrategy(trigger=always(), minimum_preserved=-1),
        "got -1",
    ),
    (
        "window-two-floors",
        lambda: SlidingWindowStrategy(trigger=always(), minimum_preserved=1, minimum_preserved_turns=1),
        "same setting",
    ),
    ("window-no-system", lambda: SlidingWindowStrategy(trigger=always(), preserve_system=False), "system"),
    ("window-trigger", lambda: SlidingWindowStrategy(trigger=untyped(4)), "got 4"),
    # Tool results
    ("tool-keep-negative", lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=-1), "got -1"),
    ("tool-floor-negative", lambda: ToolResultCompactionStrategy(always(), -2), "got -2"),
    (
        "tool-two-floors",
        lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=1, minimum_preserved=2),
        "two floors",
    ),
    ("tool-target-alone", lambda: ToolResultCompactionStrategy(target=always()), "need a trigger"),
    ("tool-floor-alone", lambda: ToolResultCompactionStrategy(minimum_preserved=2), "need a trigger"),
    ("tool-result-chars", lambda: ToolResultCompactionStrategy(max_result_chars=7), "got 7"),
    ("tool-summary-chars", lambda: ToolResultCompactionStrategy(max_summary_chars=31), "got 31"),
    ("tool-formatter", lambda: ToolResultCompactionStrategy(formatter=untyped("fmt")), "'fmt'"),
    ("tool-trigger", lambda: ToolResultCompactionStrategy(trigger=untyped(512)), "got 512"),
    # Selective tool-call removal
    (
        "selective-keep-negative",
        lambda: SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=-1),
        "got -1",
    ),
    ("selective-floor-negative", lambda: SelectiveToolCallCompactionStrategy(always(), -1), "got -1"),
    ("selective-trigger", lambda: SelectiveToolCallCompactionStrategy(trigger=untyped([])), r"got \[\]"),
    # Summarisation
    ("summary-no-client", SummarizationStrategy, "got None"),
    ("summary-bad-client", lambda: SummarizationStrategy(client=untyped("gpt-4o-mini")), "'gpt-4o-mini'"),
    ("summary-two-clients", lambda: SummarizationStrategy(client=CLIENT, chat_client=CLIENT), "same setting"),
    ("summary-empty-prompt", lambda: SummarizationStrategy(client=CLIENT, prompt=""), "got ''"),
    ("summary-blank-prompt", lambda: SummarizationStrategy(client=CLIENT, prompt="  "), "got '  '"),
    (
        "summary-two-prompts",
        lambda: SummarizationStrategy(client=CLIENT, prompt="a", summarization_prompt="b"),
        "same setting",
    ),
    ("summary-mixed", lambda: SummarizationStrategy(CLIENT, always(), target_count=4), "not both"),
    ("summary-floor-alone", lambda: SummarizationStrategy(CLIENT, minimum_preserved=2), "need a trigger"),
    ("summary-target-count-zero", lambda: SummarizationStrategy(client=CLIENT, target_count=0), "got 0"),
    ("summary-threshold-negative", lambda: SummarizationStrategy(client=CLIENT, threshold=-1), "got -1"),
    ("summary-max-input-zero", lambda: SummarizationStrategy(client=CLIENT, max_input_tokens=0), "got 0"),
    ("summary-floor-negative", lambda: SummarizationStrategy(CLIENT, always(), -3), "got -3"),
    (
        "summary-on-error",
        lambda: SummarizationStrategy(client=CLIENT, on_error=untyped("ignore")),
        "'ignore'",
    ),
    # Composition
    ("budget-zero", lambda: TokenBudgetComposedStrategy(token_budget=0), "got 0"),
    ("budget-negative", lambda: TokenBudgetComposedStrategy(token_budget=-100), "got -100"),
    ("budget-float", lambda: TokenBudgetComposedStrategy(token_budget=untyped(1.5)), "got 1.5"),
    ("budget-bool", lambda: TokenBudgetComposedStrategy(token_budget=untyped(True)), "got True"),
    ("budget-child", lambda: TokenBudgetComposedStrategy(token_budget=10, strategies=untyped(["x"])), "'x'"),
    ("pipeline-child", lambda: PipelineStrategy(TruncationStrategy(max_n=1), untyped(always())), "always()"),
]


@pytest.mark.parametrize(
    ("build", "message"), [(b, m) for _, b, m in BAD_PARAMETERS], ids=[n for n, _, _ in BAD_PARAMETERS]
)
def test_bad_parameters_raise_configuration_error_naming_the_value(build: Callable[[], object], message: str) -> None:
    """Misconfiguration is reported when the strategy is built, with the offending value in the
    message, rather than discovered as odd behaviour mid-conversation."""
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_configuration_error_is_a_value_error() -> None:
    """Callers that already catch ``ValueError`` for bad arguments keep working."""
    with pytest.raises(ValueError, match="got 0"):
        TokenBudgetComposedStrategy(token_budget=0)
