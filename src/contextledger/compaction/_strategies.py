"""Compaction strategies: what to exclude, collapse or summarise, and when to stop.

Each strategy works on a :class:`MessageIndex`.  It does nothing when one or
fewer non-system groups are included, then asks its *trigger* whether to
start; it then takes one step at a time (a group, or a whole turn for the
turn-based sliding window) and re-checks its *target* after each step.  The
default target is "the trigger no longer fires".  A preserved floor of the
newest groups is never touched, and the newest included non-system group is
never excluded, so the projection is never empty.

Both API styles of the seed document are accepted: the trigger/target style
(``TruncationStrategy(trigger=tokens_exceed(32_000), minimum_preserved=10)``)
and the keyword style (``TruncationStrategy(max_n=32_000, compact_to=16_000,
tokenizer=...)``).  Mixing the two in one call is rejected, because the
result would be ambiguous.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from types import MappingProxyType
from typing import Any, ClassVar, Literal, cast

from contextledger.clients._protocol import ChatClient, Usage
from contextledger.compaction._index import (
    CompactionEvent,
    GroupKind,
    MessageGroup,
    MessageIndex,
    _Groups,
    gc_paused,
)
from contextledger.compaction.triggers import (
    Threshold,
    Trigger,
    always,
    messages_exceed,
    never,
    tokens_exceed,
)
from contextledger.exceptions import ConfigurationError, SummarizationError
from contextledger.messages import (
    SUMMARY_PROPERTY,
    SUMMARY_SOURCE_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    TextContent,
    assistant_text_message,
)
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "CompactionStrategy",
    "PipelineStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "format_tool_results",
]

logger = logging.getLogger("contextledger.compaction")

SYSTEM = GroupKind.SYSTEM
TOOL_CALL = GroupKind.TOOL_CALL
SUMMARY = GroupKind.SUMMARY
_TOOL_KINDS = frozenset({TOOL_CALL})


def _count(value: object, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigurationError(f"{what} must be {minimum} or more, got {value}")
    return value


def _trigger(value: object, what: str) -> Trigger:
    if not callable(value):
        raise ConfigurationError(f"{what} must be a trigger (a callable on a MessageIndex), got {value!r}")
    return cast(Trigger, value)


@dataclass(frozen=True, slots=True)
class _Not:
    trigger: Trigger

    def __call__(self, index: MessageIndex) -> bool:
        return not self.trigger(index)

    def __repr__(self) -> str:
        return f"not {self.trigger!r}"


# The thresholds a strategy can turn into arithmetic: excluding a group moves these by its own size.
_GROUP_METRICS = frozenset({"included_tokens", "included_messages", "included_groups"})


def _threshold_of(target: Trigger | None, trigger: Trigger, *, turns: bool = False) -> tuple[str, int] | None:
    """If "target met" is just ``metric <= limit``, return (index attribute, limit).

    A threshold on turns is recognised only with ``turns``, for callers that exclude whole turns
    (excluding one group does not say how the turn count moves)."""
    if target is None:
        check: object = trigger
    elif isinstance(target, _Not):
        check = target.trigger
    elif isinstance(target, Threshold) and target.below and target.metric == "included_tokens":
        return ("included_tokens", target.limit - 1)
    else:
        return None
    if not isinstance(check, Threshold) or check.below:
        return None
    if check.metric in _GROUP_METRICS or (turns and check.metric == "included_turns"):
        return (check.metric, check.limit)
    return None


def _stops_never(target: Trigger | None, trigger: Trigger) -> bool:
    """True when the target can never be met, so only the floor stops the strategy."""
    if target is None:
        return isinstance(trigger, type(always()))
    return isinstance(target, type(never()))


# Strategies read and mark the index by group id, over its columns (see MessageIndex): a long
# history has thousands of groups, and a group object per step would cost more than the step.


def _live_ids(index: MessageIndex) -> list[int]:
    """The included groups' ids, in conversation order (a snapshot)."""
    return list(index._live.values())


def _newest(index: MessageIndex, count: int, kinds: frozenset[GroupKind] | None = None) -> set[int]:
    """The ``count`` newest included non-system groups (of ``kinds``, if given)."""
    kept: set[int] = set()
    if count <= 0:
        return kept
    if kinds == _TOOL_KINDS:
        # The index counts its included tool groups: stop once all of them are found, not at
        # the first message of a long history that has fewer than ``count`` of them.
        return set(_live_tool_groups(index)[-count:])
    kind_of = index._table.kind
    for group in reversed(index._live.values()):
        kind = kind_of[group]
        if kind is SYSTEM:
            continue
        if kinds is None or kind in kinds:
            kept.add(group)
            if len(kept) >= count:
                break
    return kept


def _live_tool_groups(index: MessageIndex) -> list[int]:
    """The included tool-call groups' ids, in conversation order, read from the newest back only
    as far as the oldest of them (the index counts them), so a turn pays for the groups that
    can still change, not for the whole history."""
    wanted = index.included_tool_call_groups
    found: list[int] = []
    if wanted:
        kind_of = index._table.kind
        for group in reversed(index._live.values()):
            if kind_of[group] is TOOL_CALL:
                found.append(group)
                if len(found) == wanted:
                    break
    found.reverse()
    return found


def _newest_non_system(index: MessageIndex) -> int | None:
    kind_of = index._table.kind
    for group in reversed(index._live.values()):
        if kind_of[group] is not SYSTEM:
            return group
    return None


