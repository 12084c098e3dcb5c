"""Properties every compaction strategy must keep, on random conversations and random strategies.

The example-based tests pin down what each strategy does on hand-written histories; these ask
whether the rules hold on histories nobody thought to write: a valid history stays valid, system
messages survive, nothing the caller passed is modified, the projection is never empty and is
made only of the caller's messages (in order) and summaries the library wrote, the index's running
metrics agree with its groups, and each strategy either meets its target or stops at its floor,
exactly where its documented rule says.

Each generated case checks every applicable property at once (:func:`check_compaction`); the
tests differ only in which conversations and strategies they draw.  Hypothesis prints the
falsifying conversation and a constructor-like repr of the strategy, which is the reproduction.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.clients import ScriptedChatClient
from contextledger.compaction import (
    CompactionResult,
    CompactionStrategy,
    GroupKind,
    MessageGroup,
    MessageIndex,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    always,
    apply_compaction,
    apply_compaction_sync,
    compact_with_report,
    never,
)
from contextledger.compaction._base import threshold_of
from contextledger.exceptions import SummarizationError
from contextledger.messages import SUMMARY_PROPERTY, Message, ReasoningContent, to_openai, validate
from contextledger.messages._message import SUMMARY_SOURCE_PROPERTY
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer
from tests.conversations import (
    SHAPES,
    ScriptedReply,
    StrategySpec,
    conversations,
    dirty_conversations,
    gentlest_first_specs,
    selective_specs,
    shapes_of,
    sliding_window_specs,
    specs_for,
    strategy_specs,
    summarization_specs,
    tokenizers,
    tool_result_specs,
    truncation_specs,
)
from tests.sizes import STRESS_SHAPES, examples, sized

if TYPE_CHECKING:
    from tests.conversations import SpecFactory

SYSTEM, USER, TOOL_CALL, SUMMARY = GroupKind.SYSTEM, GroupKind.USER, GroupKind.TOOL_CALL, GroupKind.SUMMARY

# The default run draws a few hundred cases per test (the whole file in well under a minute); the
# stress test below draws 100,000.
DEFAULT = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Metrics, recomputed from groups ---------------------------------------------------------------


@dataclass(frozen=True)
class Metrics:
    """The included metrics triggers read, recomputed from a list of included groups.

    It carries the same attribute names as :class:`MessageIndex`, so a trigger or a strategy's
    target can be asked about a hypothetical state ("after excluding these three groups") without
    building an index for it.
    """

    included_groups: int
    included_messages: int
    included_tokens: int
    included_turns: int
    included_non_system_groups: int
    included_non_system_messages: int
    included_tool_call_groups: int

    def as_index(self) -> MessageIndex:
        return cast("MessageIndex", self)


def metrics_of(live: Iterable[MessageGroup]) -> Metrics:
    groups = list(live)
    non_system = [g for g in groups if g.kind is not SYSTEM]
    return Metrics(
        included_groups=len(groups),
        included_messages=sum(len(g.messages) for g in groups),
        included_tokens=sum(g.token_count for g in groups),
        included_turns=len({g.turn for g in groups if g.turn is not None and g.turn >= 1}),
        included_non_system_groups=len(non_system),
        included_non_system_messages=sum(len(g.messages) for g in non_system),
        included_tool_call_groups=sum(1 for g in groups if g.kind is TOOL_CALL),
    )


def metrics_on(index: MessageIndex) -> Metrics:
    return Metrics(
        included_groups=index.included_groups,
        included_messages=index.included_messages,
        included_tokens=index.included_tokens,
        included_turns=index.included_turns,
        included_non_system_groups=index.included_non_system_groups,
        included_non_system_messages=index.included_non_system_messages,
        included_tool_call_groups=index.included_tool_call_groups,
    )


def assert_index_consistent(index: MessageIndex) -> None:
    """The running metrics, the live list and the projection all agree with the groups."""
    groups = index.groups
    live = [g for g in groups if not g.excluded]
    assert same(index.live, live), "index.live is not the included groups in order"
    assert same(index.projection(), [m for g in live for m in g.messages]), "projection != included messages"
    assert metrics_on(index) == metrics_of(live)
    assert index.included_messages == len(index.projection())
    assert index.total_groups == len(groups)
    assert index.total_messages == sum(len(g.messages) for g in groups)
    assert index.total_tokens == sum(g.token_count for g in groups)
    for group in groups:
        assert group.token_count == sum(index.tokenizer.count_messages(group.messages)), group
        assert (group.exclusion_reason is not None) == group.excluded, group
    assert index.metrics() == {
        "groups": index.total_groups,
        "messages": index.total_messages,
        "tokens": index.total_tokens,
        "turns": index.total_turns,
        "included_groups": index.included_groups,
        "included_messages": index.included_messages,
        "included_tokens": index.included_tokens,
        "included_turns": index.included_turns,
    }


# Helpers ----------------------------------------------------------------------------------------


def same(left: Sequence[object], right: Sequence[object]) -> bool:
    """Element-wise identity: the library promises the caller's objects back, not equal copies."""
    return len(left) == len(right) and all(a is b for a, b in zip(left, right))


def fingerprint(message: Message) -> tuple[Any, ...]:
    """Every field a caller could observe, in plain values (mapping proxies cannot be deep-copied)."""
    return (
        message.role,
        message.contents,
        message.author_name,
        message.message_id,
        dict(message.additional_properties),
        dict(message.extra),
        message.content_form,
    )


