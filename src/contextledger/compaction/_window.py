"""The sliding window: keep only the most recent part of the conversation."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, compress, groupby
from operator import itemgetter, ne

from contextledger.compaction._arguments import window_style
from contextledger.compaction._base import (
    CompactionStrategy,
    grid_step,
    newest_non_system,
    on_grid,
    stable_limit,
    threshold_of,
)
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._triggers import Trigger

__all__ = ["SlidingWindowStrategy"]


def turn_steps(index: MessageIndex, turns: dict[int, list[int]], candidates: list[int]) -> list[tuple[int, list[int]]]:
    """The steps a turn window takes through the ``candidates`` turns (the oldest, in order): one
    turn each, except that the turns a unit spans (a call in one turn, its approval answer or
    result in a later one: design.md#units) form one step.  A step joined to a turn that may not go
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
        prefix_stable: bool = True,
        stable_step: int | None = None,
    ) -> None:
        trigger, target, self.keep_last_groups, self.minimum_preserved = window_style(
            trigger, target, minimum_preserved, minimum_preserved_turns, keep_last_groups, preserve_system
        )
        super().__init__(trigger, target, prefix_stable=prefix_stable, stable_step=stable_step)
        self.preserve_system = True

    def default_stable_step(self) -> int:
        """A window of ``keep_last_groups=N`` moves N groups at a time: it holds N to 2N - 1 groups,
        as a trigger at twice its target does, and its start changes once every N groups."""
        return max(self.keep_last_groups or 1, 1)

    async def _run(self, index: MessageIndex) -> bool:
        if self.keep_last_groups is not None:
            return self._window_groups(index, self.keep_last_groups)
        return self._window_turns(index)

    def _window_groups(self, index: MessageIndex, keep: int) -> bool:
        # System groups, turn 0 and conversation summaries survive any window: exactly the groups
        # whose turn is 0 or None (the group table's invariant), so one pass in C finds the rest.
        live, turn_of = index.live_ids(), index.columns.turn
        eligible = list(compress(live, map(turn_of.__getitem__, live)))
        pinned = index.pinned_ids
        if pinned:  # a provider's compaction item is sent, and counted among the groups kept
            eligible = [group for group in eligible if group not in pinned]
        doomed = eligible[:-keep] if keep else eligible
        # With a stable step the oldest groups go that many at a time, on a grid from the oldest.
        block = self.block()
        if block > 1:
            doomed = doomed[: len(doomed) // block * block]
        newest = newest_non_system(index)
        if doomed and doomed[-1] == newest:
            doomed.pop()
        excluded = index.exclude_ids(index.whole_units(doomed), "sliding_window")
        return index.record(self.name, "excluded", excluded, "sliding_window")

    def _window_turns(self, index: MessageIndex) -> bool:
        flat, bounds, turns_per_step = self._turn_steps(index)
        reason = "sliding_window"
        steps = len(bounds) - 1
        threshold = threshold_of(self.target, self.trigger, turns=True)
        if threshold is None:
            # Any other target: exclude a step at a time and ask the index after each.
            excluded: list[int] = []
            for step in range(steps):
                if self.target_met(index):
                    break
                groups = flat[bounds[step] : bounds[step + 1]]
                if len(groups) >= index.included_non_system_groups:
                    break  # excluding this turn would leave nothing but system messages
                excluded.extend(index.exclude_ids(groups, reason))
            return index.record(self.name, "excluded", excluded, "sliding_window (whole turns)")
        # A threshold: the turns to drop are found with arithmetic on running sums, then excluded in
        # one batch.  A step's groups are all of its turns' included groups (no system group has a
        # turn), so dropping it takes exactly its turns off the count.  Steps go oldest first while
        # the metric is above the limit and something besides system messages would be left.
        metric, limit = threshold
        grid: int | None = None
        if self.prefix_stable and self.target is not None:
            ceiling = threshold_of(None, self.trigger, turns=True)
            grid = grid_step(limit, metric, ceiling)
            limit = stable_limit(index, metric, limit, ceiling)
        if metric in {"included_tokens", "included_messages"}:
            column = index.columns.tokens if metric == "included_tokens" else index.columns.size
            reached = list(accumulate(map(column.__getitem__, flat), initial=0))
            dropped = list(map(reached.__getitem__, bounds))  # by the first i steps
        elif metric == "included_groups":
            dropped = bounds
        else:
            dropped = list(accumulate(turns_per_step, initial=0)) if turns_per_step else list(range(steps + 1))
        # Step i goes if the first i steps left the metric above the limit and, with it gone,
        # fewer groups than are included besides system groups would be gone: the first step
        # failing either ends the run.
        room = min(bisect_left(bounds, index.included_non_system_groups, 1) - 1, steps)
        above = bisect_left(dropped, on_grid(getattr(index, metric) - limit, dropped[room], grid))
        doomed = flat[: bounds[min(above, room)]]
        return index.record(self.name, "excluded", index.exclude_ids(doomed, reason), "sliding_window (whole turns)")

    def _turns_that_may_go(self, ordered: list[int], newest_turn: int | None) -> int:
        """How many of the ``ordered`` turns, oldest first, are not kept by the floor (all of them
        when there are fewer turns than it) nor hold the latest exchange (always sent)."""
        count = max(len(ordered) - self.minimum_preserved, 0)
        return count - 1 if count and ordered[count - 1] == newest_turn else count

    def _turn_steps(self, index: MessageIndex) -> tuple[list[int], list[int], list[int] | None]:
        """The steps the window may take, oldest first, as one flat list of their groups and the
        boundaries between them (``bounds[i]``: how many groups the first ``i`` steps hold), with
        the turns each step spans (None when each is one turn).

        A step is one user turn's included groups, except that the turns a unit spans form one
        step (see :func:`turn_steps`).  Turn 0 and groups of no turn (system messages, summaries
        written by summarisation) are never in a step; the newest ``minimum_preserved`` turns and
        the turn of the newest non-system group are not either."""
        columns = index.columns
        turn_of = columns.turn
        live = index.live_ids()
        newest = newest_non_system(index)
        newest_turn = turn_of[newest] if newest is not None else None
        turns = list(map(turn_of.__getitem__, live))
        eligible = list(compress(live, turns))
        in_order = list(filter(None, turns))
        if not columns.unit and in_order == sorted(in_order):
            # The usual case: each turn one run of groups, in order, so the steps are cut where the
            # turn changes, in C passes, with no list per turn.
            starts = [0, *compress(range(1, len(in_order)), map(ne, in_order[1:], in_order))] if in_order else []
            count = self._turns_that_may_go(list(map(in_order.__getitem__, starts)), newest_turn)
            bounds = [*starts[:count], starts[count] if count < len(starts) else len(eligible)]
            return eligible[: bounds[-1]], bounds, None
        # Otherwise the groups of each turn (a system message in the middle of one splits its run).
        by_turn: dict[int, list[int]] = {}
        for turn, run in groupby(zip(turns, live), itemgetter(0)):
            if turn:
                by_turn.setdefault(turn, []).extend(group for _, group in run)
        ordered = sorted(by_turn)
        steps = turn_steps(index, by_turn, ordered[: self._turns_that_may_go(ordered, newest_turn)])
        flat = [group for _, groups in steps for group in groups]
        bounds = list(accumulate((len(groups) for _, groups in steps), initial=0))
        return flat, bounds, [spanned for spanned, _ in steps]

    def __repr__(self) -> str:
        if self.keep_last_groups is not None:
            return f"SlidingWindowStrategy(keep_last_groups={self.keep_last_groups})"
        return f"SlidingWindowStrategy(trigger={self.trigger!r}, minimum_preserved={self.minimum_preserved})"


# Tool results ----------------------------------------------------------------------------------