def _oldest_until(index: MessageIndex, candidates: list[int], metric: str, limit: int) -> list[int]:
    """The included ``candidates``, oldest first, whose exclusion one by one brings ``metric``
    (an included-count attribute of the index) down to ``limit``: found with running sums over
    the candidates' sizes, without touching the index."""
    remaining = getattr(index, metric)
    if remaining <= limit:
        return []
    if metric == "included_groups":
        return candidates[: remaining - limit]
    column = index._table.tokens if metric == "included_tokens" else index._table.size
    reached = list(accumulate(map(column.__getitem__, candidates)))
    return candidates[: bisect_left(reached, remaining - limit) + 1]


class CompactionStrategy(ABC):
    """Base of every strategy: trigger, target, and the rules every strategy keeps.

    Subclasses implement :meth:`_run`, which is only called when the trigger
    fired and at least two non-system groups are included.
    """

    name: ClassVar[str] = "strategy"

    def __init__(self, trigger: Trigger, target: Trigger | None = None) -> None:
        self.trigger = _trigger(trigger, f"{type(self).__name__} trigger")
        self.target = None if target is None else _trigger(target, f"{type(self).__name__} target")

    @property
    def tokenizers(self) -> Iterator[Tokenizer]:
        """Tokenizers this strategy measures with; the index must count with the same one."""
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None:
            yield tokenizer

    def target_met(self, index: MessageIndex) -> bool:
        if self.target is not None:
            return self.target(index)
        return not self.trigger(index)

    calls_model: ClassVar[bool] = False
    """Whether the strategy awaits a model; the others run without yielding to the event loop."""

    async def compact(self, index: MessageIndex) -> bool:
        """Apply the strategy to ``index``; True if anything changed."""
        if index.included_non_system_groups <= 1:
            return False
        if not self.trigger(index):
            return False
        if self.calls_model:
            return await self._run(index)
        with gc_paused():
            return await self._run(index)

    @abstractmethod
    async def _run(self, index: MessageIndex) -> bool: ...

    def _log(self, index: MessageIndex, action: str, groups: list[int], detail: str) -> bool:
        """Record one event for a batch of groups; True if there were any."""
        if not groups:
            return False
        # Thousands of groups per call on a long history: every pass here runs in C.
        table = index._table
        every_turn = list(map(table.turn.__getitem__, groups))
        turns = cast(list[int], every_turn if None not in every_turn else [t for t in every_turn if t is not None])
        first, last = (min(turns), max(turns)) if turns else (None, None)
        span = f", turns {first}-{last}" if turns else ""
        kinds = set(map(table.kind.__getitem__, groups))
        index.events.append(
            CompactionEvent(
                self.name,
                action,
                kinds.pop().value if len(kinds) == 1 else None,
                first if first == last else None,
                sum(map(table.size.__getitem__, groups)),
                sum(map(table.tokens.__getitem__, groups)),
                f"{len(groups)} group{'s' if len(groups) != 1 else ''}{span}: {detail}",
                groups=_Groups(table, groups),
            )
        )
        return True

    def _exclude_oldest(
        self, index: MessageIndex, candidates: list[int], reason: str, keep: set[int] | None = None
    ) -> bool:
        """Exclude ``candidates`` oldest first, one at a time, until the target is met.

        When the target is a plain threshold on tokens, messages or groups (the
        usual case) the stopping point is found with local arithmetic and the
        groups are excluded in one batch; any other target is re-evaluated on
        the index after every step.
        """
        # A unit with a member that must stay (by default: any included group that is not a
        # candidate, such as a protected newest result) is kept whole; the others go whole.
        candidates = index.whole_units(candidates, keep)
        threshold = _threshold_of(self.target, self.trigger)
        doomed: list[int] = []
        if _stops_never(self.target, self.trigger):
            doomed = index._exclude(candidates, reason, fresh=True)
        elif threshold is not None and index._table.unit.keys().isdisjoint(candidates):
            metric, limit = threshold
            doomed = index._exclude(_oldest_until(index, candidates, metric, limit), reason, fresh=True)
        else:
            for group in candidates:
                if self.target_met(index):
                    break
                doomed.extend(index._exclude([group], reason))
        return self._log(index, "excluded", doomed, reason)

    def __repr__(self) -> str:
        target = f", target={self.target!r}" if self.target is not None else ""
        return f"{type(self).__name__}(trigger={self.trigger!r}{target})"


# Truncation ----------------------------------------------------------------------------------


class TruncationStrategy(CompactionStrategy):
    """Exclude the oldest non-system groups until the target is met.

    Trigger style: ``trigger`` (required), ``target``, ``minimum_preserved``
    newest non-system groups kept (default 32).  Keyword style: ``max_n`` and
    ``compact_to`` on tokens when a ``tokenizer`` is given, on included
    messages otherwise; the newest group is the only floor (as in the seed).
    """

    name = "truncation"

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        max_n: int | None = None,
        compact_to: int | None = None,
        tokenizer: Tokenizer | None = None,
        preserve_system: bool = True,
        preserve_first_user_group: bool = False,
    ) -> None:
        if max_n is not None or compact_to is not None:
            if trigger is not None or target is not None:
                raise ConfigurationError(
                    "TruncationStrategy takes either trigger=/target= or max_n=/compact_to=, not both"
                )
            if max_n is None:
                raise ConfigurationError("TruncationStrategy: compact_to needs max_n (the trigger threshold)")
            max_n = _count(max_n, "TruncationStrategy max_n", minimum=1)
            compact_to = max_n if compact_to is None else _count(compact_to, "TruncationStrategy compact_to", minimum=1)
            if compact_to > max_n:
                raise ConfigurationError(
                    f"TruncationStrategy compact_to ({compact_to}) must not exceed max_n ({max_n})"
                )
            if tokenizer is not None:
                trigger, target = tokens_exceed(max_n), _Not(tokens_exceed(compact_to))
            else:
                trigger, target = messages_exceed(max_n), _Not(messages_exceed(compact_to))
            default_floor = 1
        else:
            if trigger is None:
                raise ConfigurationError(
                    "TruncationStrategy needs a trigger (e.g. trigger=tokens_exceed(32_000)) "
                    "or max_n= (e.g. max_n=32_000, compact_to=16_000)"
                )
            default_floor = 32
        super().__init__(trigger, target)
        self.max_n = max_n
        self.compact_to = compact_to
        self.tokenizer = tokenizer
        self.minimum_preserved = (
            default_floor
            if minimum_preserved is None
            else _count(minimum_preserved, "TruncationStrategy minimum_preserved")
        )
        self.preserve_system = bool(preserve_system)
        self.preserve_first_user_group = bool(preserve_first_user_group)

    async def _run(self, index: MessageIndex) -> bool:
        protected = _newest(index, max(self.minimum_preserved, 1))
        live = _live_ids(index)
        kind_of = index._table.kind
        if self.preserve_first_user_group:
            first_user = next((g for g in live if kind_of[g] is GroupKind.USER), None)
            if first_user is not None:
                protected.add(first_user)
        if self.preserve_system:
            candidates = [g for g in live if kind_of[g] is not SYSTEM and g not in protected]
        else:
            candidates = [g for g in live if g not in protected]
        return self._exclude_oldest(index, candidates, "truncation")