def comparable(message: Message, inputs: set[int]) -> object:
    """Input messages compare by identity; summaries the library wrote (new objects on every run)
    compare by what they say."""
    if id(message) in inputs:
        return id(message)
    return (message.role, message.text, dict(message.additional_properties))


def run(messages: Sequence[Message], spec: StrategySpec | None) -> tuple[CompactionResult, CompactionStrategy | None]:
    strategy = None if spec is None else spec.build()
    return asyncio.run(compact_with_report(messages, strategy=strategy)), strategy


def newest_non_system(groups: Iterable[MessageGroup], count: int, kinds: set[GroupKind] | None = None) -> list[int]:
    """Ids of the ``count`` newest non-system groups (of ``kinds``), as the strategies' floors count them."""
    kept: list[int] = []
    for group in reversed(list(groups)):
        if len(kept) >= count:
            break
        if group.kind is not SYSTEM and (kinds is None or group.kind in kinds):
            kept.append(id(group))
    return kept


def check_units(messages: Sequence[Message], projection: Sequence[Message], index: MessageIndex) -> None:
    """design.md#units, read from the ids alone: a call and every message that answers it after it (a
    result, an approval response) are sent together or not at all, wherever they sit.  Checked
    when every id is opened once (generated traffic; dirty input has its own check above).  A
    tool group collapsed into a summary counts as sent whole."""
    opened: dict[str, int] = {}
    for position, message in enumerate(messages):
        for call_id in message.opened_ids:
            if call_id in opened and opened[call_id] != position:
                return  # a reused id: pairing is ambiguous, validate() covers such input
            opened[call_id] = position
    answers = [call_id for message in messages for call_id in message.answered_ids]
    if len(answers) != len(set(answers)):
        return  # an id answered twice: only the first answer belongs to the call
    collapsed = {id(m) for g in index.groups if g.excluded and g.exclusion_reason == "collapsed" for m in g.messages}
    sent = {id(m) for m in projection} | collapsed
    for position, message in enumerate(messages):
        for call_id in message.answered_ids:
            start = opened.get(call_id)
            if start is None or start > position:
                continue
            call_sent, answer_sent = id(messages[start]) in sent, id(message) in sent
            assert call_sent == answer_sent, (
                f"{call_id!r}: {'call' if call_sent else 'answer'} sent without its {'answer' if call_sent else 'call'}"
            )


def flagged(messages: Sequence[Message]) -> set[int]:
    """Identities of the messages ``validate`` complains about."""
    return {id(messages[p.index]) for p in validate(messages)}


def written_by_library(message: Message, inputs: set[int]) -> bool:
    return id(message) not in inputs


# The properties ---------------------------------------------------------------------------------


def is_reasoning_only(message: Message) -> bool:
    return (
        message.role == "assistant"
        and bool(message.contents)
        and all(isinstance(c, ReasoningContent) for c in message.contents)
        and not message.is_summary
    )


def check_compaction(messages: list[Message], spec: StrategySpec) -> None:
    """Compact ``messages`` with a fresh strategy built from ``spec`` and check every property."""
    before_list = list(messages)
    before_dicts = to_openai(messages, metadata=True)
    before_fields = [fingerprint(m) for m in messages]
    input_valid = validate(messages) == []

    result, strategy = run(messages, spec)
    assert strategy is not None
    projection = result.messages
    index = result.index

    # Nothing the caller passed is modified: the list, its items, and every message's fields.
    assert same(messages, before_list)
    assert to_openai(messages, metadata=True) == before_dicts
    assert [fingerprint(m) for m in messages] == before_fields
    assert projection is not messages

    assert_index_consistent(index)
    fresh = MessageIndex(messages, tokenizer=index.tokenizer)
    assert result.before == fresh.metrics()
    assert result.after == index.metrics()

    inputs = {id(m) for m in messages}
    position = {id(m): i for i, m in enumerate(messages)}

    # API validity: a valid history stays valid; a broken one gains no new broken message.
    if input_valid:
        assert validate(projection) == [], validate(projection)
    else:
        assert flagged(projection) <= flagged(messages), validate(projection)

    check_units(messages, projection, index)

    # System messages: all of them, the same objects, in the same order, unless dropping is allowed.
    systems_in = [m for m in messages if m.role == "system"]
    systems_out = [m for m in projection if m.role == "system"]
    if not spec.drops_system:
        assert same(systems_out, systems_in)

    # Provenance: caller's messages in their order, plus summaries the library wrote.
    summary_groups = {id(g.messages[0]): g for g in index.groups if written_by_library(g.messages[0], inputs)}
    order = [position[id(m)] for m in projection if id(m) in inputs]
    assert order == sorted(set(order)), "projection reorders or repeats input messages"
    for message in projection:
        if written_by_library(message, inputs):
            assert message.role == "assistant", message
            assert message.is_summary, message
            source = message.additional_properties.get(SUMMARY_SOURCE_PROPERTY)
            assert source in ("summarization", "tool_results"), message
            group = summary_groups[id(message)]
            assert group.kind is SUMMARY, group
            assert group.replaces, group
            if source == "summarization":
                assert message.text.startswith("[Summary]"), message.text
                assert group.turn is None

    # Expanding every library summary into what it replaced gives back the caller's non-system
    # messages in order: a summary stands exactly where its source was.
    def expand(message: Message) -> list[Message]:
        if not written_by_library(message, inputs):
            return [message]
        return [inner for g in summary_groups[id(message)].replaces for m in g.messages for inner in expand(m)]

    expanded = [position[id(m)] for out in projection for m in expand(out) if m.role != "system"]
    assert expanded == sorted(set(expanded)), "a summary is not where the messages it replaced were"

    # Never empty, and the newest non-system message stays (or is collapsed into a tool-result line).
    non_system_in = [m for m in messages if m.role != "system"]
    non_system_out = [m for m in projection if m.role != "system"]
    assert bool(non_system_out) == bool(non_system_in)
    if non_system_in:
        last_out = non_system_out[-1]
        assert last_out is non_system_in[-1] or (
            written_by_library(last_out, inputs)
            and last_out.additional_properties.get(SUMMARY_SOURCE_PROPERTY) == "tool_results"
            and any(m is non_system_in[-1] for m in expand(last_out))
        ), "the newest non-system group was dropped"

    # Reasoning goes with the reply or call it directly precedes, whatever that message carries
    # (application properties, several parts): one is sent only with the other.
    sent_ids = {id(m) for m in projection}
    for before_message, after_message in itertools.pairwise(messages):
        if (
            is_reasoning_only(before_message)
            and after_message.role == "assistant"
            and not is_reasoning_only(after_message)
            and not after_message.is_summary
        ):
            assert (id(before_message) in sent_ids) == (id(after_message) in sent_ids), (
                "reasoning was parted from the message it precedes",
                before_message,
                after_message,
            )

    check_root_rule(messages, spec, strategy, result, fresh)


