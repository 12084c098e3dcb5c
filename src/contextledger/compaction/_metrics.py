"""The running metrics of an index: the one place that counts groups in and out.

Triggers read these counters (``included_tokens``, ``included_turns``...) on every check, so
they are kept up to date as groups are appended, excluded, included, replaced and inserted,
and a check costs O(1) however long the history is.  Every change to them goes through a
method of :class:`Metrics`; grouping and marking say *what* happened (these groups came in,
these went out, these replaced those), and this module turns it into counts.

The per-turn counts behind ``included_turns`` are the one exception to "always up to date":
a batch that takes in or out as many groups as stay included (indexing a history, a window
excluding most of it) drops them, and they are counted again from the included groups when
``included_turns`` is next read.  Counting the few groups left is cheaper than tracking the
many that moved, and a strategy that never reads turns never pays for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import add, is_
from typing import cast

from contextledger.compaction._table import _SYSTEM, _TOOL_CALL, _Table, gather

__all__ = ["Metrics"]


class Metrics:
    """Totals over every group, and the same counts over the included groups only.

    A turn counts as included while any of its groups is (turn 0, what came before the first
    user message, is never counted as a turn).  :class:`MessageIndex` reads its counters from
    here; grouping and marking report every change through the methods below.
    """

    def __init__(self, table: _Table) -> None:
        self._table = table
        self.total_groups = self.total_messages = self.total_tokens = self.total_turns = 0
        self.included_groups = self.included_messages = self.included_tokens = 0
        self.included_non_system_groups = self.included_non_system_messages = 0
        self.included_tool_call_groups = 0
        self._included_turns = 0
        # Included groups per turn, indexed by turn (slot 0 is turn 0); None while they are to be
        # counted again from the included groups (see the module docstring).
        self._turn_groups: list[int] | None = [0]

    def included_turns(self, live_ids: Callable[[], list[int]], indexed: int) -> int:
        """User turns with at least one included group (turn 0 is not a turn); ``live_ids`` gives
        the included groups if they must be counted again, ``indexed`` is how many messages were
        indexed."""
        if self._turn_groups is None:
            if self.included_groups == self.total_groups and self.total_messages == indexed:
                # Nothing excluded and nothing written by a strategy: every turn's user group is
                # included, and no other group has a turn of its own making.  No need to count.
                return self.total_turns
            self._recount_turns(live_ids())
        return self._included_turns

    def _recount_turns(self, live: list[int]) -> None:
        """Count the included groups of each turn afresh, from the included groups."""
        counted = Counter(map(self._table.turn.__getitem__, live))
        counted.pop(None, None)
        counted.pop(0, None)
        per_turn = cast("Counter[int]", counted)
        # A group a strategy of yours inserted may carry a turn past the last one indexed.
        slots = [0] * (max(self.total_turns, *per_turn) + 1 if per_turn else self.total_turns + 1)
        for turn, count in per_turn.items():
            slots[turn] = count
        self._turn_groups = slots
        self._included_turns = len(per_turn)

    def _batch_turns(self, moved: int) -> bool:
        """Whether a batch of ``moved`` groups should update the per-turn counts (True), or
        leave them to be counted again when read (False: they are dropped here)."""
        if self._turn_groups is None:
            return False
        if moved > 64 and moved * 2 > self.included_groups:
            self._turn_groups = None
            return False
        return True

    # One group ----------------------------------------------------------------------------------

    def count(self, group: int, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) one included group's contribution."""
        table = self._table
        size = sign * table.size[group]
        self.included_groups += sign
        self.included_messages += size
        self.included_tokens += sign * table.tokens[group]
        kind = table.kind[group]
        if kind is not _SYSTEM:
            self.included_non_system_groups += sign
            self.included_non_system_messages += size
            if kind is _TOOL_CALL:
                self.included_tool_call_groups += sign
        turn = table.turn[group]
        slots = self._turn_groups
        if turn and slots is not None:
            before = slots[turn]
            after = before + sign
            slots[turn] = after
            self._included_turns += (before == 0 and after > 0) - (before > 0 and after == 0)

    def count_total(self, group: int) -> None:
        """Count a group that joined the index (a summary inserted by a strategy) in the totals."""
        table = self._table
        self.total_groups += 1
        self.total_messages += table.size[group]
        self.total_tokens += table.tokens[group]

    # Many groups --------------------------------------------------------------------------------

    def tally(
        self, groups: Iterable[int], sign: int, *, totals: bool = True, fresh: bool = False, run: slice | None = None
    ) -> list[int]:
        """Add (sign=1) or remove (sign=-1) many groups: in the totals (with ``totals``), and in
        the included counts for those that are included.  Returns the included ones, each once,
        in order; ``fresh`` says the caller knows that is all of them, ``run`` that they are
        exactly the ids that slice of the columns holds (see ``_Table.run``), so they are read in slices.

        Every pass is a C-level loop over the columns (map, sum, Counter, compress), so thousands
        of groups cost little more than a Python loop over their turns."""
        table = self._table
        ids = groups if isinstance(groups, list) else list(groups)
        sizes, tokens = table.size, table.tokens
        if totals:
            self.total_groups += sign * len(ids)
            self.total_messages += sign * sum(map(sizes.__getitem__, ids))
            self.total_tokens += sign * sum(map(tokens.__getitem__, ids))
        if fresh:
            included = ids
        else:
            unique = list(dict.fromkeys(ids))
            included = list(compress(unique, map(is_, map(table.reason.__getitem__, unique), repeat(None))))
            run = None
        if not included:
            return included
        counts, kinds = gather(sizes, included, run), gather(table.kind, included, run)
        token_sum = sum(gather(tokens, included, run))
        messages = sum(counts)
        systems = kinds.count(_SYSTEM)
        system_messages = sum(size for size, kind in zip(counts, kinds) if kind is _SYSTEM) if systems else 0
        self.included_groups += sign * len(included)
        self.included_messages += sign * messages
        self.included_tokens += sign * token_sum
        self.included_non_system_groups += sign * (len(included) - systems)
        self.included_non_system_messages += sign * (messages - system_messages)
        self.included_tool_call_groups += sign * kinds.count(_TOOL_CALL)
        if self._batch_turns(len(included)):
            turn = table.turn
            self._add_turns(gather(turn, included, run), sign)
        return included

    def _add_turns(self, turns: Iterable[int | None], sign: int) -> None:
        """Count groups of these turns in (sign=1) or out (sign=-1) of the per-turn counts."""
        turn_groups = self._turn_groups
        if turn_groups is None:
            return
        per_turn = Counter(turns)
        per_turn.pop(None, None)
        per_turn.pop(0, None)
        if not per_turn:
            return
        keys = cast(list[int], list(per_turn))
        before = list(map(turn_groups.__getitem__, keys))
        after = list(map(add, before, per_turn.values() if sign > 0 else [-count for count in per_turn.values()]))
        for turn, count in zip(keys, after):
            turn_groups[turn] = count
        self._included_turns += before.count(0) if sign > 0 else -after.count(0)

    # Appends ------------------------------------------------------------------------------------

    def open_turns(self, turn: int) -> None:
        """Make room for per-turn counts up to ``turn`` (the groups come in through :meth:`tally`)."""
        slots = self._turn_groups
        if slots is not None:
            slots.extend(repeat(0, turn + 1 - len(slots)))
        self.total_turns = turn

    def count_appended(
        self,
        groups: int,
        messages: int,
        tokens: int,
        *,
        systems: int,
        tool_groups: int,
        turns: Iterable[int | None],
        first_turn: int,
        last_turn: int,
    ) -> None:
        """Count in ``groups`` new, included groups holding ``messages`` messages (``systems`` of
        them system groups of one message each), of ``turns``, appended after ``first_turn``
        (the turn that was open) up to ``last_turn``.

        Every turn after ``first_turn`` is new and starts with its user group, so its count is
        written in one slice; only the open turn may already have groups."""
        self.total_groups += groups
        self.total_messages += messages
        self.total_tokens += tokens
        self.included_groups += groups
        self.included_messages += messages
        self.included_tokens += tokens
        self.included_non_system_groups += groups - systems
        self.included_non_system_messages += messages - systems
        self.included_tool_call_groups += tool_groups
        self.total_turns = last_turn
        if not self._batch_turns(groups):
            return
        slots = cast(list[int], self._turn_groups)
        per_turn = Counter(turns)
        if first_turn:
            added = per_turn.get(first_turn, 0)
            if added:
                before = slots[first_turn]
                slots[first_turn] = before + added
                self._included_turns += before == 0
        if last_turn > first_turn:
            slots[first_turn + 1 :] = map(per_turn.__getitem__, range(first_turn + 1, last_turn + 1))
            self._included_turns += last_turn - first_turn

    # Replacements -------------------------------------------------------------------------------

    def count_replaced(
        self, originals: list[int], replacements: list[int], old: slice | None = None, new: slice | None = None
    ) -> None:
        """Count each original out and its replacement in, where every pair is one non-system
        group for a one-message group of the same turn (what a collapse writes): the group and
        turn counts do not move, so the pairs are netted in one step.  ``old`` and ``new`` are
        the two lists' runs (see ``_Table.run``), when the caller knows them."""
        table = self._table
        kinds, sizes, tokens = table.kind, table.size, table.tokens
        added = sum(gather(tokens, replacements, new))
        removed_messages = sum(gather(sizes, originals, old))
        count = len(replacements)
        self.total_groups += count
        self.total_messages += count
        self.total_tokens += added
        self.included_messages += count - removed_messages
        self.included_non_system_messages += count - removed_messages
        self.included_tokens += added - sum(gather(tokens, originals, old))
        self.included_tool_call_groups += gather(kinds, replacements, new).count(_TOOL_CALL) - gather(
            kinds, originals, old
        ).count(_TOOL_CALL)
