"""Compaction: atomic message groups, triggers, strategies, and running them.

>>> from contextledger.compaction import TruncationStrategy, apply_compaction_sync

Where things live (every name is imported from here, ``contextledger.compaction``):

- the index, one concern per module: ``_table.py`` (the group table, its invariants, and
  :class:`MessageGroup`, a view of one row), ``_grouping.py`` (the grouper, SPEC §3 and §11:
  which messages form a group, and units of a call and its results that sit apart; ``_plain.py``
  reads plain runs faster, the same way), ``_metrics.py``
  (the running counts triggers read, kept in one place), ``_marking.py`` (excluding,
  including, replacing and inserting, by group id: the one interface every strategy uses),
  ``_index.py`` (:class:`MessageIndex`, which builds and owns those parts: building, updating,
  reading);
- triggers: ``_triggers.py``;
- strategies, one module per family: ``_base.py`` (what all share), ``_truncation.py``,
  ``_window.py``, ``_tool_results.py`` (collapse and selective removal),
  ``_summarization.py``, ``_composition.py`` (pipeline, token budget, context window); both
  argument styles and the alias pairs are resolved in ``_arguments.py``;
- running a strategy on a message list: ``_apply.py``.

A strategy of your own subclasses :class:`CompactionStrategy`, implements ``async _run(index)``,
and works on the index by id exactly as the built-in ones do (see :class:`MessageIndex`).
"""

from contextledger.compaction._apply import (
    CompactionResult,
    apply_compaction,
    apply_compaction_sync,
    compact_with_report,
)
from contextledger.compaction._base import CompactionStrategy
from contextledger.compaction._composition import (
    ContextWindowCompactionStrategy,
    PipelineStrategy,
    TokenBudgetComposedStrategy,
)
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._summarization import DEFAULT_SUMMARIZATION_PROMPT, SummarizationStrategy
from contextledger.compaction._table import CompactionEvent, GroupColumns, GroupKind, MessageGroup
from contextledger.compaction._tool_results import (
    SelectiveToolCallCompactionStrategy,
    ToolResultCompactionStrategy,
    format_tool_results,
)
from contextledger.compaction._triggers import (
    Trigger,
    all_of,
    always,
    any_of,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.compaction._truncation import TruncationStrategy
from contextledger.compaction._window import SlidingWindowStrategy
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "CharacterEstimatorTokenizer",
    "CompactionEvent",
    "CompactionResult",
    "CompactionStrategy",
    "ContextWindowCompactionStrategy",
    "GroupColumns",
    "GroupKind",
    "MessageGroup",
    "MessageIndex",
    "PipelineStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "ToolResultCompactionStrategy",
    "Trigger",
    "TruncationStrategy",
    "all_of",
    "always",
    "any_of",
    "apply_compaction",
    "apply_compaction_sync",
    "compact_with_report",
    "format_tool_results",
    "groups_exceed",
    "has_tool_calls",
    "messages_exceed",
    "never",
    "tokens_below",
    "tokens_exceed",
    "turns_exceed",
]