# Sliding window --------------------------------------------------------------------------------


def _turn_steps(index: MessageIndex, turns: dict[int, list[int]], candidates: list[int]) -> list[tuple[int, list[int]]]:
    """The steps a turn window takes through the ``candidates`` turns (the oldest, in order): one
    turn each, except that the turns a unit spans (a call in one turn, its approval answer or
    result in a later one: SPEC §11) form one step.  A step joined to a turn that may not go
    (turn 0, a preserved turn) is no step, and the window stops there: the unit is kept whole.
    Each step is (how many turns, their groups)."""
    table = index._table
    joined: set[int] = set()  # turns that go with the turn before them
    seen: set[int] = set()
    for groups in turns.values():
        for group in groups:
            members = table.unit.get(group)
            if members is None or id(members) in seen:
                continue
            seen.add(id(members))
            spanned = [table.turn[m] or 0 for m in members if table.reason[m] is None]
            if not spanned:
                continue
            joined.update(range(min(spanned) + 1, max(spanned) + 1))
    if not joined:
        return [(1, turns[turn]) for turn in candidates]
    steps: list[tuple[list[int], list[int]]] = []
    for turn in candidates:
        if turn not in joined:
            steps.append(([turn], list(turns[turn])))
        elif steps:
            steps[-1][0].append(turn)
            steps[-1][1].extend(turns[turn])
        else:
            break  # joined to turn 0
    if steps and steps[-1][0][-1] + 1 in joined:
        steps.pop()  # joined to a turn the window keeps
    return [(len(step_turns), groups) for step_turns, groups in steps]


class SlidingWindowStrategy(CompactionStrategy):
    """Keep only the most recent part of the conversation.

    Trigger style: excludes whole user turns, oldest first, until the target is
    met, keeping ``minimum_preserved`` newest turns (default 1).  Keyword style:
    ``keep_last_groups`` keeps that many newest groups and excludes the rest.
    Either way system groups, turn 0 (what came before the first user message)
    and summaries written by summarisation are always kept.
    """

    name = "sliding_window"

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        keep_last_groups: int | None = None,
        minimum_preserved_turns: int | None = None,
        preserve_system: bool = True,
    ) -> None:
        if minimum_preserved is not None and minimum_preserved_turns is not None:
            raise ConfigurationError(
                "SlidingWindowStrategy: minimum_preserved and minimum_preserved_turns are the same setting; give one"
            )
        if minimum_preserved_turns is not None:
            minimum_preserved = minimum_preserved_turns
        if keep_last_groups is not None:
            if trigger is not None or target is not None or minimum_preserved is not None:
                raise ConfigurationError(
                    "SlidingWindowStrategy takes either keep_last_groups= or trigger=/minimum_preserved=, not both"
                )
            self.keep_last_groups: int | None = _count(
                keep_last_groups, "SlidingWindowStrategy keep_last_groups", minimum=1
            )
            trigger = always()
            self.minimum_preserved = self.keep_last_groups
        else:
            if trigger is None:
                raise ConfigurationError(
                    "SlidingWindowStrategy needs a trigger (e.g. trigger=turns_exceed(4)) or keep_last_groups="
                )
            self.keep_last_groups = None
            self.minimum_preserved = (
                1 if minimum_preserved is None else _count(minimum_preserved, "SlidingWindowStrategy minimum_preserved")
            )
        super().__init__(trigger, target)
        if not preserve_system:
            raise ConfigurationError(
                "SlidingWindowStrategy always keeps system messages; use TruncationStrategy(preserve_system=False) "
                "to drop them"
            )
        self.preserve_system = True

    async def _run(self, index: MessageIndex) -> bool:
        if self.keep_last_groups is not None:
            return self._window_groups(index, self.keep_last_groups)
        return self._window_turns(index)

    def _window_groups(self, index: MessageIndex, keep: int) -> bool:
        # System groups, turn 0 and conversation summaries survive any window.
        kind_of, turn_of = index._table.kind, index._table.turn
        eligible = [
            g
            for g in index._live.values()
            if not (kind_of[g] is SYSTEM or turn_of[g] == 0 or (kind_of[g] is SUMMARY and turn_of[g] is None))
        ]
        doomed = eligible[:-keep] if keep else eligible
        newest = _newest_non_system(index)
        if doomed and doomed[-1] == newest:
            doomed.pop()
        excluded = index._exclude(index.whole_units(doomed), "sliding_window", fresh=True)
        return self._log(index, "excluded", excluded, "sliding_window")

    def _window_turns(self, index: MessageIndex) -> bool:
        # The groups of each user turn; turn 0 and groups of no turn (system messages,
        # conversation summaries) survive any window.
        turns: dict[int, list[int]] = {}
        current: int | None = None
        bucket: list[int] = []
        kind_of, turn_of = index._table.kind, index._table.turn
        for group in index._live.values():
            turn = turn_of[group]
            if not turn or kind_of[group] is SYSTEM:
                continue
            if turn != current:
                current = turn
                bucket = turns.setdefault(turn, [])
            bucket.append(group)
        ordered = sorted(turns)
        floor = self.minimum_preserved
        candidates = ordered[: len(ordered) - floor] if floor else ordered
        newest = _newest_non_system(index)
        if newest is not None and candidates and candidates[-1] == turn_of[newest]:
            candidates.pop()  # the latest exchange is always sent, whatever the floor
        steps = _turn_steps(index, turns, candidates)
        reason = "sliding_window"
        left = index.included_non_system_groups
        threshold = _threshold_of(self.target, self.trigger, turns=True)
        if threshold is None:
            # Any other target: exclude a step at a time and ask the index after each.
            excluded: list[int] = []
            for _, groups in steps:
                if self.target_met(index):
                    break
                if len(groups) >= index.included_non_system_groups:
                    break  # excluding this turn would leave nothing but system messages
                excluded.extend(index._exclude(groups, reason, fresh=True))
            return self._log(index, "excluded", excluded, "sliding_window (whole turns)")
        # A threshold: the turns to drop are found with local arithmetic, then excluded in one batch.
        # A step's groups are all of its turns' included groups (no system group has a turn), so
        # dropping it takes exactly its turns off the count.
        metric, limit = threshold
        remaining = getattr(index, metric)
        doomed: list[int] = []
        tokens, sizes = index._table.tokens, index._table.size
        for step_turns, groups in steps:
            if remaining <= limit:
                break
            if len(groups) >= left:
                break  # excluding this turn would leave nothing but system messages
            left -= len(groups)
            doomed.extend(groups)
            if metric == "included_tokens":
                remaining -= sum(map(tokens.__getitem__, groups))
            elif metric == "included_messages":
                remaining -= sum(map(sizes.__getitem__, groups))
            elif metric == "included_groups":
                remaining -= len(groups)
            else:
                remaining -= step_turns
        return self._log(index, "excluded", index._exclude(doomed, reason, fresh=True), "sliding_window (whole turns)")

    def __repr__(self) -> str:
        if self.keep_last_groups is not None:
            return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups})"
        return f"SlidingWindowStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# Tool results ----------------------------------------------------------------------------------


