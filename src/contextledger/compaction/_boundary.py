"""The providers' own compaction items as a boundary every strategy keeps.

OpenAI's Responses API returns a ``compaction`` item and Anthropic's ``compact_20260112`` edit a
``compaction`` content block; each stands for everything before it (OpenAI's guide lets a client
drop what precedes the newest one, and Anthropic ignores every block before it).  A strategy that
treated the item as the oldest group would drop the summary of everything before and keep only
what came after, so while a strategy runs:

- the newest such message (its group, and the unit of that group: a call it opens keeps its
  results) is *held*: no strategy excludes, collapses or summarises it, so it is sent byte for
  byte whenever anything after it is (the newest group is always sent, so: always);
- the user message that opened its turn is held too.  Anthropic's conversations open with the
  user, and its documentation does not say that an assistant message opening with a
  ``compaction`` block may open one, so that user message stays before it on both APIs;
- everything else before it is covered by the provider and goes first, before the strategy
  takes anything after it (system messages stay, as they always do; a call before it whose
  result comes after it stays with its result, so nothing sent is an orphan).  Windows and
  budgets then count from the item: the strategy sees the held groups as part of what is sent
  and works on what follows them.

The item is found by :meth:`MessageIndex.provider_compaction_ids` (the test of
:attr:`~contextledger.messages.Message.is_provider_compaction`, on the messages the index holds,
read once per index), and held with :meth:`MessageIndex.holding`: only the index's public
interface is used, as by any strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from contextledger.compaction._index import MessageIndex
from contextledger.compaction._table import GroupKind

__all__ = ["PROVIDER_COMPACTION_REASON", "held_by_provider"]

PROVIDER_COMPACTION_REASON = "provider_compaction"
"""The exclusion reason of what a provider's compaction item covers (shown in reports)."""


@contextmanager
def held_by_provider(index: MessageIndex) -> Iterator[bool]:
    """While a strategy runs: hold the newest provider compaction item and its turn's opening user
    message, and exclude what the item covers first (see the module docstring).  Yields whether
    anything changed; the holds are lifted on leaving."""
    held = index.provider_compaction_ids()
    if not held:
        yield False
        return
    boundary = held[0]
    reason_of = index.columns.reason
    restored = index.include_ids([group for group in held if reason_of[group] is not None])
    with index.holding(held):
        pinned = index.pinned_ids
        live = index.live_ids()
        at = live.index(boundary)
        kind_of = index.columns.kind
        covered = [g for g in live[:at] if kind_of[g] is not GroupKind.SYSTEM and g not in pinned]
        if covered:
            covered = index.whole_units(covered, {*live[at:], *pinned})
        excluded = index.exclude_ids(covered, PROVIDER_COMPACTION_REASON) if covered else []
        index.record(PROVIDER_COMPACTION_REASON, "excluded", excluded, "held by the provider's compaction item")
        yield bool(excluded or restored)
