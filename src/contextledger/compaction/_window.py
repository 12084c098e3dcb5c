"""The sliding window: keep only the most recent part of the conversation."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, compress, groupby

from contextledger.compaction._arguments import window_style
from contextledger.compaction._base import CompactionStrategy, newest_non_system, threshold_of
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._triggers import Trigger

__all__ = ["SlidingWindowStrategy"]


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
        # System groups, turn 0 and conversation summaries survive any window: exactly the groups
        # whose turn is 0 or None (the group table's invariant), so one pass in C finds the rest.
        live, turn_of = index.live_ids(), index.columns.turn
        eligible = list(compress(live, map(turn_of.__getitem__, live)))
        doomed = eligible[:-keep] if keep else eligible
        newest = newest_non_system(index)
        if doomed and doomed[-1] == newest:
            doomed.pop()
        excluded = index.exclude_ids(index.whole_units(doomed), "sliding_window")
        return index.record(self.name, "excluded", excluded, "sliding_window")

    def _window_turns(self, index: MessageIndex) -> bool:
        # The groups of each user turn; turn 0 and groups of no turn (system messages and
        # conversation summaries, by the group table's invariant) survive any window.  A turn is
        # usually one run of groups; a system message in the middle of one makes two, hence extend.
        turns: dict[int, list[int]] = {}
        turn_of = index.columns.turn
        for turn, run in groupby(index.live_ids(), turn_of.__getitem__):
            if turn:
                turns.setdefault(turn, []).extend(run)
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
        # A threshold: the turns to drop are found with arithmetic on running sums, then excluded in
        # one batch.  A step's groups are all of its turns' included groups (no system group has a
        # turn), so dropping it takes exactly its turns off the count.  Steps go oldest first while
        # the metric is above the limit and something besides system messages would be left.
        metric, limit = threshold
        remaining = getattr(index, metric)
        sizes_of_steps = [len(groups) for _, groups in steps]
        if metric == "included_tokens":
            tokens = index.columns.tokens
            drops = [sum(map(tokens.__getitem__, groups)) for _, groups in steps]
        elif metric == "included_messages":
            sizes = index.columns.size
            drops = [sum(map(sizes.__getitem__, groups)) for _, groups in steps]
        elif metric == "included_groups":
            drops = sizes_of_steps
        else:
            drops = [step_turns for step_turns, _ in steps]
        # Step i goes if the first i steps left the metric above the limit and, with it gone,
        # fewer groups than ``left`` would be gone: the first step failing either ends the run.
        above = bisect_left(list(accumulate(drops, initial=0)), remaining - limit)
        room = bisect_left(list(accumulate(sizes_of_steps)), left)
        taken = steps[: min(above, room, len(steps))]
        doomed = [group for _, groups in taken for group in groups]
        return index.record(self.name, "excluded", index.exclude_ids(doomed, reason), "sliding_window (whole turns)")

    def __repr__(self) -> str:
        if self.keep_last_groups is not None:
            return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups})"
        return f"SlidingWindowStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# Tool results ----------------------------------------------------------------------------------
