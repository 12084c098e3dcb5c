"""A small agent runtime: sessions, context providers around each model call, tools, and compaction.

>>> from contextledger.agents import Agent, CompactionProvider, FactsProvider
"""

from contextledger.agents._agent import Agent
from contextledger.agents._compaction import CompactionProvider, ReducedHistoryProvider
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
from contextledger.agents._response import AgentResponse, ModelCall, sum_usage
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool, tool

__all__ = [
    "Agent",
    "AgentResponse",
    "AgentView",
    "CompactionProvider",
    "ContextProvider",
    "FactsProvider",
    "FunctionTool",
    "MessageSource",
    "ModelCall",
    "ReducedHistoryProvider",
    "RequestMessages",
    "RunContext",
    "Session",
    "SourceKind",
    "run_with_facts",
    "sum_usage",
    "tool",
    "use_context_providers",
]
