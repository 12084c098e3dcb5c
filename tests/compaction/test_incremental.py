"""Incremental indexing: appending in pieces must be indistinguishable from indexing at once.

An agent's history grows a message or a tool result at a time, and the index only groups and
counts what was appended.  The risky part is the tail that can still change (a call waiting for
its results, reasoning that may turn out to precede a call), so conversations are cut at every
possible place, including between a call and its results and between reasoning and the call it
belongs to.  Exclusions and summaries made before an append must survive it with the running
metrics still matching what the groups say.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.compaction import MessageIndex
from contextledger.messages import Message, validate
from contextledger.tokenizers import Tokenizer
from tests.compaction.test_properties import assert_index_consistent, same
from tests.conversations import conversations, dirty_conversations, strategy_specs, tokenizers
from tests.sizes import examples

DEFAULT = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_CONVERSATION = st.one_of(conversations(), dirty_conversations())
CUTS = st.lists(st.integers(0, 80), max_size=6)


def shape(index: MessageIndex) -> list[tuple[Any, ...]]:
    """Everything a group is, with messages by identity and the groups of its unit by id."""
    return [
        (
            g.kind,
            g.turn,
            tuple(id(m) for m in g.messages),
            g.orphan,
            g.token_count,
            g.call_ids,
            g.excluded,
            g.exclusion_reason,
            tuple(map(index.id_of, g.unit)),
            g.is_complete,
        )
        for g in index.groups
    ]


def counters(index: MessageIndex) -> tuple[int, ...]:
    """Every running total the index keeps."""
    return (
        index.total_groups,
        index.total_messages,
        index.total_tokens,
        index.total_turns,
        index.included_groups,
        index.included_messages,
        index.included_tokens,
        index.included_turns,
        index.included_non_system_groups,
        index.included_non_system_messages,
        index.included_tool_call_groups,
    )


def chunks(messages: Sequence[Message], cuts: Sequence[int]) -> list[list[Message]]:
    """``messages`` split at ``cuts`` (clipped, sorted, repeats kept so empty chunks occur too)."""
    points = [0, *sorted(min(c, len(messages)) for c in cuts), len(messages)]
    return [list(messages[a:b]) for a, b in itertools.pairwise(points)]


@DEFAULT
@given(messages=ANY_CONVERSATION, cuts=CUTS, tokenizer=tokenizers())
def test_appending_in_chunks_equals_indexing_at_once(
    messages: list[Message], cuts: list[int], tokenizer: Tokenizer
) -> None:
    whole = MessageIndex(messages, tokenizer=tokenizer)
    pieces = MessageIndex(tokenizer=tokenizer)
    for chunk in chunks(messages, cuts):
        pieces.append(chunk)
        assert_index_consistent(pieces)
    assert shape(pieces) == shape(whole)
    assert counters(pieces) == counters(whole)
    assert pieces.metrics() == whole.metrics()
    assert same(pieces.projection(), whole.projection())
    assert same(pieces.source_messages, messages)


@DEFAULT
@given(messages=ANY_CONVERSATION, cuts=CUTS)
def test_update_with_a_longer_list_appends(messages: list[Message], cuts: list[int]) -> None:
    """Each growing prefix is an append (False), and the result is the one-shot index."""
    index = MessageIndex()
    for end in sorted({min(c, len(messages)) for c in cuts} | {len(messages)}):
        assert index.update(messages[:end]) is False
    assert index.update(messages) is False  # nothing new: still an append, of nothing
    whole = MessageIndex(messages)
    assert shape(index) == shape(whole)
    assert counters(index) == counters(whole)


@DEFAULT
@given(messages=ANY_CONVERSATION, data=st.data())
def test_update_with_a_changed_earlier_message_rebuilds(messages: list[Message], data: st.DataObject) -> None:
    """An edit before the end of what was indexed, or a shorter list, rebuilds: exclusions are
    cleared and the index equals a fresh one."""
    if not messages:
        return
    indexed = data.draw(st.integers(1, len(messages)), label="indexed")
    index = MessageIndex(messages[:indexed])
    index.exclude(index.groups[0], "test")
    if data.draw(st.booleans(), label="shorten"):
        changed = messages[: indexed - 1]
    else:
        edited = data.draw(st.integers(0, indexed - 1), label="edited")
        changed = [*messages[:edited], Message.user("⟂ edited ⟂"), *messages[edited + 1 :]]
    assert index.update(changed) is True
    fresh = MessageIndex(changed)
    assert shape(index) == shape(fresh)
    assert counters(index) == counters(fresh)
    assert_index_consistent(index)


@st.composite
def partly_excluded(draw: st.DrawFn) -> tuple[list[Message], int, list[int]]:
    """A conversation, where to cut it, and which groups of the cut prefix to exclude (by position,
    so a falsifying example reads as a recipe)."""
    messages = draw(ANY_CONVERSATION)
    cut = draw(st.integers(0, len(messages)))
    count = len(MessageIndex(messages[:cut]).groups)
    excluded = sorted(draw(st.sets(st.integers(0, max(count - 1, 0)), max_size=count))) if count else []
    return messages, cut, excluded


def index_with_exclusions(messages: list[Message], cut: int, excluded: list[int]) -> MessageIndex:
    index = MessageIndex(messages[:cut])
    groups = index.groups
    for position in excluded:
        index.exclude(groups[position], "test")
    return index


@DEFAULT
@given(case=partly_excluded())
def test_metrics_stay_consistent_when_appending_after_exclusions(case: tuple[list[Message], int, list[int]]) -> None:
    messages, cut, excluded = case
    index = index_with_exclusions(messages, cut, excluded)
    index.append(messages[cut:])
    assert_index_consistent(index)
    assert same(index.source_messages, messages)


@DEFAULT
@given(case=partly_excluded())
def test_exclusions_survive_an_append(case: tuple[list[Message], int, list[int]]) -> None:
    """What was excluded stays excluded and what was included stays included: an append adds the
    new messages and changes nothing about the ones already there."""
    messages, cut, excluded = case
    index = index_with_exclusions(messages, cut, excluded)
    excluded_before = {id(m) for g in index.groups if g.excluded for m in g.messages}
    included_before = index.projection()
    excluded_groups = [g for g in index.groups if g.excluded]
    assert index.update(messages) is False
    in_projection = {id(m) for m in index.projection()}
    assert not excluded_before & in_projection, "an excluded message came back after an append"
    assert all(id(m) in in_projection for m in included_before), "an included message vanished after an append"
    still_there = {id(g) for g in index.groups}
    assert all(g.excluded and g.exclusion_reason == "test" for g in excluded_groups if id(g) in still_there)


@DEFAULT
@given(data=st.data(), tokenizer=tokenizers())
def test_compacting_then_appending_keeps_the_index_consistent(data: st.DataObject, tokenizer: Tokenizer) -> None:
    """Compact a prefix (possibly cut between a call and its results), append the rest, compact
    again with the same strategy: metrics match the groups at every step, and a valid history
    gives a valid projection once all of it is in."""
    messages = data.draw(ANY_CONVERSATION, label="messages")
    spec = data.draw(strategy_specs(tokenizer), label="strategy")
    cut = data.draw(st.integers(0, len(messages)), label="cut")
    strategy = spec.build()
    # Strategies that declare a tokenizer declare this one; the index must count with it.
    index = MessageIndex(messages[:cut], tokenizer=tokenizer)
    asyncio.run(strategy.compact(index))
    assert_index_consistent(index)
    index.append(messages[cut:])
    assert_index_consistent(index)
    valid = validate(messages) == []
    if valid:
        assert validate(index.projection()) == []
    asyncio.run(strategy.compact(index))
    assert_index_consistent(index)
    if valid:
        assert validate(index.projection()) == []