def _preview(text: str, limit: int) -> str:
    # Only the head can survive the cut, so only the head is normalised (results can be megabytes).
    head = text[: limit * 2]
    if "  " in head or "\n" in head or "\t" in head or "\r" in head:
        head = " ".join(head.split())
    else:
        head = head.strip()
    if len(head) <= limit and len(text) <= limit * 2:
        return head
    return head[: limit - 1].rstrip() + "…"


def format_tool_results(messages: Sequence[Message], *, max_result_chars: int = 80, max_chars: int = 400) -> str:
    """``[Tool results: get_weather: sunny, 18°C; search_docs: 3 documents]``, with each result
    cut to ``max_result_chars`` and the whole line to ``max_chars``: a trace of what the tools
    said, not a copy of it."""
    return _tool_result_texts((messages,), max_result_chars, max_chars)[0]


def _tool_result_texts(groups: Iterable[Sequence[Message]], max_result_chars: int, max_chars: int) -> list[str]:
    """:func:`format_tool_results` for many groups' messages in one loop (a collapse writes
    thousands per call), the usual shape decided inline."""
    out: list[str] = []
    append = out.append
    call_type, result_type = FunctionCallContent, FunctionResultContent
    for messages in groups:
        if len(messages) == 2:  # the usual shape: one call, one result
            call, result = messages[0].contents, messages[1].contents
            if (
                len(call) == 1
                and len(result) == 1
                and type(call[0]) is call_type
                and type(result[0]) is result_type
                and call[0].call_id == result[0].call_id
            ):
                preview = _preview(result[0].result, max_result_chars) or "(empty)"
                text = f"[Tool results: {call[0].name}: {preview}]"
                if len(text) <= max_chars:
                    append(text)
                    continue
        append(_any_tool_results(messages, max_result_chars, max_chars))
    return out


def _any_tool_results(messages: Sequence[Message], max_result_chars: int, max_chars: int) -> str:
    """The general case of :func:`format_tool_results`: parallel calls, missing results, a cut line."""
    names: dict[str, str] = {}
    for message in messages:
        for c in message.contents:
            if isinstance(c, FunctionCallContent):
                names[c.call_id] = c.name
            elif isinstance(c, HostedCallContent):
                names[c.call_id] = c.name or c.tool  # an MCP tool's name, else the hosted tool
    items: list[str] = []
    answered: set[str] = set()
    for message in messages:
        for c in message.contents:
            if isinstance(c, (FunctionResultContent, HostedResultContent)):
                answered.add(c.call_id)
                name = names.get(c.call_id, "tool")
                output = c.result if isinstance(c, FunctionResultContent) else c.output
                items.append(f"{name}: {_preview(output, max_result_chars) or '(empty)'}")
    for call_id, name in names.items():
        if call_id not in answered:
            items.append(f"{name}: (no result)")
    body = "; ".join(items) if items else "no results"
    text = f"[Tool results: {body}]"
    if len(text) > max_chars:
        text = text[: max(max_chars - 2, 0)].rstrip() + "…]"
    return text