def check_root_rule(
    messages: list[Message],
    spec: StrategySpec,
    strategy: CompactionStrategy,
    result: CompactionResult,
    before: MessageIndex,
) -> None:
    """The documented stopping rule of the outermost strategy: target met, or floor reached."""
    fired = before.included_non_system_groups > 1 and strategy.trigger(before)
    if not fired:
        assert same(result.messages, messages), "a strategy whose trigger did not fire changed the projection"
        assert result.events == []
        return
    after_of = {id(g.messages[0]): g for g in result.index.groups}

    def after(group: MessageGroup) -> MessageGroup:
        return after_of[id(group.messages[0])]

    if isinstance(strategy, TruncationStrategy):
        check_truncation(strategy, before, after, result)
    elif isinstance(strategy, SlidingWindowStrategy):
        check_sliding_window(strategy, before, after)
    elif isinstance(strategy, SelectiveToolCallCompactionStrategy):
        check_selective(strategy, before, after)
    elif isinstance(strategy, ToolResultCompactionStrategy):
        check_tool_results(strategy, before, after, result)
    elif isinstance(strategy, SummarizationStrategy):
        check_summarization(spec, strategy, before, after, result)
    elif isinstance(strategy, TokenBudgetComposedStrategy):
        nested_budgets = sum(1 for s in spec.walk() if s.kind == "TokenBudgetComposedStrategy") > 1
        check_token_budget(strategy, result, check_fallback=not nested_budgets)


Lookup = Callable[[MessageGroup], MessageGroup]
"""Maps a group of the uncompacted index to the same input group in the compacted one."""


