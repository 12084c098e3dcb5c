"""Batches on long histories: the shortcuts a strategy's batch takes, held to the slow path.

A batch of evenly spaced ids in increasing order (consecutive, or every k-th: a collapse on a
history whose turns have one shape) is read and written in column slices, and a consecutive one is
cut out of the list of appended groups in one step; a batch that moves as many groups as stay
included drops the per-turn counts, which are counted again from the included groups when
``included_turns`` is next read; a truncation finds its cut from whichever end is nearer; a turn
window cuts its steps where the turn changes.  These only start past a few dozen groups, which the
generated conversations of the other property tests seldom reach: here the histories are long and
the batches random (runs, runs out of order, runs with a repeat, every k-th group, collapses,
single groups, restores), and
after every step the index must agree with a recount from its groups.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.compaction import (
    GroupKind,
    MessageIndex,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    Trigger,
    always,
    turns_exceed,
)
from contextledger.compaction._base import oldest_until
from contextledger.exceptions import CompactionError
from contextledger.messages import FunctionCallContent, Message
from tests.compaction.test_columns import tool_history
from tests.compaction.test_properties import assert_index_consistent
from tests.conversations import conversations
from tests.sizes import examples

_PROPERTIES = MappingProxyType({"_summary": True})

_STEPS = (
    "run",
    "run",
    "run",
    "run_reversed",
    "run_with_repeat",
    "run_with_gap",
    "stride",
    "stride",
    "stride_with_gap",
    "collapse",
    "one",
    "include",
    "read_turns",
)


@st.composite
def plain_histories(draw: st.DrawFn) -> list[Message]:
    """Long histories of the plain shape (what most agents send: text turns, calls answered right
    away, the odd system message), whose groups have consecutive ids, so batches are runs."""
    messages = [Message.system("You are terse.")]
    turns = draw(st.lists(st.sampled_from(("chat", "tool", "two_tools", "system")), min_size=20, max_size=200))
    for number, shape in enumerate(turns, 1):
        messages.append(Message.user(f"question {number} " * (number % 5 + 1)))
        if shape == "system":
            messages.append(Message.system(f"note {number}"))
        for call in range(("tool", "two_tools").index(shape) + 1 if shape in ("tool", "two_tools") else 0):
            call_id = f"call_{number}_{call}"
            messages.append(Message.assistant(calls=[FunctionCallContent(call_id, "lookup", "{}")]))
            messages.append(Message.tool(call_id, f"result {number} " * (number % 7 + 1)))
        messages.append(Message.assistant(f"answer {number}"))
    return messages


def _random_batches(index: MessageIndex, data: st.DataObject) -> None:
    assert_index_consistent(index)
    for _ in range(data.draw(st.integers(1, 6), label="steps")):
        live = index.live_ids()
        step = data.draw(st.sampled_from(_STEPS), label="step")
        if step == "read_turns":
            assert index.included_turns >= 0
        elif step == "include":
            excluded = [g for g in range(index.total_groups) if index.columns.reason[g] is not None]
            if excluded:
                chosen = data.draw(st.lists(st.sampled_from(excluded), max_size=len(excluded)), label="restore")
                index.include_ids(chosen)
        elif live:
            # Mostly long batches: the shortcuts start at a few dozen groups.
            length = data.draw(st.integers(1, len(live)) | st.integers(max(len(live) - 40, 1), len(live)), label="len")
            start = data.draw(st.integers(0, len(live) - length), label="start")
            batch = live[start : start + length]
            if step == "one":
                batch = batch[:1]
            elif step == "run_reversed":
                batch.reverse()
            elif step == "run_with_repeat":
                batch.append(batch[len(batch) // 2])
            elif step == "run_with_gap" and len(batch) > 2:
                del batch[len(batch) // 2]
            elif step.startswith("stride"):  # every k-th group (what a collapse takes on one shape)
                batch = batch[data.draw(st.integers(0, 3), label="offset") :: data.draw(st.integers(2, 4), label="k")]
                if step == "stride_with_gap" and len(batch) > 2:
                    del batch[len(batch) // 2]
            if step == "collapse":
                columns = index.columns
                tools = [g for g in batch if columns.kind[g] is GroupKind.TOOL_CALL and g not in columns.unit]
                index.collapse_ids(
                    tools, [f"summary of {g}" for g in tools], "collapsed", origin="test", properties=_PROPERTIES
                )
            else:
                index.exclude_ids(batch, "test")
        assert_index_consistent(index)


@settings(max_examples=examples(80), deadline=None)
@given(messages=plain_histories(), data=st.data())
def test_random_batches_on_long_plain_histories_keep_the_index_consistent(
    messages: list[Message], data: st.DataObject
) -> None:
    _random_batches(MessageIndex(messages), data)


@settings(max_examples=examples(40), deadline=None)
@given(messages=conversations(max_blocks=160, traffic=True), data=st.data())
def test_random_batches_on_long_real_traffic_keep_the_index_consistent(
    messages: list[Message], data: st.DataObject
) -> None:
    _random_batches(MessageIndex(messages), data)


def test_a_window_over_a_long_history_takes_a_run_and_counts_turns_again_when_read() -> None:
    index = MessageIndex(tool_history(500))
    assert index.included_turns == 500
    assert index.total_groups == 1 + 500 * 3
    changed = asyncio.run(SlidingWindowStrategy(keep_last_groups=20).compact(index))
    assert changed
    (event,) = index.events
    assert event.messages == index.total_messages - index.included_messages
    assert event.tokens == index.total_tokens - index.included_tokens
    assert event.detail.startswith(f"{index.total_groups - 21} groups, turns 1-494")
    assert_index_consistent(index)
    assert index.included_turns == 7  # groups of turns 494 (its last group) to 500
    # Back to one group at a time: the counts taken again are kept up to date from here.
    index.include_ids([1, 2, 3])
    assert index.included_turns == 8
    index.exclude_ids([index.live_ids()[1]], "test")
    assert_index_consistent(index)


def test_a_collapse_of_every_tool_group_reads_them_as_one_evenly_spaced_run() -> None:
    index = MessageIndex(tool_history(500))
    tools = index.tool_call_ids()
    assert index.run_of(tools) == slice(2, 3 * 500, 3)  # user, call and result, answer: every third id
    assert index.run_of([*tools[:-1], tools[-1] + 1]) is None  # the last one out of step
    assert index.run_of(tools[:40] + tools[41:]) is None  # one missing
    removed = sum(index.columns.tokens[g] for g in tools[:-1])
    assert asyncio.run(ToolResultCompactionStrategy(keep_last_tool_call_groups=1, stable_step=1).compact(index))
    (event,) = index.events
    assert event.detail.startswith("499 groups, turns 1-499: replaced by one-line summaries")
    assert (event.messages, event.tokens) == (2 * 499, removed)
    assert [index.columns.reason[g] for g in tools] == ["collapsed"] * 499 + [None]
    assert (index.total_messages, index.included_messages) == (2001 + 499, 2001 - 2 * 499 + 499)
    assert_index_consistent(index)


def test_a_turn_window_over_a_long_history_reads_turns_counted_again() -> None:
    index = MessageIndex(tool_history(300))
    asyncio.run(SlidingWindowStrategy(trigger=turns_exceed(4)).compact(index))
    assert index.included_turns == 4
    assert_index_consistent(index)


def test_a_run_with_a_negative_start_is_refused_and_changes_nothing() -> None:
    index = MessageIndex(tool_history(40))
    before = index.metrics()
    with pytest.raises(CompactionError, match="is not a group id of this index"):
        index.exclude_ids(list(range(-1, 60)), "test")
    with pytest.raises(CompactionError, match="is not a group id of this index"):
        index.exclude_ids(list(range(60, index.total_groups + 1)), "test")
    assert index.metrics() == before
    assert_index_consistent(index)


@pytest.mark.parametrize("wrong", [6.0, True], ids=["integral float", "bool"])
def test_an_id_of_the_wrong_type_inside_a_run_is_refused_and_changes_nothing(wrong: object) -> None:
    index = MessageIndex(tool_history(40))
    before = index.metrics()
    for batch in (list(range(1, 61)), list(range(1, 61, 3)), [0, *range(3, 61)]):  # runs, and not a run
        batch[1] = wrong  # type: ignore[call-overload]
        with pytest.raises(CompactionError, match=f"{wrong!r} is not a group id of this index"):
            index.exclude_ids(batch, "test")
        assert index.metrics() == before
    assert_index_consistent(index)


@settings(max_examples=examples(80), deadline=None)
@given(
    messages=plain_histories(),
    metric=st.sampled_from(["included_tokens", "included_messages"]),
    keep=st.floats(0, 1.2),
    data=st.data(),
)
def test_the_cut_of_a_truncation_is_the_fewest_oldest_groups_that_reach_the_limit(
    messages: list[Message], metric: str, keep: float, data: st.DataObject
) -> None:
    """``oldest_until`` walks from whichever end is nearer the cut; either way it must return
    what running sums from the oldest say: the fewest oldest candidates that bring the metric
    down to the limit (all of them if none do)."""
    index = MessageIndex(messages)
    live = index.live_ids()
    candidates = live[data.draw(st.integers(0, len(live) // 3), label="skip") :]
    remaining = getattr(index, metric)
    limit = int(remaining * keep)
    column = index.columns.tokens if metric == "included_tokens" else index.columns.size
    expected: list[int] = []
    reached = 0
    for group in candidates:
        if remaining - reached <= limit:
            break
        expected.append(group)
        reached += column[group]
    assert oldest_until(index, candidates, metric, limit) == expected


@pytest.mark.parametrize("trigger", [always(), turns_exceed(1)], ids=["always", "turns_exceed(1)"])
def test_a_turn_window_keeps_every_turn_when_there_are_fewer_than_its_floor(trigger: Trigger) -> None:
    """Three turns and ``minimum_preserved=5``: the floor keeps them all (the oldest turn used to
    go, the floor being subtracted from the turn count and the negative result taken as a slice)."""
    messages = [Message.system("s")]
    for number in range(3):
        messages += [Message.user(f"q{number}"), Message.assistant(f"a{number}")]
    index = MessageIndex(messages)
    assert not asyncio.run(SlidingWindowStrategy(trigger, minimum_preserved=5).compact(index))
    assert index.included_turns == 3
    assert index.projection() == messages