_TOOLS = "tool_results"
_TOOL_SUMMARY_PROPERTIES = MappingProxyType({SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: _TOOLS})

ToolResultFormatter = Callable[[Sequence[Message]], str]


def _tool_floor(
    trigger: Trigger | None,
    target: Trigger | None,
    minimum_preserved: int | None,
    keep_last_tool_call_groups: int | None,
    owner: str,
    default_preserved: int,
) -> tuple[Trigger, Trigger | None, int, bool]:
    """Resolve the two styles of the tool strategies to (trigger, target, floor, floor_counts_tool_groups)."""
    if keep_last_tool_call_groups is not None:
        if minimum_preserved is not None:
            raise ConfigurationError(
                f"{owner}: keep_last_tool_call_groups= and minimum_preserved= are two floors; give one"
            )
        floor = _count(keep_last_tool_call_groups, f"{owner} keep_last_tool_call_groups")
        if trigger is None:
            if target is not None:
                raise ConfigurationError(f"{owner}: target= needs a trigger=")
            return always(), None, floor, True
        return trigger, target, floor, True
    if trigger is None:
        if target is not None or minimum_preserved is not None:
            raise ConfigurationError(f"{owner}: target= and minimum_preserved= need a trigger=")
        return always(), None, 1, True
    preserved = (
        default_preserved if minimum_preserved is None else _count(minimum_preserved, f"{owner} minimum_preserved")
    )
    return trigger, target, preserved, False


class _ToolGroupStrategy(CompactionStrategy):
    """Shared floor logic of the two strategies that act only on tool-call groups."""

    keep_last_tool_call_groups: int | None
    minimum_preserved: int

    def _protected(self, index: MessageIndex) -> set[int]:
        """The newest groups the floor keeps out of reach."""
        if self.keep_last_tool_call_groups is not None:
            return _newest(index, self.keep_last_tool_call_groups, _TOOL_KINDS)
        return _newest(index, self.minimum_preserved)

    def __repr__(self) -> str:
        if self.keep_last_tool_call_groups is not None:
            return f"{type(self).__name__}(keep_last_tool_call_groups={self.keep_last_tool_call_groups})"
        return f"{type(self).__name__}(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


class ToolResultCompactionStrategy(_ToolGroupStrategy):
    """Replace old tool-call groups with one short summary message each.

    The originals are excluded, not deleted, and a ``summary`` group in the
    same turn takes their place, e.g. ``[Tool results: get_weather: sunny,
    18°C]``.  Orphan results and calls still waiting for results are never
    collapsed.  Keyword style: ``keep_last_tool_call_groups`` (default 1) newest
    tool groups stay verbatim.  Trigger style: ``minimum_preserved`` newest
    non-system groups (default 2) are untouched.
    """

    name = "tool_result_collapse"

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        keep_last_tool_call_groups: int | None = None,
        formatter: ToolResultFormatter | None = None,
        max_result_chars: int = 80,
        max_summary_chars: int = 400,
    ) -> None:
        trigger, target, floor, per_tool = _tool_floor(
            trigger, target, minimum_preserved, keep_last_tool_call_groups, "ToolResultCompactionStrategy", 2
        )
        super().__init__(trigger, target)
        self.keep_last_tool_call_groups = floor if per_tool else None
        self.minimum_preserved = floor
        self.max_result_chars = _count(max_result_chars, "max_result_chars", minimum=8)
        self.max_summary_chars = _count(max_summary_chars, "max_summary_chars", minimum=32)
        if formatter is not None and not callable(formatter):
            raise ConfigurationError(f"formatter must be a callable from messages to text, got {formatter!r}")
        self.formatter = formatter

    def _summary_texts(self, index: MessageIndex, groups: list[int]) -> list[str]:
        table = index._table
        messages: Iterable[Sequence[Message]]
        sizes = list(map(table.size.__getitem__, groups))
        if sizes.count(2) == len(sizes):  # one call, one result each (the usual shape): pairs made in C
            starts = list(map(table.first.__getitem__, groups))
            pool = table.pool
            messages = zip(map(pool.__getitem__, starts), map(pool.__getitem__, map(add, starts, repeat(1))))
        else:
            messages = map(table.messages, groups)
        if self.formatter is None:
            return _tool_result_texts(messages, self.max_result_chars, self.max_summary_chars)
        texts: list[str] = []
        for group in messages:
            text = self.formatter(group)
            if not isinstance(text, str) or not text.strip():
                raise ConfigurationError(f"the tool-result formatter returned {text!r}; it must return non-empty text")
            texts.append(text)
        return texts

    def _summaries(self, index: MessageIndex, groups: list[int]) -> list[Message]:
        texts = self._summary_texts(index, groups)
        return list(map(assistant_text_message, texts, repeat(_TOOL_SUMMARY_PROPERTIES)))

    def _collapse(self, index: MessageIndex, groups: list[int]) -> list[int]:
        """Replace every group by its summary.

        With the character estimate a summary is counted from its text's length, and its
        message is written only when it is first read (see ``MessageIndex._defer``): in a
        pipeline most of them are excluded again right away."""
        tokenizer = index.tokenizer
        texts = self._summary_texts(index, groups)
        if type(tokenizer) is not CharacterEstimatorTokenizer:
            messages = list(map(assistant_text_message, texts, repeat(_TOOL_SUMMARY_PROPERTIES)))
            return index._replace(groups, messages, "collapsed", origin=_TOOLS)
        counts = tokenizer.count_plain_texts(list(map(len, texts)))
        replacements = index._replace(groups, [None] * len(groups), "collapsed", origin=_TOOLS, counts=counts)
        index._defer(replacements, texts, _TOOL_SUMMARY_PROPERTIES)
        return replacements

    async def _run(self, index: MessageIndex) -> bool:
        protected = self._protected(index)
        table = index._table
        orphans, waiting = table.orphan, table.unanswered
        candidates = [
            g
            for g in _live_tool_groups(index)
            if g not in protected
            and g not in orphans
            and g not in waiting
            and g not in table.unit  # a call whose results sit apart is left whole, never collapsed
        ]
        threshold = _threshold_of(self.target, self.trigger)
        originals: list[int] = []
        replacements: list[int] = []
        if _stops_never(self.target, self.trigger):
            originals = candidates
            replacements = self._collapse(index, candidates)
        elif threshold is not None:
            # Collapse just enough groups, found with local arithmetic.
            metric, limit = threshold
            remaining = getattr(index, metric)
            summaries: list[Message] = []
            for group in candidates:
                if remaining <= limit:
                    break
                summary = self._summaries(index, [group])[0]
                originals.append(group)
                summaries.append(summary)
                if metric == "included_tokens":
                    remaining -= table.tokens[group] - index.tokenizer.count_messages([summary])[0]
                elif metric == "included_messages":
                    remaining -= table.size[group] - 1
            replacements = index._replace(originals, summaries, "collapsed", origin=_TOOLS)
        else:
            # Any other target: collapse one group at a time and ask the index after each.
            for group in candidates:
                if self.target_met(index):
                    break
                replacement = index._summaries([group], self._summaries(index, [group]), _TOOLS)
                index._account([group], replacement, "collapsed")
                originals.append(group)
                replacements.extend(replacement)
            index._place(originals, replacements)
        saved = sum(map(table.tokens.__getitem__, originals)) - sum(map(table.tokens.__getitem__, replacements))
        return self._log(index, "collapsed", originals, f"replaced by one-line summaries, {saved} tokens saved")