def stopping_rule(
    strategy: CompactionStrategy, before: MessageIndex, everything: Callable[[], MessageIndex] | None = None
) -> Callable[[MessageIndex], bool]:
    """What "target met" means for ``strategy`` on the history ``before``.

    The target itself, except for a prefix-stable strategy whose trigger and target are both
    thresholds on one measure, trigger ``T`` above target ``t`` (design.md#prefix-stability): its cut falls on a
    grid of whole steps of ``T - t`` counted from the oldest group, the fewest steps that bring
    the measure to ``T`` or below.  When taking everything that may go (``everything`` gives the
    history with all of it gone) cannot reach that point, the cut stays on the grid: the whole
    steps that can go, not all of it.
    """
    turns = isinstance(strategy, SlidingWindowStrategy)  # the only strategy that steps by whole turns
    trigger = threshold_of(None, strategy.trigger, turns=turns)
    target = threshold_of(strategy.target, strategy.trigger, turns=turns) if strategy.target is not None else None
    if not strategy.prefix_stable or trigger is None or target is None or trigger[0] != target[0]:
        return strategy.target_met
    metric, high = trigger
    step = high - target[1]
    current = getattr(before, metric)
    if step <= 0 or current <= high:
        return strategy.target_met
    steps = -(-(current - high) // step)
    limit = current - steps * step
    if everything is not None:
        reachable = current - getattr(everything(), metric)
        if current - limit > reachable:
            limit = current - reachable // step * step
    return lambda index: getattr(index, metric) <= limit


def check_oldest_first(
    strategy: CompactionStrategy,
    live: Sequence[MessageGroup],
    candidates: Sequence[MessageGroup],
    taken: Sequence[MessageGroup],
    replacements: dict[int, MessageGroup] | None = None,
    keep: set[int] | None = None,
    *,
    before: MessageIndex | None = None,
    block: int = 1,
) -> None:
    """``taken`` is the oldest prefix of ``candidates``, and it stops exactly where the target says:
    the target was not met before the last step, and it is met after the last one unless every
    candidate was used.  ``replacements`` maps a collapsed group to the summary that took its place.
    ``before`` (the uncompacted index) sets the stopping rule (:func:`stopping_rule`); a strategy
    that only its floor stops takes its candidates ``block`` groups at a time."""
    steps = unit_steps(candidates, keep)
    taken_ids = {id(g) for g in taken}
    j = 0
    while j < len(steps) and all(id(g) in taken_ids for g in steps[j]):
        j += 1
    done = [g for step in steps[:j] for g in step]
    assert taken_ids == {id(g) for g in done}, "groups were not taken oldest first, a unit at a time"

    def state(count: int) -> MessageIndex:
        dropped = [g for step in steps[:count] for g in step]
        gone = {id(g) for g in dropped}
        remaining = [g for g in live if id(g) not in gone]
        if replacements is not None:
            remaining += [replacements[id(g)] for g in dropped]
        return metrics_of(remaining).as_index()

    if keyword_only(strategy):
        # Only the floor stops it: the whole blocks of candidate groups go, oldest first.
        # Only the floor stops it: whole blocks of steps (a group, or a unit) go, oldest first.
        expected = len(steps) // block * block
        assert j == expected, f"{j} steps went where whole blocks of {block} steps make {expected}"
        return
    target_met = strategy.target_met if before is None else stopping_rule(strategy, before, lambda: state(len(steps)))
    if j:
        assert not target_met(state(j - 1)), "one step more than the target needed"
    if j < len(steps):
        assert target_met(state(j)), "stopped before the target was met with candidates left"


def unit_steps(candidates: Sequence[MessageGroup], keep: set[int] | None = None) -> list[list[MessageGroup]]:
    """The steps an oldest-first strategy takes through ``candidates``: each a whole unit (a call
    with results that sit apart is one step, design.md#units), oldest first; a unit with a member that
    must stay (in ``keep``, or by default any included group that is not a candidate) is kept
    whole, so it is no step at all."""
    ids = {id(g) for g in candidates}
    if keep is not None:
        ids = {id(m) for g in candidates for m in g.unit if id(m) not in keep}
    steps: list[list[MessageGroup]] = []
    seen: set[int] = set()
    for group in candidates:
        if id(group) in seen:
            continue
        members = [m for m in group.unit if not m.excluded]
        if any(id(m) not in ids for m in members):
            continue
        seen.update(id(m) for m in members)
        steps.append(members)
    return steps


def check_truncation(
    strategy: TruncationStrategy, before: MessageIndex, after: Lookup, result: CompactionResult
) -> None:
    live = before.live
    protected = set(newest_non_system(live, max(strategy.minimum_preserved, 1)))
    if strategy.preserve_first_user_group:
        first_user = next((g for g in live if g.kind is USER), None)
        if first_user is not None:
            protected.add(id(first_user))
    candidates = [g for g in live if id(g) not in protected and not (g.kind is SYSTEM and strategy.preserve_system)]
    taken = [g for g in live if after(g).excluded]
    check_oldest_first(strategy, live, candidates, taken, before=before)
    if strategy.max_n is not None and strategy.compact_to is not None:
        # Keyword style, stated directly: at or under compact_to (under max_n when the cut keeps the
        # prefix stable, design.md#prefix-stability), or only protected groups left.
        metric = result.index.included_tokens if strategy.tokenizer is not None else result.index.included_messages
        takeable = {id(g) for step in unit_steps(candidates) for g in step}
        bound = strategy.max_n if strategy.prefix_stable else strategy.compact_to
        # Or, prefix stable, even taking everything would not have met the target: the cut stays
        # on its grid (checked exactly by check_oldest_first), above it.
        on_tokens = strategy.tokenizer is not None
        sizes = [g.token_count if on_tokens else len(g.messages) for g in live if id(g) in takeable]
        everything = (before.included_tokens if on_tokens else before.included_messages) - sum(sizes)
        out_of_reach = strategy.prefix_stable and everything > strategy.compact_to
        assert metric <= bound or {id(g) for g in taken} == takeable or out_of_reach


def _kept_by_window(group: MessageGroup) -> bool:
    return group.kind is SYSTEM or group.turn == 0 or (group.kind is SUMMARY and group.turn is None)


def check_sliding_window(strategy: SlidingWindowStrategy, before: MessageIndex, after: Lookup) -> None:
    live = before.live
    eligible = [g for g in live if not _kept_by_window(g)]
    if strategy.keep_last_groups is not None:
        # The groups before the newest keep_last_groups go in whole blocks (design.md#prefix-stability).
        doomed = eligible[: -strategy.keep_last_groups]
        doomed = doomed[: len(doomed) // strategy.block() * strategy.block()]
        keep = {id(g) for g in eligible[len(doomed) :]}
        for group in live:
            should_go = not _kept_by_window(group) and id(group) not in keep
            # A unit with a kept member is kept whole: a kept result keeps its call (design.md#units).
            should_go = should_go and not any(id(m) in keep or _kept_by_window(m) for m in group.unit)
            assert after(group).excluded == should_go, group
        return
    turns: dict[int, list[MessageGroup]] = {}
    for group in eligible:
        if group.turn is not None:
            turns.setdefault(group.turn, []).append(group)
    ordered = sorted(turns)
    floor = strategy.minimum_preserved
    candidates = ordered[: max(len(ordered) - floor, 0)]  # fewer turns than the floor: none may go
    newest = [g for g in live if g.kind is not SYSTEM][-1]
    if candidates and candidates[-1] == newest.turn:
        candidates.pop()  # the turn of the latest exchange is kept whatever the floor
    # Turns a unit spans go together, and not at all when the unit reaches a kept turn (design.md#units).
    joined: set[int] = set()
    for group in live:
        if len(group.unit) > 1:
            spanned = [m.turn or 0 for m in group.unit if not m.excluded]
            joined.update(range(min(spanned) + 1, max(spanned) + 1))
    steps: list[list[int]] = []
    for turn in candidates:
        if turn not in joined:
            steps.append([turn])
        elif steps:
            steps[-1].append(turn)
        else:
            break
    if steps and steps[-1][-1] + 1 in joined:
        steps.pop()
    step_groups = [[g for t in step for g in turns[t]] for step in steps]
    excluded = {id(g) for g in live if after(g).excluded}
    done = 0
    while done < len(steps) and all(id(g) in excluded for g in step_groups[done]):
        done += 1
    assert excluded == {id(g) for groups in step_groups[:done] for g in groups}, (
        "turns were not excluded oldest first and whole, or a preserved turn was"
    )

    def state(count: int) -> MessageIndex:
        dropped = {id(g) for groups in step_groups[:count] for g in groups}
        return metrics_of(g for g in live if id(g) not in dropped).as_index()

    reachable = 0  # the steps the window may take: each leaves something besides system messages
    while reachable < len(steps) and len(step_groups[reachable]) < state(reachable).included_non_system_groups:
        reachable += 1
    target_met = stopping_rule(strategy, before, lambda: state(reachable))
    for step in range(done):
        now = state(step)
        assert not target_met(now)
        assert len(step_groups[step]) < now.included_non_system_groups
    if done < len(steps):
        now = state(done)
        assert target_met(now) or len(step_groups[done]) >= now.included_non_system_groups


def keyword_only(strategy: CompactionStrategy) -> bool:
    """Only the floor stops it: built with keep_last_tool_call_groups alone (trigger always, no
    target), or with a target that is never met."""
    if strategy.target is None:
        return isinstance(strategy.trigger, type(always()))
    return isinstance(strategy.target, type(never()))


def _tool_eligible(
    strategy: ToolResultCompactionStrategy | SelectiveToolCallCompactionStrategy, live: list[MessageGroup]
) -> list[MessageGroup]:
    if strategy.keep_last_tool_call_groups is not None:
        protected = newest_non_system(live, strategy.keep_last_tool_call_groups, {TOOL_CALL})
    else:
        protected = newest_non_system(live, strategy.minimum_preserved)
    return [g for g in live if g.kind is TOOL_CALL and id(g) not in protected]


def check_selective(strategy: SelectiveToolCallCompactionStrategy, before: MessageIndex, after: Lookup) -> None:
    live = before.live
    newest = newest_non_system(live, 1)
    candidates = [g for g in _tool_eligible(strategy, live) if id(g) not in newest]
    taken = [g for g in live if after(g).excluded]
    if strategy.keep_last_tool_call_groups is not None:
        floor = newest_non_system(live, strategy.keep_last_tool_call_groups, {TOOL_CALL})
    else:
        floor = newest_non_system(live, strategy.minimum_preserved)
    protected = set(floor) | set(newest)
    check_oldest_first(strategy, live, candidates, taken, keep=protected, before=before, block=strategy.block())
    if strategy.keep_last_tool_call_groups is not None and keyword_only(strategy):
        # keep_last_tool_call_groups=k alone: at most max(k, 1) tool groups survive, and fewer
        # than a block more while they wait for the next block (design.md#prefix-stability).  A unit whose results
        # sit apart from its call counts once (design.md#units).
        survivors = {id(g.unit[0]) for g in live if g.kind is TOOL_CALL and not after(g).excluded}
        assert len(survivors) <= max(strategy.keep_last_tool_call_groups, 1) + strategy.block() - 1


def check_tool_results(
    strategy: ToolResultCompactionStrategy, before: MessageIndex, after: Lookup, result: CompactionResult
) -> None:
    live = before.live
    # A call whose results sit apart from it is left whole, never collapsed (design.md#units).
    candidates = [g for g in _tool_eligible(strategy, live) if not g.orphan and g.is_complete and len(g.unit) == 1]
    taken = [g for g in live if after(g).excluded]
    groups = result.index.groups
    replacements: dict[int, MessageGroup] = {}
    for original in taken:
        mine = after(original)
        assert mine.exclusion_reason == "collapsed"
        position = groups.index(mine)
        summary = groups[position - 1]
        assert summary.kind is SUMMARY
        assert summary.replaces == (mine,)
        assert not summary.excluded
        assert summary.turn == mine.turn
        assert summary.origin == "tool_results"
        (message,) = summary.messages
        assert dict(message.additional_properties) == {
            SUMMARY_PROPERTY: True,
            SUMMARY_SOURCE_PROPERTY: "tool_results",
        }
        if strategy.formatter is not None:
            assert message.text == strategy.formatter(mine.messages)
        else:
            assert message.text.startswith("[Tool results: "), message.text
            assert message.text.endswith("]"), message.text
            assert len(message.text) <= strategy.max_summary_chars
        replacements[id(original)] = summary
    if strategy.prefix_stable and strategy.target is not None:
        # Where collapsing every candidate would leave the measure (what its grid may reach).
        replacements = {**every_collapse(strategy, before), **replacements}
    check_oldest_first(strategy, live, candidates, taken, replacements, before=before, block=strategy.block())
    if strategy.keep_last_tool_call_groups is not None and keyword_only(strategy):
        # keep_last_tool_call_groups=k alone: every complete tool group but the newest k is collapsed,
        # in whole blocks (design.md#prefix-stability).
        verbatim = [
            g
            for g in live
            if g.kind is TOOL_CALL and not g.orphan and g.is_complete and len(g.unit) == 1 and not after(g).excluded
        ]
        assert len(verbatim) <= strategy.keep_last_tool_call_groups + strategy.block() - 1


def every_collapse(strategy: ToolResultCompactionStrategy, before: MessageIndex) -> dict[int, MessageGroup]:
    """The summary each tool group of ``before`` gets when the same strategy, with the same floor,
    collapses every group it may (keyed by the id of the group in ``before``)."""
    everything = ToolResultCompactionStrategy(
        trigger=always(),
        target=never(),
        minimum_preserved=strategy.minimum_preserved,
        formatter=strategy.formatter,
        max_result_chars=strategy.max_result_chars,
        max_summary_chars=strategy.max_summary_chars,
        prefix_stable=False,
    )
    messages = [m for g in before.groups for m in g.messages]
    result = asyncio.run(compact_with_report(messages, strategy=everything, tokenizer=before.tokenizer))
    by_first = {id(g.replaces[0].messages[0]): g for g in result.index.groups if g.replaces}
    return {id(g): by_first[id(g.messages[0])] for g in before.groups if id(g.messages[0]) in by_first}


def summary_stopping_rule(strategy: SummarizationStrategy, before: MessageIndex) -> Callable[[MessageIndex], bool]:
    """Where summarisation may stop short of its floor.  Trigger style: as :func:`stopping_rule`.
    Keyword style: never, unless prefix-stable, whose choice falls on a grid of whole steps of
    ``threshold`` non-system messages counted from the oldest, the fewest that bring the count to
    ``target_count + threshold`` or below (design.md#prefix-stability)."""
    if strategy.target_count is None:
        return stopping_rule(strategy, before)
    if not strategy.prefix_stable:
        return lambda index: False
    step = strategy.threshold or 0
    high = strategy.target_count + step
    current = before.included_non_system_messages
    limit = strategy.target_count
    if step > 0 and current > high:
        limit = current - -(-(current - high) // step) * step
    return lambda index: index.included_non_system_messages <= limit


def check_summarization(
    spec: StrategySpec,
    strategy: SummarizationStrategy,
    before: MessageIndex,
    after: Lookup,
    result: CompactionResult,
) -> None:
    """The floor is kept, the oldest groups are taken first, the request as sent fits
    ``max_input_tokens``, and the choice stops only at the target, the floor or the budget.

    The strategy sizes its choice with a per-group estimate of the transcript (each group's lines
    counted on their own, rounded up), which can overstate the joined transcript by about a token
    per group, so "the next group would not have fitted" is checked with that much slack, and only
    for the character estimate, whose rounding is known exactly.
    """
    live = before.live
    if strategy.target_count is not None:
        kept: set[int] = set()
        retained = 0
        for group in reversed(live):
            if group.kind is SYSTEM:
                continue
            if retained >= strategy.target_count and kept:
                break
            kept.add(id(group))
            retained += len(group.messages)
    else:
        kept = set(newest_non_system(live, max(strategy.minimum_preserved, 1)))
    available = [g for g in live if g.kind is not SYSTEM and id(g) not in kept]
    budget = strategy.max_input_tokens
    tokenizer = before.tokenizer
    client = strategy.client
    assert isinstance(client, ScriptedChatClient)
    stop = summary_stopping_rule(strategy, before)

    def state(steps: int) -> MessageIndex:
        gone = {id(g) for g in available[:steps]}
        return metrics_of(g for g in live if id(g) not in gone).as_index()

    def too_big(groups: Sequence[MessageGroup]) -> bool:
        """Whether summarising ``groups`` would overflow the budget, give or take the estimate's slack."""
        if budget is None:
            return False
        if not isinstance(tokenizer, CharacterEstimatorTokenizer):
            return True  # exact vocabularies: no bound on the estimate's error, so accept the stop
        sent = sum(tokenizer.count_messages(strategy._request(groups)))
        return sent > budget - 2 * len(groups)

    def justified_stop(steps: int) -> bool:
        """Taking ``steps`` groups and no more is what the rules allow."""
        if steps == len(available):
            return True
        if len(available[steps].unit) > 1:
            return True  # a call whose results sit apart: summarising it would move them (design.md#units)
        if stop(state(steps)):
            return True
        return too_big(available[: steps + 1])

    if not client.requests:
        # Nothing to take, the target already met, or the oldest group alone too big: no change.
        assert justified_stop(0), "the summariser was not called although a group could be summarised"
        assert same(result.messages, before.source_messages)
        assert [e.action for e in result.events] in ([], ["failed"])
        return
    assert len(client.requests) == 1
    request = client.requests[0]
    assert [m.role for m in request] == ["system", "user"]
    assert request[0].text == strategy.prompt
    if budget is not None:
        assert sum(tokenizer.count_messages(request)) <= budget, "the request sent exceeds max_input_tokens"
    if spec.replies[0].fails:
        assert same(result.messages, before.source_messages), "a failed summarisation changed the projection"
        assert [e.action for e in result.events] == ["failed"]
        return
    chosen = [g for g in live if after(g).excluded]
    assert chosen
    # Groups too large to be summarised on their own are left as they are, and the ones after
    # them are summarised (design.md#units): the choice starts after them.
    skipped = [id(g) for g in available].index(id(chosen[0]))
    assert all(too_big([g]) for g in available[:skipped]), "a group that fitted was skipped"
    available = available[skipped:]
    assert all(after(g).exclusion_reason == "summarized" for g in chosen)
    assert [id(g) for g in chosen] == [id(g) for g in available[: len(chosen)]], "not the oldest groups"
    assert justified_stop(len(chosen)), "stopped early: the next group fitted and the target was not met"
    for steps in range(len(chosen)):
        assert not stop(state(steps)), "summarised past the target"
    groups = result.index.groups
    summary = groups[groups.index(after(chosen[0])) - 1]
    assert summary.kind is SUMMARY
    assert summary.turn is None
    assert not summary.excluded
    assert summary.replaces == tuple(after(g) for g in chosen)
    reply = spec.replies[0].build()
    text = (reply(request) if callable(reply) else str(reply)).strip()
    expected = text if text.startswith("[Summary]") else "[Summary] " + text
    assert summary.messages[0].text == expected
    assert [e.action for e in result.events] == ["summarized"]


def check_token_budget(
    strategy: TokenBudgetComposedStrategy, result: CompactionResult, *, check_fallback: bool
) -> None:
    """Within budget, or down to the newest group; and the fallback took the oldest groups, no more
    than it needed (checked when no nested budget strategy logs fallbacks of its own)."""
    index = result.index
    live = [g for g in index.live if g.kind is not SYSTEM]
    # The newest group's unit (its call, when its result sits apart: design.md#units) is always sent.
    newest_unit = {id(m) for m in live[-1].unit} if live else set()
    assert index.included_tokens <= strategy.token_budget or all(id(g) in newest_unit for g in live)
    fallback = [e for e in result.events if e.detail.endswith("token_budget_fallback")]
    if fallback and check_fallback:
        (event,) = fallback
        groups = index.groups
        # Each step takes a whole unit, chosen by its oldest member (design.md#units).
        leaders = [g for g in event.groups if g.unit[0] is g]
        last = max(groups.index(g) for g in leaders)
        older = [g for g in groups[:last] if g.kind is not SYSTEM and id(g) not in newest_unit]
        assert all(g.excluded for g in older), "the fallback skipped an older group"
        step = sum(m.token_count for m in groups[last].unit if m in event.groups)
        assert index.included_tokens + step > fallback_limit(strategy, index, event.groups), "fallback went too far"


def fallback_limit(strategy: TokenBudgetComposedStrategy, index: MessageIndex, gone: Sequence[MessageGroup]) -> int:
    """Where the fallback may stop: the budget, or for a prefix-stable one the grid of its steps of
    half the budget (a truncation with its trigger at the budget and its target at half of it),
    the whole steps that can go when the grid point is out of reach, unless that leaves the
    request above the budget (design.md#prefix-stability)."""
    budget = strategy.token_budget
    if not strategy.prefix_stable:
        return budget
    step = budget // 2
    taken = sum(g.token_count for g in gone)
    before = index.included_tokens + taken
    if step <= 0 or before <= budget:
        return budget
    limit = before - -(-(before - budget) // step) * step
    live = [g for g in index.live if g.kind is not SYSTEM]
    newest_unit = {id(m) for m in live[-1].unit} if live else set()
    reachable = taken + sum(g.token_count for g in live if id(g) not in newest_unit)
    if before - limit > reachable:
        on_grid = before - reachable // step * step
        limit = on_grid if on_grid <= budget else budget
    return limit


# Tests -------------------------------------------------------------------------------------------


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    family: SpecFactory | None = None,
    dirty: bool | None = False,
    traffic: bool | None = False,
) -> tuple[list[Message], StrategySpec]:
    """A conversation (valid, dirty, or either when ``dirty`` is None; with real-traffic layouts
    when ``traffic``, or either when None, for valid ones) and a strategy spec; the spec is a
    single strategy of ``family`` when given, else any nesting."""
    tokenizer: Tokenizer = draw(tokenizers())
    spec = draw(specs_for(family, tokenizer) if family is not None else strategy_specs(tokenizer))
    if dirty is None:
        dirty = draw(st.booleans())
    if traffic is None:
        traffic = draw(st.booleans())
    messages = draw(dirty_conversations() if dirty else conversations(traffic=bool(traffic)))
    return messages, spec


@DEFAULT
@given(case=cases())
def test_any_strategy_on_valid_conversations(case: tuple[list[Message], StrategySpec]) -> None:
    check_compaction(*case)


@DEFAULT
@given(case=cases(traffic=True))
def test_any_strategy_on_real_traffic(case: tuple[list[Message], StrategySpec]) -> None:
    """Results apart from their call (after notes and user messages), approvals, hosted calls
    and reasoning items: every property holds, and no unit is split (design.md#units)."""
    check_compaction(*case)


each_family = pytest.mark.parametrize(
    "family",
    [truncation_specs, sliding_window_specs, tool_result_specs, selective_specs, summarization_specs],
    ids=["truncation", "sliding_window", "tool_results", "selective", "summarization"],
)
"""Each strategy family alone at the root, so its own stopping rule is what is checked."""


@each_family
@DEFAULT
@given(data=st.data())
def test_each_strategy_on_real_traffic(family: SpecFactory, data: st.DataObject) -> None:
    """Alone at the root, so each strategy's stopping rule is checked on real-traffic layouts."""
    check_compaction(*data.draw(cases(family=family, traffic=True)))


@DEFAULT
@given(case=cases(dirty=True))
def test_any_strategy_on_dirty_conversations(case: tuple[list[Message], StrategySpec]) -> None:
    check_compaction(*case)


@each_family
@DEFAULT
@given(data=st.data())
def test_each_strategy_meets_its_target_or_floor(family: SpecFactory, data: st.DataObject) -> None:
    """Alone at the root, so the strategy's own stopping rule is checked, on valid and dirty input."""
    check_compaction(*data.draw(cases(family=family, dirty=None)))


@DEFAULT
@given(case=cases(family=gentlest_first_specs))
def test_gentlest_first_pipeline(case: tuple[list[Message], StrategySpec]) -> None:
    """Collapse, summarise, window, truncate: each stage compacts what the previous ones left,
    including the summaries they wrote."""
    check_compaction(*case)


_FAILURES = st.one_of(
    st.sampled_from(("", "  ", "\n")).map(lambda text: ScriptedReply("empty", text)),
    st.just(ScriptedReply("raise", "timeout")),
)


@DEFAULT
@given(data=st.data(), messages=conversations())
def test_failing_summarizer_returns_the_input(data: st.DataObject, messages: list[Message]) -> None:
    """A summariser whose client raises or replies with nothing fails closed: the projection is
    exactly the input (the same objects), whether or not it fired."""
    spec = data.draw(summarization_specs(data.draw(tokenizers()), replies=_FAILURES))
    result, strategy = run(messages, spec)
    assert same(result.messages, messages)
    assert isinstance(strategy, SummarizationStrategy)
    assert isinstance(strategy.client, ScriptedChatClient)
    assert len(strategy.client.requests) <= 1
    assert [e.action for e in result.events] in ([], ["failed"])
    if strategy.client.requests:
        assert [e.action for e in result.events] == ["failed"]
    assert_index_consistent(result.index)


@st.composite
def trees_with_a_failing_summarizer(draw: st.DrawFn) -> StrategySpec:
    """A pipeline or token-budget composition with an always-failing summariser among its children
    (possibly also deeper down, through the other children)."""
    tokenizer = draw(tokenizers())
    failing = draw(summarization_specs(tokenizer, replies=_FAILURES))
    others = draw(st.lists(strategy_specs(tokenizer, depth=1), max_size=2))
    children = (*others[: draw(st.integers(0, len(others)))], failing)
    children = (*children, *others[len(children) - 1 :])
    if draw(st.booleans()):
        return StrategySpec("PipelineStrategy", children=children)
    return StrategySpec("TokenBudgetComposedStrategy", {"token_budget": draw(st.integers(1, 300))}, children)


@DEFAULT
@given(spec=trees_with_a_failing_summarizer(), messages=conversations())
def test_failing_summarizer_is_a_no_op_in_any_composition(spec: StrategySpec, messages: list[Message]) -> None:
    """Restoring after a failure is exact: the tree compacts as if the failing summariser were absent."""
    inputs = {id(m) for m in messages}
    with_failure, _ = run(messages, spec)
    without, _ = run(messages, spec.without_failing_summarizers())
    assert [comparable(m, inputs) for m in with_failure.messages] == [comparable(m, inputs) for m in without.messages]


@DEFAULT
@given(messages=conversations(), reply=_FAILURES, target_count=st.integers(1, 4))
def test_on_error_raise_raises_and_leaves_input_alone(
    messages: list[Message], reply: ScriptedReply, target_count: int
) -> None:
    """on_error="raise": the failure surfaces as SummarizationError, the caller's list is untouched."""
    before = list(messages)
    snapshot = to_openai(messages, metadata=True)
    client = ScriptedChatClient([reply.build()])
    strategy = SummarizationStrategy(client, target_count=target_count, threshold=0, on_error="raise")
    index = MessageIndex(messages)
    fires = index.included_non_system_groups > 1 and strategy.trigger(index)
    try:
        projection = apply_compaction_sync(messages, strategy=strategy)
    except SummarizationError:
        assert fires
        assert len(client.requests) == 1
    else:
        assert not client.requests
        assert same(projection, messages)
    assert same(messages, before)
    assert to_openai(messages, metadata=True) == snapshot


@DEFAULT
@given(data=st.data(), messages=conversations())
def test_entry_points_agree(data: st.DataObject, messages: list[Message]) -> None:
    """apply_compaction, apply_compaction_sync and compact_with_report give the same projection."""
    spec = data.draw(strategy_specs(data.draw(tokenizers()), depth=1))
    inputs = {id(m) for m in messages}
    reference = [comparable(m, inputs) for m in run(messages, spec)[0].messages]
    via_async = asyncio.run(apply_compaction(messages, strategy=spec.build()))
    via_sync = apply_compaction_sync(messages, strategy=spec.build())
    assert [comparable(m, inputs) for m in via_async] == reference
    assert [comparable(m, inputs) for m in via_sync] == reference


# The stress run: 100,000 cases at the full size, a slice of 1,000 at the small one
# (tests/sizes.py), cut in parts of independent random cases that the run's workers share out;
# the parts add up to the whole.
STRESS_CASES = sized(full=100_000, small=1_000)
STRESS_PARTS = tuple(f"part_{number}" for number in range(1, sized(full=10, small=2) + 1))


@pytest.mark.stress
@pytest.mark.parametrize("part", STRESS_PARTS)
@settings(
    max_examples=STRESS_CASES // len(STRESS_PARTS),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=cases(dirty=None, traffic=None))
def test_stress_every_property(
    part: str, case: tuple[list[Message], StrategySpec], stress_shapes: Counter[str]
) -> None:
    """100,000 cases in all at the full size over every strategy, nesting, tokenizer and
    conversation shape; how many had each real-traffic shape is printed at the end."""
    messages, _ = case
    stress_shapes["conversations"] += 1
    stress_shapes.update(shapes_of(messages))
    check_compaction(*case)


@pytest.fixture
def stress_shapes(request: pytest.FixtureRequest) -> Iterator[Counter[str]]:
    """Counts of the shapes one part of the stress run generated, reported with its test: the run
    adds up every part's, from whichever worker ran it, and prints the whole at its end
    (tests/conftest.py)."""
    counts: Counter[str] = Counter()
    yield counts
    counted = {"conversations": counts["conversations"], **{shape: counts[shape] for shape in SHAPES}}
    request.node.user_properties.append((STRESS_SHAPES, counted))
