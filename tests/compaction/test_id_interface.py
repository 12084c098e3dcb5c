"""The index's id interface is the one way strategies read and change it, built-in or not.

A strategy of your own must run on the same code path as the library's: the built-in strategies
are run here on an index that refuses every private attribute, a strategy written only against
the public interface keeps every guarantee on random real-traffic conversations, and a wrong id
or a refused change leaves the index exactly as it was.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger import FunctionCallContent, Message, compaction, validate
from contextledger.compaction import (
    CompactionStrategy,
    GroupKind,
    MessageIndex,
    tokens_exceed,
)
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.exceptions import CompactionError
from contextledger.messages import SUMMARY_PROPERTY
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from tests.compaction.test_properties import DEFAULT, assert_index_consistent, cases, check_units
from tests.conversations import StrategySpec, conversations


class PublicOnly:
    """An index seen only through its public names: reading a private one fails the test."""

    def __init__(self, index: MessageIndex) -> None:
        object.__setattr__(self, "_real", index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AssertionError(f"a strategy read the private attribute {name!r} of the index")
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AssertionError(f"a strategy set {name!r} on the index")


def state(index: MessageIndex) -> tuple[Any, ...]:
    """Everything a caller can observe of an index."""
    return (
        index.metrics(),
        index.included_non_system_groups,
        index.included_tool_call_groups,
        [(g.kind, g.turn, g.exclusion_reason, g.token_count, tuple(map(id, g.messages))) for g in index.groups],
        [id(m) for m in index.projection()],
        len(index.events),
    )


@given(case=cases(traffic=None))
@DEFAULT
def test_built_in_strategies_use_only_the_public_interface(case: tuple[list[Message], StrategySpec]) -> None:
    messages, spec = case
    strategy = spec.build()
    index = MessageIndex(messages, tokenizer=resolve_tokenizer(strategy, None))
    asyncio.run(strategy.compact(PublicOnly(index)))  # type: ignore[arg-type]
    assert_index_consistent(index)
    projection = index.projection()
    assert validate(projection) == [] or validate(messages) != []
    check_units(messages, projection, index)


class KeepUserWords(CompactionStrategy):
    """A user's own strategy, written against the public id interface only: collapse old tool
    groups into a line each, then replace old assistant replies by one summary, keeping every
    user message and the newest ``keep`` groups."""

    name = "keep_user_words"

    def __init__(self, keep: int) -> None:
        super().__init__(tokens_exceed(0))
        self.keep = keep

    async def _run(self, index: MessageIndex) -> bool:
        columns = index.columns
        live = index.live_ids()
        old = live[: max(len(live) - self.keep, 0)]
        tools = [
            g
            for g in old
            if columns.kind[g] is GroupKind.TOOL_CALL
            and g not in columns.unit
            and g not in columns.orphan
            and g not in columns.unanswered
        ]
        properties = {SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: "tool_results"}
        texts = [f"[tool said {len(index.messages_of(g))} things]" for g in tools]
        collapsed = index.collapse_ids(tools, texts, "collapsed", origin="tool_results", properties=properties)
        replies = [g for g in old if columns.kind[g] is GroupKind.ASSISTANT_TEXT]
        gone = index.exclude_ids(replies, "summarized")
        if gone:
            summary = Message.assistant(
                f"[Summary] {len(gone)} replies", additional_properties={SUMMARY_PROPERTY: True}
            )
            index.insert_summary(gone[0], summary, replaces=gone, origin=self.name)
        return index.record(self.name, "excluded", gone, "replies summarised") or bool(collapsed)


@given(messages=conversations(traffic=True), keep=st.integers(1, 6))
@DEFAULT
def test_a_strategy_of_your_own_keeps_every_guarantee(messages: list[Message], keep: int) -> None:
    index = MessageIndex(messages)
    users = [id(m) for m in messages if m.role == "user"]
    asyncio.run(KeepUserWords(keep).compact(index))
    assert_index_consistent(index)
    projection = index.projection()
    assert validate(projection) == [] or validate(messages) != []  # real traffic may interleave results
    check_units(messages, projection, index)
    assert [id(m) for m in projection if m.role == "user"] == users
    assert [m for m in projection if m.role == "system"] == [m for m in messages if m.role == "system"]


def small_messages() -> list[Message]:
    call = Message.assistant(calls=[FunctionCallContent("c1", "lookup", "{}")])
    return [
        Message.system("rules"),
        Message.user("one"),
        call,
        Message.tool("c1", "result"),
        Message.assistant("first reply"),
        Message.user("two"),
        Message.assistant("second reply"),
    ]


def small_index(messages: list[Message] | None = None) -> MessageIndex:
    return MessageIndex(small_messages() if messages is None else messages)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda index: index.exclude_ids([1, 99], "test"), "99 is not a group id"),
        (lambda index: index.exclude_ids([-1], "test"), "-1 is not a group id"),
        (lambda index: index.exclude_ids([1, 2, 3.0], "test"), "3.0 is not a group id"),
        (lambda index: index.exclude_ids([1], ""), "needs a reason"),
        (lambda index: index.include_ids([42]), "42 is not a group id"),
        (lambda index: index.replace_ids([0], [Message.assistant("x")], "r", origin="o"), "non-system"),
        (lambda index: index.replace_ids([2, 2], [Message.assistant("x")] * 2, "r", origin="o"), "each once"),
        (lambda index: index.replace_ids([2], [], "r", origin="o"), "1 groups but 0 replacements"),
        (lambda index: index.collapse_ids([2, 3], ["only one"], "r", origin="o", properties={}), "2 groups but 1"),
        (lambda index: index.insert_summary(77, Message.assistant("s"), replaces=[1], origin="o"), "77"),
    ],
)
def test_a_refused_change_names_the_problem_and_changes_nothing(change: Any, message: str) -> None:
    index = small_index()
    index.exclude_ids([4], "earlier")  # some state to keep
    before = state(index)
    with pytest.raises(CompactionError, match=message):
        change(index)
    assert state(index) == before
    assert_index_consistent(index)


def test_an_excluded_group_cannot_be_replaced_and_nothing_changes() -> None:
    index = small_index()
    index.exclude_ids([2], "earlier")
    before = state(index)
    with pytest.raises(CompactionError, match="included non-system groups"):
        index.replace_ids([2], [Message.assistant("[Tool results: lookup: result]")], "collapsed", origin="tools")
    assert state(index) == before


def test_group_objects_and_ids_are_two_spellings_of_one_change() -> None:
    messages = small_messages()
    by_object, by_id = small_index(messages), small_index(messages)
    by_object.exclude(by_object.groups[2], "test")
    by_id.exclude_ids([2], "test")
    assert state(by_object) == state(by_id)
    by_object.include(by_object.groups[2])
    by_id.include_ids([2])
    assert state(by_object) == state(by_id) == state(small_index(messages))
    assert by_id.group(2) is by_id.groups[2]
    assert by_id.id_of(by_id.groups[2]) == 2


def test_columns_are_live_views_of_the_table() -> None:
    index = small_index()
    columns = index.columns
    assert list(columns.kind) == [g.kind for g in index.groups]
    assert list(columns.tokens) == [g.token_count for g in index.groups]
    index.exclude_ids([4], "test")
    assert columns.reason[4] == "test"
    assert index.live_ids() == [0, 1, 2, 3, 5]
    assert list(index.newest_ids()) == [5, 3, 2, 1, 0]
    assert index.tool_call_ids() == [2]


def test_every_name_has_one_import_path() -> None:
    """Names are imported from ``contextledger.compaction`` only: its modules are all private, but for
    an old public module kept for one minor version, which says it is deprecated in its docstring."""
    public = [module.name for module in pkgutil.iter_modules(compaction.__path__) if not module.name.startswith("_")]
    assert public == ["triggers"]
    for name in public:
        with pytest.warns(DeprecationWarning, match="is deprecated"):
            module = importlib.reload(importlib.import_module(f"contextledger.compaction.{name}"))
        assert (module.__doc__ or "").startswith("Deprecated:"), name
    for name in compaction.__all__:
        assert getattr(compaction, name) is not None
    assert not hasattr(compaction, "compact_messages")
    assert "triggers" not in compaction.__all__