class SelectiveToolCallCompactionStrategy(_ToolGroupStrategy):
    """Exclude old tool-call groups entirely (calls and results together), keeping the newest.

    Keyword style: ``keep_last_tool_call_groups`` (default 1; 0 removes every
    tool group but the newest group of the conversation).  Trigger style:
    ``minimum_preserved`` newest non-system groups (default 2) are untouched.
    """

    name = "selective_tool_call"

    def __init__(
        self,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        keep_last_tool_call_groups: int | None = None,
    ) -> None:
        trigger, target, floor, per_tool = _tool_floor(
            trigger, target, minimum_preserved, keep_last_tool_call_groups, "SelectiveToolCallCompactionStrategy", 2
        )
        super().__init__(trigger, target)
        self.keep_last_tool_call_groups = floor if per_tool else None
        self.minimum_preserved = floor

    async def _run(self, index: MessageIndex) -> bool:
        newest = _newest_non_system(index)
        protected = self._protected(index)
        candidates = [g for g in _live_tool_groups(index) if g not in protected and g != newest]
        # A tool group goes with its whole unit (an approval's user answer too), unless the unit
        # holds a protected group.
        keep = protected if newest is None else {*protected, newest}
        return self._exclude_oldest(index, candidates, "tool_call_removed", keep)


# Summarisation ---------------------------------------------------------------------------------

DEFAULT_SUMMARIZATION_PROMPT = (
    "You summarise the earlier part of a conversation between a user and an assistant so that the "
    "assistant can continue it without the original messages. Keep every fact the user stated, every "
    "decision, every preference and every constraint or prohibition exactly as stated, the outcome of "
    "each tool call, and anything still unresolved. When the user corrected a value, keep only the "
    "corrected value. Write plain prose, no preamble."
)

SUMMARY_PREFIX = "[Summary] "


def _transcript(groups: Iterable[Sequence[Message]]) -> str:
    """The groups' messages (each group's list in turn) as plain text for the summariser."""
    lines: list[str] = []
    for messages in groups:
        for message in messages:
            if message.is_summary:
                lines.append(f"(earlier summary) {message.text}")
                continue
            for c in message.contents:
                if isinstance(c, TextContent) and c.text:
                    lines.append(f"{message.role}: {c.text}")
                elif isinstance(c, FunctionCallContent):
                    lines.append(f"assistant called {c.name}({c.arguments})")
                elif isinstance(c, FunctionResultContent):
                    lines.append(f"tool result: {c.result}")
    return "\n".join(lines)


class _Unset:
    """The type of a keyword argument left out (to tell it from an explicit None)."""


_UNSET = _Unset()

FAILURES_BEFORE_ERROR = 3
"""Summariser failures in a row after which :class:`SummarizationStrategy` logs once at ERROR."""


