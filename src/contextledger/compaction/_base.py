"""What every strategy shares: trigger and target, the floor rules, and excluding oldest first.

Each strategy works on a :class:`MessageIndex`.  It does nothing when one or fewer non-system
groups are included, then asks its *trigger* whether to start; it then takes one step at a
time (a group, or a whole turn for the turn-based sliding window) and re-checks its *target*
after each step.  The default target is "the trigger no longer fires".  A preserved floor of
the newest groups is never touched, and the newest included non-system group is never
excluded, so the projection is never empty.

Strategies read the index by group id and change it only through its public marking methods
(``exclude_ids``, ``replace_ids``...), the same interface a strategy of your own uses: a long
history has thousands of groups, and a group object per step would cost more than the step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

from contextledger.compaction._arguments import count
from contextledger.compaction._arguments import trigger as check_trigger
from contextledger.compaction._boundary import held_by_provider
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._table import GroupKind, gc_paused
from contextledger.compaction._triggers import Not, Threshold, Trigger, always, never
from contextledger.tokenizers import Tokenizer

__all__ = ["CompactionStrategy"]

SYSTEM = GroupKind.SYSTEM

# The thresholds a strategy can turn into arithmetic: excluding a group moves these by its own size.
_GROUP_METRICS = frozenset({"included_tokens", "included_messages", "included_groups"})


def threshold_of(target: Trigger | None, trigger: Trigger, *, turns: bool = False) -> tuple[str, int] | None:
    """If "target met" is just ``metric <= limit``, return (index attribute, limit).

    A threshold on turns is recognised only with ``turns``, for callers that exclude whole turns
    (excluding one group does not say how the turn count moves)."""
    if target is None:
        check: object = trigger
    elif isinstance(target, Not):
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


def stops_never(target: Trigger | None, trigger: Trigger) -> bool:
    """True when the target can never be met, so only the floor stops the strategy."""
    if target is None:
        return isinstance(trigger, type(always()))
    return isinstance(target, type(never()))


def newest(index: MessageIndex, count: int) -> set[int]:
    """The ``count`` newest included non-system groups."""
    kept: set[int] = set()
    if count <= 0:
        return kept
    kind_of = index.columns.kind
    for group in index.newest_ids():
        if kind_of[group] is not SYSTEM:
            kept.add(group)
            if len(kept) >= count:
                break
    return kept


def newest_non_system(index: MessageIndex) -> int | None:
    kind_of = index.columns.kind
    return next((group for group in index.newest_ids() if kind_of[group] is not SYSTEM), None)


def oldest_until(
    index: MessageIndex, candidates: list[int], metric: str, limit: int, step: int | None = None
) -> list[int]:
    """The included ``candidates``, oldest first, whose exclusion one by one brings ``metric``
    (an included-count attribute of the index) down to ``limit``: found with running sums over
    the candidates' sizes, without touching the index.  With a grid ``step`` (a prefix-stable cut)
    a limit the candidates cannot reach is not chased: see :func:`on_grid`."""
    remaining = getattr(index, metric)
    if remaining <= limit:
        return []
    if metric == "included_groups":
        return candidates[: remaining - limit]
    column = index.columns.tokens if metric == "included_tokens" else index.columns.size
    # The fewest oldest candidates whose sizes add up to ``need``, found by walking from whichever
    # end is nearer the cut: a truncation of a long history usually drops most groups and keeps
    # few, so only those few are read one by one.
    need = remaining - limit
    run = index.run_of(candidates)
    total = sum(column[run]) if run is not None else sum(map(column.__getitem__, candidates))
    need = on_grid(need, total, step)
    if need <= 0:
        return []
    if need <= total // 2:
        dropped = 0
        for count, group in enumerate(candidates, 1):
            dropped += column[group]
            if dropped >= need:
                return candidates[:count]
    room = total - need  # what the kept candidates may add up to
    kept = 0
    for group in reversed(candidates):
        room -= column[group]
        if room < 0:
            break
        kept += 1
    return candidates[: len(candidates) - kept]


def stable_limit(index: MessageIndex, metric: str, target: int, trigger: tuple[str, int] | None) -> int:
    """The limit to cut down to so that the cut falls on a fixed grid, not wherever the target is.

    A strategy applied afresh to each request of a growing conversation would otherwise move its
    cut on every request (the target is met just barely, so the next request is over it again),
    and every move changes the prefix the provider has cached.  Instead, with a trigger ``T`` and
    a target ``t`` on the same measure, the oldest groups go in whole steps of ``T - t`` counted
    from the oldest candidate: the cut stays where it is until the conversation has grown by
    another step, and what remains after a move is at most ``T`` and about ``t``.  With no gap
    between trigger and target (or a trigger on another measure) the target is met exactly.
    """
    if trigger is None or trigger[0] != metric:
        return target
    step = trigger[1] - target
    current: int = getattr(index, metric)
    if step <= 0 or current <= trigger[1]:
        return target
    steps = -(-(current - trigger[1]) // step)
    return current - steps * step


def grid_step(limit: int, metric: str, trigger: tuple[str, int] | None) -> int | None:
    """The step of a prefix-stable cut's grid (trigger minus target on one measure), or None."""
    if trigger is None or trigger[0] != metric or trigger[1] <= limit:
        return None
    return trigger[1] - limit


