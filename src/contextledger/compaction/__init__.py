"""Compaction: atomic message groups, triggers, strategies, and running them.

>>> from contextledger.compaction import TruncationStrategy, apply_compaction_sync

Where things live:

- ``_index.py`` — :class:`MessageIndex`: grouping (SPEC §3 and §11: the plain-history fast loop
  and the general loop, units of a call and its results that sit apart), the group table
  (``_Table``: one column per attribute), the included metrics (``_count``/``_tally``), and
  marking (``_exclude``/``_include``, which take whole units; ``whole_units`` for boundaries).
- ``_strategies.py`` — every built-in strategy and both argument styles: truncation, sliding
  window, tool-result collapse, selective removal, summarisation, pipeline and token budget.
- ``_context_window.py`` — :class:`ContextWindowCompactionStrategy`, built from the above.
- ``triggers.py`` — triggers and targets.  ``_apply.py`` — running a strategy on a message list.
"""

from contextledger.compaction import triggers
from contextledger.compaction._apply import (
    CompactionResult,
    apply_compaction,
    apply_compaction_sync,
    compact_messages,
    compact_with_report,
)
from contextledger.compaction._context_window import ContextWindowCompactionStrategy
from contextledger.compaction._index import CompactionEvent, GroupKind, MessageGroup, MessageIndex
from contextledger.compaction._strategies import (
    DEFAULT_SUMMARIZATION_PROMPT,
    CompactionStrategy,
    PipelineStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    format_tool_results,
)
from contextledger.compaction.triggers import (
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
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = [
    "DEFAULT_SUMMARIZATION_PROMPT",
    "CharacterEstimatorTokenizer",
    "CompactionEvent",
    "CompactionResult",
    "CompactionStrategy",
    "ContextWindowCompactionStrategy",
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
    "compact_messages",
    "compact_with_report",
    "format_tool_results",
    "groups_exceed",
    "has_tool_calls",
    "messages_exceed",
    "never",
    "tokens_below",
    "tokens_exceed",
    "triggers",
    "turns_exceed",
]
