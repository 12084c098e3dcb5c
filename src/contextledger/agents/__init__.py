"""A small agent runtime: sessions, context providers around each model call, tools, and compaction.

>>> from contextledger.agents import Agent, CompactionProvider, FactsProvider

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.agents``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- a conversation and its state: ``_session.py`` (:class:`Session`); what a run returns:
  ``_response.py`` (:class:`AgentResponse`, :class:`ModelCall`, :func:`sum_usage`); tools:
  ``_tools.py`` (:func:`tool`, :class:`FunctionTool`);
- what providers see and change around a run: ``_context.py`` (:class:`ContextProvider`,
  :class:`RunContext`, :class:`RequestMessages`, :class:`MessageSource`, :data:`SourceKind`,
  :class:`AgentView`, :func:`use_context_providers`);
- controlled facts around an agent: ``_facts.py`` (:class:`FactsProvider`, :func:`run_with_facts`),
  over the one facts turn of :mod:`contextledger.facts`;
- compaction around an agent: ``_compaction.py`` (:class:`CompactionProvider`), its request view
  kept per session in ``_view.py``, the model's own controls (``agent_tools=True``: references,
  ``recall_context``, ``compact_context``, named by :data:`RECALL_TOOL` and :data:`COMPACT_TOOL`
  and described by :data:`RECALL_DESCRIPTION` and :data:`COMPACT_DESCRIPTION`, a recall at most
  :data:`RECALL_LIMIT` characters; :class:`RecallableCompaction` for the adapters) in
  ``_recall.py``, and the retained history in ``_retained.py`` (:class:`HistoryReducer`, which the
  proxy uses too, and :class:`ReducedHistoryProvider`);
- the agent and its run: ``_agent.py`` (:class:`Agent`), with the session's copy of its history
  in ``_history.py``; every turn is stored through :func:`contextledger.history.write_turn`.
"""

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
from contextledger.agents._agent import Agent
from contextledger.agents._compaction import CompactionProvider
from contextledger.agents._context import (
    AgentView,
    ContextProvider,
    MessageSource,
    RequestMessages,
    RunContext,
    SourceKind,
    use_context_providers,
)
from contextledger.agents._facts import FactsProvider, run_with_facts
from contextledger.agents._recall import (
    COMPACT_DESCRIPTION,
    COMPACT_TOOL,
    RECALL_DESCRIPTION,
    RECALL_LIMIT,
    RECALL_TOOL,
    RecallableCompaction,
)
from contextledger.agents._response import (
    AgentResponse,
    ModelCall,
)
from contextledger.agents._retained import HistoryReducer, ReducedHistoryProvider
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool, tool

__all__ = [
    "COMPACT_DESCRIPTION",
    "COMPACT_TOOL",
    "RECALL_DESCRIPTION",
    "RECALL_LIMIT",
    "RECALL_TOOL",
    "Agent",
    "AgentResponse",
    "AgentView",
    "CompactionProvider",
    "ContextProvider",
    "FactsProvider",
    "FunctionTool",
    "HistoryReducer",
    "MessageSource",
    "ModelCall",
    "RecallableCompaction",
    "ReducedHistoryProvider",
    "RequestMessages",
    "RunContext",
    "Session",
    "SourceKind",
    "run_with_facts",
    "tool",
    "use_context_providers",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "sum_usage": "contextledger.agents._response",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
