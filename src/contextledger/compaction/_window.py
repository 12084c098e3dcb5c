"""The sliding window: keep only the most recent part of the conversation."""

from __future__ import annotations

from contextledger.compaction._arguments import window_style
from contextledger.compaction._base import SYSTEM, CompactionStrategy, newest_non_system, threshold_of
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._table import GroupKind
from contextledger.compaction._triggers import Trigger

__all__ = ["SlidingWindowStrategy"]

SUMMARY = GroupKind.SUMMARY


def turn_steps(index: MessageIndex, turns: dict[int, list[int]], candidates: list[int]) -> list[tuple[int, list[int]]]:
    """The steps a turn window takes through the ``candidates`` turns (the oldest, in order): one
    turn each, except that the turns a unit spans (a call in one turn, its approval answer or
    result in a later one: SPEC §11) form one step.  A step joined to a turn that may not go
    (turn 0, a preserved turn) is no step, and the window stops there: the unit is kept whole.
    Each step is (how many turns, their groups)."""
    columns = index.columns
    if not columns.unit:
        return [(1, turns[turn]) for turn in candidates]
    joined: set[int] = set()  # turns that go with the turn before them
    seen: set[int] = set()
    for groups in turns.values():
        for group in groups:
            members = columns.unit.get(group)
            if members is None or id(members) in seen:
                continue
            seen.add(id(members))
            spanned = [columns.turn[m] or 0 for m in members if columns.reason[m] is None]
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
        trigger, target, self.keep_last_groups, self.minimum_preserved = window_style(
            trigger, target, minimum_preserved, minimum_preserved_turns, keep_last_groups, preserve_system
        )
        super().__init__(trigger, target)
        self.preserve_system = True

    async def _run(self, index: MessageIndex) -> bool:
        if self.keep_last_groups is not None:
            return self._window_groups(index, self.keep_last_groups)
        return self._window_turns(index)

    def _window_groups(self, index: MessageIndex, keep: int) -> bool:
        # System groups, turn 0 and conversation summaries survive any window.
        kind_of, turn_of = index.columns.kind, index.columns.turn
        eligible = [
            g
            for g in index.live_ids()
            if not (kind_of[g] is SYSTEM or turn_of[g] == 0 or (kind_of[g] is SUMMARY and turn_of[g] is None))
        ]
        doomed = eligible[:-keep] if keep else eligible
        newest = newest_non_system(index)
        if doomed and doomed[-1] == newest:
            doomed.pop()
        excluded = index.exclude_ids(index.whole_units(doomed), "sliding_window")
        return index.record(self.name, "excluded", excluded, "sliding_window")

    def _window_turns(self, index: MessageIndex) -> bool:
        # The groups of each user turn; turn 0 and groups of no turn (system messages,
        # conversation summaries) survive any window.
        turns: dict[int, list[int]] = {}
        current: int | None = None
        bucket: list[int] = []
        kind_of, turn_of = index.columns.kind, index.columns.turn
        for group in index.live_ids():
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
        newest = newest_non_system(index)
        if newest is not None and candidates and candidates[-1] == turn_of[newest]:
            candidates.pop()  # the latest exchange is always sent, whatever the floor
        steps = turn_steps(index, turns, candidates)
        reason = "sliding_window"
        left = index.included_non_system_groups
        threshold = threshold_of(self.target, self.trigger, turns=True)
        if threshold is None:
            # Any other target: exclude a step at a time and ask the index after each.
            excluded: list[int] = []
            for _, groups in steps:
                if self.target_met(index):
                    break
                if len(groups) >= index.included_non_system_groups:
                    break  # excluding this turn would leave nothing but system messages
                excluded.extend(index.exclude_ids(groups, reason))
            return index.record(self.name, "excluded", excluded, "sliding_window (whole turns)")
        # A threshold: the turns to drop are found with local arithmetic, then excluded in one batch.
        # A step's groups are all of its turns' included groups (no system group has a turn), so
        # dropping it takes exactly its turns off the count.
        metric, limit = threshold
        remaining = getattr(index, metric)
        doomed: list[int] = []
        tokens, sizes = index.columns.tokens, index.columns.size
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
        return index.record(self.name, "excluded", index.exclude_ids(doomed, reason), "sliding_window (whole turns)")

    def __repr__(self) -> str:
        if self.keep_last_groups is not None:
            return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups})"
        return f"SlidingWindowStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# Tool results ----------------------------------------------------------------------------------
