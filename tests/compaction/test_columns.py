"""The index keeps groups as columns and hands out group objects on demand: the fast paths must be
invisible.

Three shortcuts carry the speed of a cold compaction on a long history, and each has a plain way of
doing the same thing next to it: a lean loop for plain runs of messages beside the general grouping
loop, the character estimate counted in that loop beside the tokenizer's own batch, and collapsed
tool results whose summary message is written only when first read beside writing it at once.
Each pair must agree on every random conversation, and group objects must behave like the objects
they stand for.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger import FunctionCallContent, Message
from contextledger.compaction import (
    CharacterEstimatorTokenizer,
    GroupKind,
    MessageIndex,
    PipelineStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    never,
    tokens_exceed,
)
from contextledger.compaction._grouping import Grouper
from contextledger.exceptions import CompactionError
from contextledger.messages import ReasoningContent
from contextledger.tokenizers import Tokenizer
from tests.compaction.test_incremental import chunks, counters, shape
from tests.compaction.test_properties import assert_index_consistent, same
from tests.conversations import conversations, dirty_conversations, tokenizers
from tests.sizes import examples

DEFAULT = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_CONVERSATION = st.one_of(conversations(), dirty_conversations())
CUTS = st.lists(st.integers(0, 80), max_size=6)


class EagerEstimate(CharacterEstimatorTokenizer):
    """The same counts under the same name, but not the estimator itself: the index and the
    tool-result collapse then take their general paths (tokenizer batches, summaries written at once)."""


def fresh(messages: list[Message]) -> list[Message]:
    """Equal messages with no token memo, so a cold index counts them itself."""
    return [
        Message(m.role, m.contents, m.author_name, m.message_id, m.additional_properties, m.extra) for m in messages
    ]


def indexed(messages: list[Message], cuts: list[int], tokenizer: Tokenizer, *, plain: bool) -> MessageIndex:
    Grouper._plain_batches = plain
    try:
        index = MessageIndex(tokenizer=tokenizer)
        for chunk in chunks(messages, cuts):
            index.append(chunk)
        return index
    finally:
        Grouper._plain_batches = True


_PLAIN_BLOCKS = (
    "user",
    "user",
    "answer",
    "answer",
    "call",
    "call",
    "system",
    "two_calls",  # one message, two calls, answered in order
    "two_calls_reversed",  # answered in the other order
    "text_and_call",  # a reply that also calls a tool
    "reasoned_answer",  # reasoning and the reply in one message
    "reasoned_calls",  # reasoning, text and two calls in one message
)
_ODD_BLOCKS = (
    "unanswered",  # a call whose result never comes
    "orphan",  # a result nobody asked for
    "second_result",  # a call answered twice
    "named",  # a user message with an author name
    "reasoning",  # reasoning before a call
    "two_calls_half",  # one message, two calls, one answered before something else comes
    "same_call_twice",  # one message that opens the same call id twice
    "reasoning_twice",  # one message of reasoning alone, in two parts
    "summary",  # an assistant summary
    "reused",  # a call reusing the id of the last call that went unanswered, answered at once
    "late",  # a result for that id, after other messages
)


@st.composite
def mostly_plain(draw: st.DrawFn) -> list[Message]:
    """Long runs of the messages the lean loop takes (user and assistant text, a call answered at
    once, system prompts), with now and then one it does not: it must stop there and hand over."""
    blocks = draw(st.lists(st.sampled_from(_PLAIN_BLOCKS * 4 + _ODD_BLOCKS), max_size=40))
    messages: list[Message] = []
    for number, block in enumerate(blocks):
        call = FunctionCallContent(f"c{number}", "lookup", f'{{"n": {number}}}')
        if block == "user":
            messages.append(Message.user(f"question {number}"))
        elif block == "answer":
            messages.append(Message.assistant("an answer " * (number % 5)))
        elif block == "call":
            messages += [Message.assistant(calls=[call]), Message.tool(call.call_id, "x" * (number * 7 % 50))]
        elif block == "system":
            messages.append(Message.system("be brief"))
        elif block == "unanswered":
            messages.append(Message.assistant(calls=[call]))
        elif block == "orphan":
            messages.append(Message.tool(f"ghost{number}", "late"))
        elif block == "second_result":
            messages += [
                Message.assistant(calls=[call]),
                Message.tool(call.call_id, "one"),
                Message.tool(call.call_id, "two"),
            ]
        elif block == "named":
            messages.append(Message.user("hello", author_name="ann"))
        elif block == "reasoning":
            messages += [Message.assistant(reasoning="thinking"), Message.assistant(calls=[call])]
            messages.append(Message.tool(call.call_id, "done"))
        elif block in ("reused", "late"):
            unanswered = [b for b in range(number) if blocks[b] == "unanswered"]
            call_id = f"c{unanswered[-1]}" if unanswered else call.call_id
            if block == "reused":
                reused = FunctionCallContent(call_id, "lookup", "{}")
                messages += [Message.assistant(calls=[reused]), Message.tool(call_id, "again")]
            else:
                messages.append(Message.tool(call_id, "late"))
        elif block.startswith("two_calls"):
            other = FunctionCallContent(f"d{number}", "search", "{}")
            messages.append(Message.assistant(calls=[call, other]))
            results = [Message.tool(call.call_id, "a"), Message.tool(other.call_id, "b" * (number % 9))]
            if block == "two_calls_reversed":
                results.reverse()
            elif block == "two_calls_half":
                del results[1:]
            messages += results
        elif block == "text_and_call":
            messages += [Message.assistant("Let me look.", calls=[call]), Message.tool(call.call_id, "found")]
        elif block == "reasoned_answer":
            messages.append(Message.assistant("an answer", reasoning="thinking " * (number % 4)))
        elif block == "reasoned_calls":
            other = FunctionCallContent(f"d{number}", "search", "{}")
            messages.append(Message.assistant("Two lookups.", calls=[call, other], reasoning="plan"))
            messages += [Message.tool(call.call_id, "a"), Message.tool(other.call_id, "b")]
        elif block == "same_call_twice":
            messages += [Message.assistant(calls=[call, call]), Message.tool(call.call_id, "once")]
        elif block == "reasoning_twice":
            messages.append(Message("assistant", (ReasoningContent("one"), ReasoningContent("two"))))
        else:
            messages.append(Message.assistant("[Summary] so far", additional_properties={"_is_summary": True}))
    return messages


@DEFAULT
@given(
    messages=st.one_of(mostly_plain(), ANY_CONVERSATION),
    cuts=CUTS,
    tokenizer=tokenizers(),
    memoised=st.booleans(),
)
def test_plain_runs_group_and_count_as_the_general_loop_does(
    messages: list[Message], cuts: list[int], tokenizer: Tokenizer, memoised: bool
) -> None:
    """Appending in pieces, with or without counts memoised beforehand, the lean loop and the
    general loop build the same groups, counts, metrics and projection."""
    lean_input, general_input = fresh(messages), fresh(messages)
    if memoised:
        tokenizer.count_messages(lean_input)
        tokenizer.count_messages(general_input)
    lean = indexed(lean_input, cuts, tokenizer, plain=True)
    general = indexed(general_input, cuts, tokenizer, plain=False)
    assert_index_consistent(lean)
    assert [row[:2] + row[3:] for row in shape(lean)] == [row[:2] + row[3:] for row in shape(general)]
    lean_at = {id(m): position for position, m in enumerate(lean_input)}
    general_at = {id(m): position for position, m in enumerate(general_input)}
    assert [[lean_at[id(m)] for m in g.messages] for g in lean.groups] == [
        [general_at[id(m)] for m in g.messages] for g in general.groups
    ]
    assert counters(lean) == counters(general)
    assert [m._token_memo for m in lean_input] == [m._token_memo for m in general_input]


def test_a_reused_call_id_answered_in_a_later_plain_run_leaves_the_unanswered_call_as_it_was() -> None:
    """A call that never got its result, then (in a later append the lean loop takes) a new call
    with the same id, answered at once: the new call takes the id over, so a result for it that
    comes later still is an orphan, and the first call stays unanswered and in no unit."""
    call = FunctionCallContent("c1", "lookup", "{}")
    messages = [
        Message.user("q1"),
        Message.assistant(calls=[call]),
        Message.assistant("gave up"),
        Message.user("q2"),
        Message.assistant(calls=[call]),
        Message.tool("c1", "found"),
        Message.assistant("ok"),
        Message.user("q3"),
        Message.tool("c1", "late"),
    ]
    tokenizer = CharacterEstimatorTokenizer()
    lean = indexed(fresh(messages), [3, 7], tokenizer, plain=True)
    general = indexed(fresh(messages), [3, 7], tokenizer, plain=False)
    for index in (lean, general):
        first, late = index.groups[1], index.groups[-1]
        assert (first.is_complete, first.unit, late.orphan) == (False, (first,), True)
    assert [row[:2] + row[3:] for row in shape(lean)] == [row[:2] + row[3:] for row in shape(general)]


def collapse_then_window() -> PipelineStrategy:
    return PipelineStrategy(
        ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1),
        SlidingWindowStrategy(keep_last_groups=3, stable_step=1),
    )


def comparable(index: MessageIndex) -> list[tuple[Any, ...]]:
    """Every group, with messages by what they say (summaries are new objects on each run)."""
    return [
        (
            g.kind,
            g.turn,
            g.excluded,
            g.exclusion_reason,
            g.token_count,
            g.origin,
            [(m.role, m.text, dict(m.additional_properties), m._token_memo) for m in g.messages],
        )
        for g in index.groups
    ]


@DEFAULT
@given(messages=conversations(), window=st.booleans())
def test_summaries_written_when_read_equal_summaries_written_at_once(messages: list[Message], window: bool) -> None:
    """With the estimate, collapsed summaries are sized from their text and written only when read;
    with the same counts under another tokenizer class they are written at once.  Projection,
    metrics, every group (excluded summaries too, read back on demand) and the memos all agree."""
    results = []
    for tokenizer in (CharacterEstimatorTokenizer(), EagerEstimate()):
        strategy = collapse_then_window() if window else ToolResultCompactionStrategy(keep_last_tool_call_groups=1)
        index = MessageIndex(fresh(messages), tokenizer=tokenizer)
        asyncio.run(strategy.compact(index))
        projection = [(m.role, m.text, dict(m.additional_properties)) for m in index.projection()]
        results.append((projection, counters(index), comparable(index)))
        assert_index_consistent(index)
    assert results[0] == results[1]


def tool_history(turns: int) -> list[Message]:
    messages = [Message.system("be brief")]
    for turn in range(1, turns + 1):
        messages += [
            Message.user(f"question {turn}"),
            Message.assistant(calls=[FunctionCallContent(f"call_{turn}", "lookup", f'{{"n": {turn}}}')]),
            Message.tool(f"call_{turn}", f"result {turn} " + "x" * 300),
            Message.assistant(f"answer {turn}"),
        ]
    return messages


def test_a_summary_excluded_before_it_is_read_is_still_there_when_asked_for() -> None:
    index = MessageIndex(tool_history(6))
    asyncio.run(collapse_then_window().compact(index))
    summaries = [g for g in index.groups if g.kind is GroupKind.SUMMARY]
    assert len(summaries) == 5
    assert all(g.excluded for g in summaries[:-1])  # the window took them before anything read them
    for group in summaries:
        (message,) = group.messages
        assert message.text.startswith("[Tool results: lookup: result")
        assert message.additional_properties["_summary_source"] == "tool_results"
        assert index.tokenizer.count_message(message) == group.token_count


def test_group_objects_are_the_same_objects_and_follow_the_index() -> None:
    index = MessageIndex(tool_history(3))
    groups = index.groups
    assert same(groups, index.groups)
    assert same(index.live, groups)
    newest = next(index.newest_live())
    assert newest is groups[-1]
    assert not newest.excluded
    index.exclude(newest, "test")
    assert newest.excluded
    assert newest.exclusion_reason == "test"
    assert newest not in index.live
    index.include(newest)
    assert newest.included
    assert newest.exclusion_reason is None
    tool = next(g for g in groups if g.kind is GroupKind.TOOL_CALL)
    assert tool.call_ids == frozenset({"call_1"})
    assert tool.is_complete
    assert not tool.orphan
    assert tool.message_count == 2
    assert len(tool.messages) == 2


def test_events_list_the_index_groups_they_acted_on() -> None:
    index = MessageIndex(tool_history(8))
    asyncio.run(TruncationStrategy(max_n=60, compact_to=30, tokenizer=index.tokenizer).compact(index))
    (event,) = index.events
    groups = index.groups
    acted = list(event.groups)
    assert acted
    assert len(event.groups) == len(acted)
    assert all(g.excluded and g.exclusion_reason == "truncation" for g in acted)
    assert all(any(g is other for other in groups) for g in acted)
    assert event.groups[0] is acted[0]
    assert event.groups[1:] == tuple(acted[1:])
    assert event.messages == sum(g.message_count for g in acted)
    assert event.tokens == sum(g.token_count for g in acted)


def test_groups_built_outside_an_index_join_it_through_the_public_methods() -> None:
    index = MessageIndex(tool_history(3))
    tool = next(g for g in index.groups if g.kind is GroupKind.TOOL_CALL)
    [summary] = index.make_summary_groups(
        [Message.assistant("[Tool results: lookup: short]", additional_properties={"_is_summary": True})],
        turns=[tool.turn],
        origin="tool_results",
        replaces=[(tool,)],
    )
    assert summary.replaces == (tool,)
    assert summary.origin == "tool_results"
    assert not summary.excluded
    index.replace_many([(tool, summary)], "collapsed")
    assert tool.exclusion_reason == "collapsed"
    groups = index.groups
    assert groups[groups.index(summary) + 1] is tool
    assert summary.replaces == (tool,)
    assert_index_consistent(index)

    other = MessageIndex(tool_history(1))
    with pytest.raises(CompactionError, match="not a group of this index"):
        other.exclude(tool, "test")
    with pytest.raises(CompactionError, match="another index"):
        other.insert_before(other.groups[0], summary)


def test_a_call_waiting_across_appends_keeps_its_results_in_order() -> None:
    """A result that joins its call after a strategy added summaries in between: the group's
    messages stay the call and its results, in order."""
    messages = tool_history(4)
    index = MessageIndex(messages[:-2])  # the last call is indexed, its result not yet
    strategy = ToolResultCompactionStrategy(trigger=tokens_exceed(0), target=never(), keep_last_tool_call_groups=0)
    asyncio.run(strategy.compact(index))
    index.append(messages[-2:])
    last_call = [g for g in index.groups if g.kind is GroupKind.TOOL_CALL][-1]
    assert same(last_call.messages, messages[-3:-1])
    assert_index_consistent(index)