def on_grid(need: int, reachable: int, step: int | None) -> int:
    """How much a prefix-stable cut takes when it needs ``need`` and at most ``reachable`` may go.

    When what may go cannot meet the target (a long system prompt, a large newest group), taking
    all of it would move the cut on every request, since what may go grows with each one.  The cut
    stays on its grid instead: the whole steps that can go, so it moves once the conversation has
    grown by another step, and the request stays above its target until then.
    """
    if step is None or need <= reachable:
        return need
    return reachable // step * step


def whole_blocks(index: MessageIndex, candidates: list[int], block: int) -> list[int]:
    """The ``candidates`` (whole units, oldest first) that fill whole blocks of ``block`` steps,
    a step being one group or one unit (a call with results that sit apart goes as one)."""
    unit = index.columns.unit
    if not unit or unit.keys().isdisjoint(candidates):
        return candidates[: len(candidates) // block * block]
    step_of: dict[int, int] = {}
    steps: list[int] = []
    for group in candidates:
        members = unit.get(group)
        key = id(members) if members is not None else -1 - group
        steps.append(step_of.setdefault(key, len(step_of)))
    allowed = len(step_of) // block * block
    return [group for group, step in zip(candidates, steps, strict=True) if step < allowed]


class CompactionStrategy(ABC):
    """Base of every strategy: trigger, target, and the rules every strategy keeps.

    Subclasses implement :meth:`_run`, which is only called when the trigger
    fired and at least two non-system groups are included.
    """

    name: ClassVar[str] = "strategy"

    def __init__(
        self,
        trigger: Trigger,
        target: Trigger | None = None,
        *,
        prefix_stable: bool = True,
        stable_step: int | None = None,
    ) -> None:
        self.trigger = check_trigger(trigger, f"{type(self).__name__} trigger")
        self.target = None if target is None else check_trigger(target, f"{type(self).__name__} target")
        self.prefix_stable = bool(prefix_stable)
        self.stable_step = None if stable_step is None else count(stable_step, "stable_step", minimum=1)

    def block(self) -> int:
        """How many groups (or units) a keyword-style strategy (a floor, no target) takes at once.

        Taking every group the floor allows, as soon as it may, changes the start of the request on
        every call; taking them ``stable_step`` at a time, on a grid counted from the oldest,
        changes it once every ``stable_step`` (design.md#prefix-stability).  The floor still holds: what it keeps
        always stays, and a few older groups wait for a whole block.  Each strategy sets its own
        default (:meth:`default_stable_step`); ``stable_step=1`` or ``prefix_stable=False`` keeps
        exactly the floor.
        """
        if not self.prefix_stable:
            return 1
        return self.stable_step if self.stable_step is not None else self.default_stable_step()

    def default_stable_step(self) -> int:
        """The step a prefix-stable floor takes when none is given (one: every group as it may go)."""
        return 1

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

    hard_ceiling: ClassVar[bool] = False
    """Whether the trigger is a budget the result must fit, even where that moves the cut (a
    prefix-stable cut otherwise stays on its grid above its target when the target is out of
    reach: see :func:`on_grid`)."""

    calls_model: ClassVar[bool] = False
    """Whether the strategy awaits a model; the others run without yielding to the event loop."""

    async def compact(self, index: MessageIndex, *, force: bool = False) -> bool:
        """Apply the strategy to ``index``; True if anything changed.

        ``force`` runs it as though its trigger had fired (what a model's ``compact_context``
        asks for): the target, the floors and the prefix-stable grid still decide how far it goes.
        A composed strategy's children still ask their own triggers."""
        if index.included_non_system_groups <= 1:
            return False
        if not force and not self.trigger(index):
            return False
        # A provider's compaction item is a boundary: held, and what it covers goes first.
        with held_by_provider(index) as dropped:
            if dropped and self.target_met(index):
                return True
            if self.calls_model:
                return await self._run(index) or dropped
            with gc_paused():
                return await self._run(index) or dropped

    @abstractmethod
    async def _run(self, index: MessageIndex) -> bool: ...

    def _exclude_oldest(
        self, index: MessageIndex, candidates: list[int], reason: str, keep: set[int] | None = None, *, block: int = 1
    ) -> bool:
        """Exclude ``candidates`` oldest first, one at a time, until the target is met.

        When the target is a plain threshold on tokens, messages or groups (the
        usual case) the stopping point is found with local arithmetic and the
        groups are excluded in one batch, at the point :func:`stable_limit` sets for
        a prefix-stable strategy; any other target is re-evaluated on the index
        after every step.  With no target (only a floor stops it) the candidates go
        ``block`` at a time (see :meth:`block`).
        """
        # A unit with a member that must stay (by default: any included group that is not a
        # candidate, such as a protected newest result) is kept whole; the others go whole.
        pinned = index.pinned_ids
        if pinned:
            candidates = [group for group in candidates if group not in pinned]
        candidates = index.whole_units(candidates, keep)
        threshold = threshold_of(self.target, self.trigger)
        doomed: list[int] = []
        step: int | None = None
        if threshold is not None and self.prefix_stable and self.target is not None:
            metric, limit = threshold
            ceiling = threshold_of(None, self.trigger)
            step = grid_step(limit, metric, ceiling)
            threshold = (metric, stable_limit(index, metric, limit, ceiling))
            if step is not None and ceiling is not None and self.hard_ceiling:
                # A budget is kept even off the grid: where the whole steps that can go would leave
                # the request above it, the cut goes just as far as the budget needs (see on_grid).
                current = getattr(index, metric)
                reachable = self._reachable(index, candidates, metric)
                if current - on_grid(current - threshold[1], reachable, step) > ceiling[1]:
                    step, threshold = None, ceiling
        if stops_never(self.target, self.trigger):
            if block > 1:
                candidates = whole_blocks(index, candidates, block)
            doomed = index.exclude_ids(candidates, reason)
        elif threshold is not None and (not index.columns.unit or index.columns.unit.keys().isdisjoint(candidates)):
            metric, limit = threshold
            doomed = index.exclude_ids(oldest_until(index, candidates, metric, limit, step), reason)
        elif threshold is not None:
            metric, limit = threshold
            if step is not None:
                current = getattr(index, metric)
                limit = current - on_grid(current - limit, self._reachable(index, candidates, metric), step)
            for group in candidates:
                if getattr(index, metric) <= limit:
                    break
                doomed.extend(index.exclude_ids([group], reason))
        else:
            for group in candidates:
                if self.target_met(index):
                    break
                doomed.extend(index.exclude_ids([group], reason))
        return index.record(self.name, "excluded", doomed, reason)

    @staticmethod
    def _reachable(index: MessageIndex, candidates: list[int], metric: str) -> int:
        """How far excluding every candidate would bring ``metric`` down (the candidates hold
        whole units: :meth:`MessageIndex.whole_units` left out any unit that must stay)."""
        if metric == "included_groups":
            return len(candidates)
        column = index.columns.tokens if metric == "included_tokens" else index.columns.size
        return sum(map(column.__getitem__, candidates))

    def __repr__(self) -> str:
        target = f", target={self.target!r}" if self.target is not None else ""
        return f"{type(self).__name__}(trigger={self.trigger!r}{target})"
