"""A small agent runtime: sessions, context providers around each model call, tools, and compaction.

>>> from contextledger.agents import Agent, CompactionProvider

Where things live (every name is imported from here, ``contextledger.agents``):

- the agent, ``_agent.py``: :class:`Agent`, whose run is a transaction (nothing it produces is
  visible until the model has answered);
- what a run returns, ``_response.py``: :class:`AgentResponse`, one :class:`ModelCall` per call
  made, and :func:`sum_usage` over them;
- a conversation, ``_session.py``: :class:`Session`, its identity and its providers' state; the
  session's own copy of its history is ``_history.py``;
- context providers, ``_context.py``: the :class:`ContextProvider` protocol, the
  :class:`RunContext` and :class:`AgentView` a provider sees, the :class:`RequestMessages` it
  shapes, each message's :class:`MessageSource` and :class:`SourceKind`, and
  :func:`use_context_providers` to run providers around a call of your own;
- compaction around an agent, ``_compaction.py``: :class:`CompactionProvider` (the request view
  and the retained history) and :class:`ReducedHistoryProvider` (a history reduced as it is
  stored);
- tools, ``_tools.py``: :func:`tool` turns a plain function into a :class:`FunctionTool`.
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
from contextledger.agents._response import AgentResponse, ModelCall, sum_usage
from contextledger.agents._session import Session
from contextledger.agents._tools import FunctionTool, tool

__all__ = [
    "Agent",
    "AgentResponse",
    "AgentView",
    "CompactionProvider",
    "ContextProvider",
    "FunctionTool",
    "MessageSource",
    "ModelCall",
    "ReducedHistoryProvider",
    "RequestMessages",
    "RunContext",
    "Session",
    "SourceKind",
    "sum_usage",
    "tool",
    "use_context_providers",
]
