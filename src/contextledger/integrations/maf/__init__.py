"""contextledger inside Microsoft Agent Framework for Python (``agent_framework``).

An application that already runs MAF agents keeps its agents, clients and
sessions and swaps in contextledger where it wants its guarantees:

- **Messages** convert both ways without loss for text, reasoning, function
  calls and results, hosted tool calls and outputs (MCP, code interpreter,
  search, image generation, shell, computer use), approvals, ids, author names
  and additional properties (:func:`from_maf_message`, :func:`to_maf_message`, and
  :func:`from_maf_messages`, :func:`to_maf_messages` for lists).  What contextledger has no
  field for travels in the reserved properties :data:`MAF_CONTENTS_PROPERTY` and
  :data:`MAF_EXTRA_PROPERTY` and comes back on the return trip.
- **Compaction strategies** carry the names and arguments of MAF's own
  (``TruncationStrategy(max_n=..., compact_to=..., tokenizer=...)``,
  ``SlidingWindowStrategy(keep_last_groups=20)``, :class:`ToolResultCompactionStrategy`,
  :class:`SelectiveToolCallCompactionStrategy`, :class:`SummarizationStrategy`,
  :class:`PipelineStrategy`, :class:`TokenBudgetComposedStrategy`,
  :class:`ContextWindowCompactionStrategy`), so a sample written for
  ``agent_framework._compaction`` runs by changing its import; :class:`AgentFrameworkStrategy`
  wraps any other contextledger strategy the same way, and :class:`AgentFrameworkTokenizer` lends
  MAF a contextledger tokenizer.  They keep MAF's rule for targets (met exactly on every call,
  which MAF's own tests pin), not the prefix-stable grid contextledger's strategies use.  Each is an async
  callable over MAF's message list, as MAF expects everywhere it takes a
  strategy: ``Agent(compaction_strategy=...)``, a chat client's
  ``compaction_strategy``, and MAF's own ``CompactionProvider``.  The grouping,
  the exclusions and the summaries are contextledger's, so the projection MAF
  sends is exactly what :func:`contextledger.compaction.apply_compaction`
  returns for the same messages.  Summaries they insert carry a message id and
  MAF's trace links; :class:`CharacterEstimatorTokenizer` also answers MAF's
  ``count_tokens``; :func:`apply_compaction` also runs a strategy written
  against MAF's own API.
- **Models**: :class:`ContextLedgerChatClient` runs a MAF agent on any contextledger chat
  client (the local model, the offline model, an OpenAI-compatible endpoint), and
  :class:`AgentFrameworkChatClient` lends a MAF client to contextledger (a summariser).
- **History**: any :class:`contextledger.history.HistoryProvider` (in memory,
  SQLite, Redis) behind MAF's history-provider interface
  (:class:`ContextLedgerHistoryProvider`): each run stored as one turn, exactly once, under
  the turn id in ``SessionContext.metadata[TURN_ID_KEY]`` or a generated one.
- **The model's own compaction controls**: :class:`AgentToolsContextProvider` compacts every model
  call of a run and offers the model ``recall_context(ref, query?)`` and ``compact_context(note?)`` (MAF
  lets a context provider add tools and chat middleware to a run).
- **Controlled facts**: :class:`FactsContextProvider` puts the facts block into the
  instructions before each run and extracts from the run's external user messages after a
  successful one; its ``forget`` also rewrites the MAF histories given.

The package is the ``maf`` extra: ``pip install 'contextledger[maf]'``.
"""

from contextledger.exceptions import MissingExtraError

try:  # checked first, so a missing extra says what to install before any submodule imports it
    import agent_framework  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError(feature="contextledger.integrations.maf", extra="maf", module="agent_framework") from error

from contextledger.integrations.maf._agent_tools import AgentToolsContextProvider
from contextledger.integrations.maf._clients import (
    AgentFrameworkChatClient,
    AgentFrameworkTokenizer,
    CharacterEstimatorTokenizer,
    ContextLedgerChatClient,
)
from contextledger.integrations.maf._compaction import (
    AgentFrameworkStrategy,
    ContextWindowCompactionStrategy,
    PipelineStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
)
from contextledger.integrations.maf._facts import FactsContextProvider
from contextledger.integrations.maf._history import TURN_ID_KEY, ContextLedgerHistoryProvider
from contextledger.integrations.maf._messages import (
    MAF_CONTENTS_PROPERTY,
    MAF_EXTRA_PROPERTY,
    from_maf_message,
    from_maf_messages,
    to_maf_message,
    to_maf_messages,
)

__all__ = [
    "MAF_CONTENTS_PROPERTY",
    "MAF_EXTRA_PROPERTY",
    "TURN_ID_KEY",
    "AgentFrameworkChatClient",
    "AgentFrameworkStrategy",
    "AgentFrameworkTokenizer",
    "AgentToolsContextProvider",
    "CharacterEstimatorTokenizer",
    "ContextLedgerChatClient",
    "ContextLedgerHistoryProvider",
    "ContextWindowCompactionStrategy",
    "FactsContextProvider",
    "PipelineStrategy",
    "SelectiveToolCallCompactionStrategy",
    "SlidingWindowStrategy",
    "SummarizationStrategy",
    "TokenBudgetComposedStrategy",
    "ToolResultCompactionStrategy",
    "TruncationStrategy",
    "apply_compaction",
    "from_maf_message",
    "from_maf_messages",
    "to_maf_message",
    "to_maf_messages",
]
