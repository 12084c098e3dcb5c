"""Truncation: exclude the oldest groups until the target is met."""

from __future__ import annotations

from itertools import compress, filterfalse, repeat
from operator import is_not

from contextledger.compaction._arguments import truncation_style
from contextledger.compaction._base import SYSTEM, CompactionStrategy, newest
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._table import GroupKind
from contextledger.compaction._triggers import Trigger
from contextledger.tokenizers import Tokenizer

__all__ = ["TruncationStrategy"]


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
        prefix_stable: bool = True,
    ) -> None:
        trigger, target, floor, self.max_n, self.compact_to = truncation_style(
            trigger, target, minimum_preserved, max_n, compact_to, tokenizer
        )
        super().__init__(trigger, target, prefix_stable=prefix_stable)
        self.tokenizer = tokenizer
        self.minimum_preserved = floor
        self.preserve_system = bool(preserve_system)
        self.preserve_first_user_group = bool(preserve_first_user_group)

    async def _run(self, index: MessageIndex) -> bool:
        protected = newest(index, max(self.minimum_preserved, 1))
        live = index.live_ids()
        kind_of = index.columns.kind
        if self.preserve_first_user_group:
            first_user = next((g for g in live if kind_of[g] is GroupKind.USER), None)
            if first_user is not None:
                protected.add(first_user)
        # Both passes in C: a truncation of a long history picks from thousands of groups.
        if self.preserve_system:
            live = list(compress(live, map(is_not, map(kind_of.__getitem__, live), repeat(SYSTEM))))
        candidates = list(filterfalse(protected.__contains__, live)) if protected else live
        return self._exclude_oldest(index, candidates, "truncation")
