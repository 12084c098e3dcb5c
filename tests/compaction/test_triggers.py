"""Trigger boundaries: strict comparisons on what is still included.

A trigger decides whether a strategy starts and, negated, when it stops, so an
off-by-one here changes how much history every strategy keeps.  Each threshold is
checked one below, at, and one above the measured value, on an index whose
numbers are known by hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from contextledger import ConfigurationError, FunctionCallContent, Message
from contextledger.compaction import (
    MessageIndex,
    Trigger,
    all_of,
    always,
    any_of,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)


def conversation() -> list[Message]:
    """Two system messages and two user turns, one of them with a tool call.

    Estimated tokens (3 framing + ceil(chars / 4), +3 per call): 4 + 4 + 4 + (8 + 4) + 4 + 4 + 4 = 36.
    Groups: system, system, user, tool call (2 messages), assistant, user, assistant = 7.
    """
    return [
        Message.system("abcd"),
        Message.system("efgh"),
        Message.user("ijkl"),
        Message.assistant(calls=[FunctionCallContent("c1", "get", "{}")]),
        Message.tool("c1", "ok"),
        Message.assistant("mnop"),
        Message.user("qrst"),
        Message.assistant("uvwx"),
    ]


@pytest.fixture
def index() -> MessageIndex:
    built = MessageIndex(conversation())
    # The hand-computed numbers every boundary below is taken around.
    assert built.included_tokens == 36
    assert built.included_messages == 8
    assert built.included_groups == 7
    assert built.included_turns == 2
    return built


# Strict comparisons -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "measured", "expected"),
    [
        (tokens_exceed, 36, {35: True, 36: False, 37: False}),
        (tokens_below, 36, {35: False, 36: False, 37: True}),
        (messages_exceed, 8, {7: True, 8: False, 9: False}),
        (turns_exceed, 2, {1: True, 2: False, 3: False}),
        (groups_exceed, 7, {6: True, 7: False, 8: False}),
    ],
    ids=["tokens_exceed", "tokens_below", "messages_exceed", "turns_exceed", "groups_exceed"],
)
def test_threshold_is_strict_at_n_minus_one_n_and_n_plus_one(
    index: MessageIndex, factory: Callable[[int], Trigger], measured: int, expected: dict[int, bool]
) -> None:
    """``tokens_exceed(100)`` fires at 101, not at 100; ``tokens_below(100)`` at 99, not at 100."""
    assert sorted(expected) == [measured - 1, measured, measured + 1]
    assert {n: factory(n)(index) for n in expected} == expected


def test_groups_exceed_counts_system_groups() -> None:
    """Unlike most strategy floors, ``groups_exceed`` counts system groups: two system messages
    and one user message are three groups."""
    index = MessageIndex([Message.system("a"), Message.system("b"), Message.user("c")])

    assert index.included_non_system_groups == 1
    assert groups_exceed(2)(index) is True
    assert groups_exceed(3)(index) is False


def test_thresholds_of_zero_fire_on_any_content() -> None:
    """Zero is a valid threshold: ``tokens_exceed(0)`` fires as soon as anything is included,
    and nothing is below zero tokens."""
    empty = MessageIndex([])
    one = MessageIndex([Message.user("hi")])

    assert tokens_exceed(0)(empty) is False
    assert tokens_exceed(0)(one) is True
    assert messages_exceed(0)(one) is True
    assert turns_exceed(0)(one) is True
    assert groups_exceed(0)(one) is True
    assert tokens_below(0)(one) is False
    assert tokens_below(0)(empty) is False


# Included groups only ------------------------------------------------------------------------------


def test_has_tool_calls_before_and_after_excluding_the_tool_group(index: MessageIndex) -> None:
    """``has_tool_calls`` asks whether a tool-call group is still included, not whether one was
    ever indexed."""
    trigger = has_tool_calls()
    assert trigger(index) is True

    tool = next(g for g in index.groups if g.call_ids)
    index.exclude(tool, "test")
    assert trigger(index) is False

    index.include(tool)
    assert trigger(index) is True


def test_has_tool_calls_is_false_without_tool_calls() -> None:
    assert has_tool_calls()(MessageIndex([Message.user("a"), Message.assistant("b")])) is False


def test_excluding_a_group_lowers_every_count_a_trigger_reads(index: MessageIndex) -> None:
    """Triggers read the included metrics: excluding the tool group (2 messages, 12 tokens)
    takes exactly its share off, so triggers at the old values stop firing."""
    at_old_values = [tokens_exceed(35), messages_exceed(7), groups_exceed(6)]
    assert all(t(index) for t in at_old_values)

    tool = next(g for g in index.groups if g.call_ids)
    index.exclude(tool, "test")

    assert (index.included_tokens, index.included_messages, index.included_groups) == (24, 6, 6)
    assert not any(t(index) for t in at_old_values)
    assert all(t(index) for t in [tokens_exceed(23), messages_exceed(5), groups_exceed(5)])
    assert tokens_below(25)(index) is True


def test_excluding_a_system_group_counts_for_groups_exceed(index: MessageIndex) -> None:
    """System groups are groups: excluding one moves ``groups_exceed`` like any other."""
    system = index.groups[0]
    index.exclude(system, "test")

    assert groups_exceed(6)(index) is False
    assert groups_exceed(5)(index) is True


def test_a_turn_counts_while_any_of_its_groups_is_included(index: MessageIndex) -> None:
    """Turn 1 is a user message, a tool group and a reply: it keeps counting until the last of
    the three is excluded."""
    first_turn = [g for g in index.groups if g.turn == 1]
    assert len(first_turn) == 3
    trigger = turns_exceed(1)

    for group in first_turn[:-1]:
        index.exclude(group, "test")
        assert index.included_turns == 2
        assert trigger(index) is True

    index.exclude(first_turn[-1], "test")
    assert index.included_turns == 1
    assert trigger(index) is False

    index.include(first_turn[0])
    assert index.included_turns == 2
    assert trigger(index) is True


def test_messages_before_the_first_user_message_are_not_a_turn() -> None:
    """Turn 0 (what precedes the first user message) is not a user turn."""
    index = MessageIndex([Message.system("s"), Message.assistant("hello"), Message.user("hi")])

    assert index.included_turns == 1
    assert turns_exceed(0)(index) is True
    assert turns_exceed(1)(index) is False


# Combinators ----------------------------------------------------------------------------------------


def test_all_of_nothing_is_true_and_any_of_nothing_is_false(index: MessageIndex) -> None:
    """The identities of AND and OR, so that a list of conditions built at run time behaves when
    it turns out empty."""
    assert all_of()(index) is True
    assert any_of()(index) is False
    assert all_of()(MessageIndex([])) is True
    assert any_of()(MessageIndex([])) is False


@pytest.mark.parametrize(
    ("triggers", "all_expected", "any_expected"),
    [
        ((always(), always()), True, True),
        ((always(), never()), False, True),
        ((never(), never()), False, False),
    ],
)
def test_all_of_and_any_of_combine(
    index: MessageIndex, triggers: tuple[Trigger, Trigger], all_expected: bool, any_expected: bool
) -> None:
    assert all_of(*triggers)(index) is all_expected
    assert any_of(*triggers)(index) is any_expected


def test_always_and_never(index: MessageIndex) -> None:
    assert always()(index) is True
    assert never()(index) is False
    assert always()(MessageIndex([])) is True


def test_combinators_nest(index: MessageIndex) -> None:
    """Combinators take any trigger, including other combinators and plain functions."""

    def has_two_users(i: MessageIndex) -> bool:
        return i.included_turns >= 2

    assert any_of(all_of(tokens_exceed(100), has_tool_calls()), has_two_users)(index) is True
    assert all_of(any_of(tokens_exceed(100), never()), has_two_users)(index) is False


# Bad thresholds ----------------------------------------------------------------------------------------

FACTORIES: list[Callable[[Any], Trigger]] = [
    tokens_exceed,
    tokens_below,
    messages_exceed,
    turns_exceed,
    groups_exceed,
]


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("value", [-1, 1.5, "3", True, None], ids=repr)
def test_bad_threshold_raises_configuration_error_naming_it(factory: Callable[[Any], Trigger], value: object) -> None:
    """A negative, fractional, textual or boolean threshold is a mistake to report at
    construction, not a comparison to make silently later (``True`` would act as 1)."""
    with pytest.raises(ConfigurationError, match=re.escape(repr(value))) as caught:
        factory(value)
    assert factory.__name__ in str(caught.value)


@pytest.mark.parametrize("combinator", [all_of, any_of], ids=lambda f: f.__name__)
def test_combinator_rejects_a_non_callable(combinator: Callable[..., Trigger]) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("'tokens'")):
        combinator(always(), "tokens")