class SummarizationStrategy(CompactionStrategy):
    """Replace older groups with one ``[Summary]`` message written by a separate chat model.

    Keyword style: triggers when included non-system messages exceed
    ``target_count + threshold`` (4 + 2) and keeps the newest groups holding at
    least ``target_count`` messages.  Trigger style: excludes the oldest groups
    until the target is met, keeping ``minimum_preserved`` newest non-system
    groups (default 4), then summarises what it excluded.

    It fails closed: if the model raises or replies with nothing, every group it
    had excluded is restored, nothing is inserted, the failure is logged and
    recorded as an event (and raised as :class:`SummarizationError` with
    ``on_error="raise"``).  Cancellation restores and propagates.  Input is
    bounded by ``max_input_tokens`` (MAF spells it ``max_summary_input_tokens``):
    older groups that do not fit wait for a later round, and a group too large to
    fit on its own is left as it is while the groups after it are summarised, so
    one huge message never stalls summarisation.  After
    :data:`FAILURES_BEFORE_ERROR` failures in a row it logs once at ERROR level.
    """

    name = "summarization"
    calls_model = True

    def __init__(
        self,
        client: ChatClient | None = None,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        chat_client: ChatClient | None = None,
        target: Trigger | None = None,
        target_count: int | None = None,
        threshold: int | None = None,
        prompt: str | None = None,
        summarization_prompt: str | None = None,
        max_input_tokens: int | _Unset | None = _UNSET,
        max_summary_input_tokens: int | _Unset | None = _UNSET,
        tokenizer: Tokenizer | None = None,
        on_error: Literal["report", "raise"] = "report",
    ) -> None:
        if client is not None and chat_client is not None:
            raise ConfigurationError("SummarizationStrategy: client and chat_client are the same setting; give one")
        client = client if client is not None else chat_client
        if client is None or not callable(getattr(client, "get_response", None)):
            raise ConfigurationError(
                f"SummarizationStrategy needs a chat client with an async get_response(messages), got {client!r}"
            )
        if prompt is not None and summarization_prompt is not None:
            raise ConfigurationError(
                "SummarizationStrategy: prompt and summarization_prompt are the same setting; give one"
            )
        prompt = prompt if prompt is not None else summarization_prompt
        if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
            raise ConfigurationError(f"SummarizationStrategy prompt must be non-empty text, got {prompt!r}")
        if trigger is not None:
            if target_count is not None or threshold is not None:
                raise ConfigurationError(
                    "SummarizationStrategy takes either trigger=/minimum_preserved= "
                    "or target_count=/threshold=, not both"
                )
            self.target_count: int | None = None
            self.threshold: int | None = None
            self.minimum_preserved = (
                4 if minimum_preserved is None else _count(minimum_preserved, "SummarizationStrategy minimum_preserved")
            )
        else:
            if target is not None or minimum_preserved is not None:
                raise ConfigurationError("SummarizationStrategy: target= and minimum_preserved= need a trigger=")
            self.target_count = 4 if target_count is None else _count(target_count, "target_count", minimum=1)
            self.threshold = 2 if threshold is None else _count(threshold, "threshold")
            trigger = Threshold(
                "included_non_system_messages", self.target_count + self.threshold, "non_system_messages_exceed"
            )
            self.minimum_preserved = 1
        if not isinstance(max_input_tokens, _Unset) and not isinstance(max_summary_input_tokens, _Unset):
            raise ConfigurationError(
                "SummarizationStrategy: max_input_tokens and max_summary_input_tokens are the same setting; give one"
            )
        budget = max_input_tokens if not isinstance(max_input_tokens, _Unset) else max_summary_input_tokens
        if isinstance(budget, _Unset):
            budget = 16_000
        super().__init__(trigger, target)
        self.client = client
        self.prompt = prompt or DEFAULT_SUMMARIZATION_PROMPT
        self.max_input_tokens = None if budget is None else _count(budget, "max_input_tokens", minimum=1)
        # Counts the summariser's input (and, like every strategy's tokenizer, the index).
        self.tokenizer = tokenizer
        self._failures = 0  # in a row
        if on_error not in ("report", "raise"):
            raise ConfigurationError(f"on_error must be 'report' or 'raise', got {on_error!r}")
        self.on_error = on_error
        self.last_usage: Usage | None = None

    def _request(self, groups: Iterable[MessageGroup]) -> list[Message]:
        return self._request_for(group.messages for group in groups)

    def _request_for(self, groups: Iterable[Sequence[Message]]) -> list[Message]:
        return [Message.system(self.prompt), Message.user(_transcript(groups))]

    def _select(self, index: MessageIndex) -> tuple[list[int], bool]:
        """Groups to summarise, oldest first, excluded as they are chosen; and whether the input
        budget (rather than the floor or the target) is what stopped the choice."""
        chosen: list[int] = []
        over = False
        budget = self.max_input_tokens
        tokenizer = index.tokenizer
        kind_of, sizes = index._table.kind, index._table.size
        spent = sum(tokenizer.count_messages(self._request_for([])))
        if self.target_count is not None:
            kept: set[int] = set()
            retained = 0
            for group in reversed(index._live.values()):
                if kind_of[group] is SYSTEM:
                    continue
                if retained >= self.target_count and kept:
                    break
                kept.add(group)
                retained += sizes[group]
        else:
            kept = _newest(index, max(self.minimum_preserved, 1))
        candidates = [g for g in _live_ids(index) if kind_of[g] is not SYSTEM and g not in kept]
        for group in candidates:
            if group in index._table.unit:
                break  # a call whose results sit apart: summarising it would move them; stop before it
            if self.target_count is None and self.target_met(index):
                break
            if budget is not None:
                cost = tokenizer.count_text(_transcript([index._table.messages(group)]) + "\n")
                if spent + cost > budget:
                    if chosen:
                        return chosen, True
                    over = True  # too large on its own: left as it is, the groups after it go on
                    continue
                spent += cost
            chosen.extend(index._exclude([group], "summarized"))
        return chosen, over and not chosen

    def _restore(self, index: MessageIndex, groups: list[int]) -> None:
        index._include(groups)

    def _fail(self, index: MessageIndex, groups: list[int], why: str) -> bool:
        self._restore(index, groups)
        index.events.append(CompactionEvent(self.name, "failed", detail=f"{why}; nothing was replaced"))
        logger.warning("summarization skipped: %s; the history is unchanged", why)
        self._failures += 1
        if self._failures == FAILURES_BEFORE_ERROR:  # once per run of failures, as MAF does
            logger.error(
                "summarization has failed %d times in a row; the history is no longer being summarised",
                self._failures,
            )
        if self.on_error == "raise":
            raise SummarizationError(f"summarization failed: {why}; the history is unchanged")
        return False

    async def _run(self, index: MessageIndex) -> bool:
        groups, over_budget = self._select(index)
        request = self._request_for(map(index._table.messages, groups))
        if groups and self.max_input_tokens is not None:
            # The per-group estimate above is close; the request as sent is what must fit.
            while len(groups) > 1 and sum(index.tokenizer.count_messages(request)) > self.max_input_tokens:
                index._include([groups.pop()])
                request = self._request_for(map(index._table.messages, groups))
            if sum(index.tokenizer.count_messages(request)) > self.max_input_tokens:
                index._include(groups)
                groups, over_budget = [], True
        if not groups:
            if over_budget:
                why = "every group that could be summarised exceeds max_input_tokens on its own; nothing was replaced"
                index.events.append(CompactionEvent(self.name, "failed", detail=why))
                logger.warning("summarization skipped: every group exceeds max_input_tokens on its own")
            return False
        try:
            response = await self.client.get_response(request)
        except asyncio.CancelledError:
            self._restore(index, groups)
            raise
        except Exception as error:  # any client failure fails closed
            return self._fail(index, groups, f"the summariser raised {type(error).__name__}: {error}")
        text = getattr(response, "text", None)
        if not isinstance(text, str) or not text.strip():
            return self._fail(index, groups, "the summariser replied with no text")
        text = text.strip()
        if not text.startswith(SUMMARY_PREFIX.strip()):
            text = SUMMARY_PREFIX + text
        self.last_usage = getattr(response, "usage", None)
        self._failures = 0
        summary = Message(
            "assistant",
            (TextContent(text),),
            additional_properties={SUMMARY_PROPERTY: True, SUMMARY_SOURCE_PROPERTY: "summarization"},
        )
        tokens = index.tokenizer.count_messages([summary])[0]
        table = index._table
        replacement = table.add(SUMMARY, [summary], None, tokens, origin="summarization", replaces=tuple(groups))
        index._insert(groups[0], replacement)
        index.events.append(
            CompactionEvent(
                self.name,
                "summarized",
                SUMMARY.value,
                None,
                sum(map(table.size.__getitem__, groups)),
                sum(map(table.tokens.__getitem__, groups)),
                f"{len(groups)} groups -> {tokens} tokens",
                usage=self.last_usage,
            )
        )
        return True

    def __repr__(self) -> str:
        if self.target_count is not None:
            return f"SummarizationStrategy(target_count={self.target_count}, threshold={self.threshold})"
        return f"SummarizationStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# Composition -----------------------------------------------------------------------------------


