"""Compaction: atomic message groups, triggers, strategies, and running them.

>>> from contextledger.compaction import TruncationStrategy, apply_compaction_sync
"""

from contextledger.compaction import triggers
from contextledger.compaction._apply import (
    CompactionResult,
    apply_compaction,
    apply_compaction_sync,
    compact_messages,
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
