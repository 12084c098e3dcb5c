"""Compaction: atomic message groups, triggers, strategies, and running them.

>>> from contextledger.compaction import TruncationStrategy, apply_compaction_sync

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.compaction``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- the index, one concern per module: ``_table.py`` (the group table, its invariants, and
  :class:`MessageGroup`, a view of one row, of a :class:`GroupKind`; :class:`GroupColumns`, the
  table's columns a strategy reads by group id; :class:`CompactionEvent`, one step a strategy
  recorded), ``_grouping.py`` (the grouper, design.md#units: which messages form a group, and
  units of a call and its results that sit apart; ``_plain.py`` reads plain runs faster, the same
  way), ``_metrics.py`` (the running counts triggers read, kept in one place), ``_marking.py``
  (excluding, including, replacing and inserting, by group id: the one interface every strategy
  uses), ``_index.py`` (:class:`MessageIndex`, which builds and owns those parts: building,
  updating, reading);
- triggers, ``_triggers.py``: a :class:`Trigger` is any predicate on the index; the built-in ones
  are :func:`always`, :func:`never`, :func:`tokens_exceed`, :func:`tokens_below`,
  :func:`messages_exceed`, :func:`turns_exceed`, :func:`groups_exceed`, :func:`has_tool_calls`,
  combined with :func:`all_of` and :func:`any_of`;
- strategies, one module per family: ``_base.py`` (:class:`CompactionStrategy`, what all share:
  trigger and target, floors, the prefix-stable grid), ``_truncation.py``
  (:class:`TruncationStrategy`), ``_window.py`` (:class:`SlidingWindowStrategy`),
  ``_tool_results.py`` (:class:`ToolResultCompactionStrategy` and its
  :func:`format_tool_results`, :func:`with_reference` for a collapsed line that carries its ``ref``,
  :class:`SelectiveToolCallCompactionStrategy`),
  ``_summarization.py`` (:class:`SummarizationStrategy`, :data:`DEFAULT_SUMMARIZATION_PROMPT`),
  with the summaries it keeps so that they do not change, ``_summary_cache.py`` (the
  :class:`SummaryCache` protocol, :class:`InMemorySummaryCache`, :class:`SQLiteSummaryCache`,
  :class:`RedisSummaryCache`, and the key: :func:`summary_key`, :func:`summarizer_identity`),
  ``_provider.py`` (:class:`ProviderCompactionStrategy`: the provider's own compaction item in
  place of older groups, from a :class:`~contextledger.clients.ProviderCompactor`),
  ``_composition.py`` (:class:`PipelineStrategy`, :class:`TokenBudgetComposedStrategy`,
  :class:`ContextWindowCompactionStrategy`); both argument styles and the alias pairs are resolved
  in ``_arguments.py``;
- a provider's own compaction item as a boundary, ``_boundary.py``: while any strategy runs, the
  newest one (``MessageIndex.provider_compaction_ids``) and the user message before it are held
  (``MessageIndex.holding``, :attr:`MessageIndex.pinned_ids`), and what it covers goes first;
- running a strategy on a message list, ``_apply.py``: :func:`apply_compaction`,
  :func:`apply_compaction_sync`, :func:`compact_with_report` (with its :class:`CompactionResult`),
  and :func:`resolve_tokenizer`, the one rule for which tokenizer an index counts with;
- where a compacted conversation may start, ``_openings.py``: :func:`opened_by_user` moves a cut
  that would leave the assistant first (which Anthropic's API refuses) to a user message, or opens
  with a notice, :func:`set_aside_notice`, marked :data:`SET_ASIDE_PROPERTY` (:data:`SMALL_OPENING_TOKENS`:
  a turn's opening message this small is brought back instead);
- a strategy written as text (a name, ``KEY=VALUE`` parameters, a token budget), as the command
  line and the proxy take it: ``_spec.py`` (:func:`strategy_from_spec`, over the names in
  :data:`SPEC_STRATEGIES`);
- :class:`CharacterEstimatorTokenizer`, the default count (from :mod:`contextledger.tokenizers`).

A strategy of your own subclasses :class:`CompactionStrategy`, implements ``async _run(index)``,
and works on the index by id exactly as the built-in ones do (see :class:`MessageIndex`).
"""

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
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
from contextledger.compaction._openings import (
    opened_by_user,
)
from contextledger.compaction._provider import ProviderCompactionStrategy
from contextledger.compaction._spec import SPEC_STRATEGIES, strategy_from_spec
from contextledger.compaction._summarization import DEFAULT_SUMMARIZATION_PROMPT, SummarizationStrategy
from contextledger.compaction._summary_cache import (
    InMemorySummaryCache,
    RedisSummaryCache,
    SQLiteSummaryCache,
    SummaryCache,
)
from contextledger.compaction._table import (
    CompactionEvent,
    GroupKind,
    MessageGroup,
)
from contextledger.compaction._tool_results import (
    SelectiveToolCallCompactionStrategy,
    ToolResultCompactionStrategy,
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
    "SPEC_STRATEGIES",
    "CharacterEstimatorTokenizer",
    "CompactionEvent",
    "CompactionResult",
    "CompactionStrategy",
    "ContextWindowCompactionStrategy",
    "GroupKind",
    "InMemorySummaryCache",
    "MessageGroup",
    "MessageIndex",
    "PipelineStrategy",
    "ProviderCompactionStrategy",
    "RedisSummaryCache",
    "SQLiteSummaryCache",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationStrategy",
    "SummaryCache",
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
    "groups_exceed",
    "has_tool_calls",
    "messages_exceed",
    "never",
    "opened_by_user",
    "strategy_from_spec",
    "tokens_below",
    "tokens_exceed",
    "turns_exceed",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "GroupColumns": "contextledger.compaction._table",
        "SET_ASIDE_PROPERTY": "contextledger.compaction._openings",
        "SMALL_OPENING_TOKENS": "contextledger.compaction._openings",
        "format_tool_results": "contextledger.compaction._tool_results",
        "resolve_tokenizer": "contextledger.compaction._apply",
        "set_aside_notice": "contextledger.compaction._openings",
        "summarizer_identity": "contextledger.compaction._summary_cache",
        "summary_key": "contextledger.compaction._summary_cache",
        "with_reference": "contextledger.compaction._tool_results",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