def _strategies(values: Sequence[Any], owner: str) -> list[CompactionStrategy]:
    out: list[CompactionStrategy] = []
    for value in values:
        if not isinstance(value, CompactionStrategy):
            raise ConfigurationError(f"{owner} takes compaction strategies, got {value!r}")
        out.append(value)
    return out


class PipelineStrategy(CompactionStrategy):
    """Run strategies in order, gentlest first; each decides with its own trigger.

    The pipeline's own trigger is :func:`always`.
    """

    name = "pipeline"

    def __init__(self, *strategies: CompactionStrategy | Sequence[CompactionStrategy]) -> None:
        flat: list[Any] = []
        for item in strategies:
            if isinstance(item, (list, tuple)):
                flat.extend(item)
            else:
                flat.append(item)
        self.strategies = _strategies(flat, "PipelineStrategy")
        super().__init__(always())
        self.calls_model = any(s.calls_model for s in self.strategies)  # type: ignore[misc]

    @property
    def tokenizers(self) -> Iterator[Tokenizer]:
        for strategy in self.strategies:
            yield from strategy.tokenizers

    async def _run(self, index: MessageIndex) -> bool:
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
        return changed

    def __repr__(self) -> str:
        return f"PipelineStrategy({', '.join(map(repr, self.strategies))})"


class TokenBudgetComposedStrategy(CompactionStrategy):
    """Run strategies in order until included tokens fit ``token_budget``, then fall back.

    With ``early_stop`` (default) it stops as soon as the budget is met.  If the
    strategies cannot reach it, the oldest non-system groups are excluded until
    they do; the newest group is always kept, so the result may stay above the
    budget when that group alone exceeds it.  System messages are never dropped.
    """

    name = "token_budget"

    def __init__(
        self,
        *,
        token_budget: int,
        tokenizer: Tokenizer | None = None,
        strategies: Sequence[CompactionStrategy] = (),
        early_stop: bool = True,
    ) -> None:
        self.token_budget = _count(token_budget, "TokenBudgetComposedStrategy token_budget", minimum=1)
        super().__init__(tokens_exceed(self.token_budget))
        self.tokenizer = tokenizer
        self.strategies = _strategies(list(strategies), "TokenBudgetComposedStrategy")
        self.calls_model = any(s.calls_model for s in self.strategies)  # type: ignore[misc]
        self.early_stop = bool(early_stop)

    @property
    def tokenizers(self) -> Iterator[Tokenizer]:
        if self.tokenizer is not None:
            yield self.tokenizer
        for strategy in self.strategies:
            yield from strategy.tokenizers

    def _within(self, index: MessageIndex) -> bool:
        return index.included_tokens <= self.token_budget

    async def _run(self, index: MessageIndex) -> bool:
        changed = False
        for strategy in self.strategies:
            changed = await strategy.compact(index) or changed
            if self.early_stop and self._within(index):
                return changed
        if self._within(index):
            return changed
        newest = _newest_non_system(index)
        kind_of = index._table.kind
        candidates = [g for g in index._live.values() if kind_of[g] is not SYSTEM and g != newest]
        return self._exclude_oldest(index, candidates, "token_budget_fallback") or changed

    def __repr__(self) -> str:
        return (
            f"TokenBudgetComposedStrategy(token_budget={self.token_budget}, "
            f"strategies=[{', '.join(map(repr, self.strategies))}])"
        )
