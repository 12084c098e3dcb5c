"""contextledger inside LangChain v1 agents and LangGraph graphs (the ``langchain`` extra).

- **Messages** convert both ways without loss (:func:`from_langchain`, :func:`to_langchain`, one
  message at a time :func:`from_langchain_message`, :func:`to_langchain_message`):
  ``SystemMessage``, ``HumanMessage``, ``AIMessage`` with ``tool_calls`` (parallel ones too),
  ``ToolMessage``, content blocks, ids, names and metadata.  What contextledger has no field for
  (``additional_kwargs``, ``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool
  message's ``status`` and ``artifact``...) travels in the reserved property
  :data:`LANGCHAIN_PROPERTY`; what LangChain has no field for (contextledger's
  ``additional_properties``, such as the summary mark) travels in ``response_metadata`` under
  :data:`METADATA_KEY`, which LangChain never sends to a model.
- **Compaction** where LangChain users put ``trim_messages``: :func:`compact_langchain` compacts a
  LangChain message list once; :func:`compaction_runnable` is a
  runnable from a message list to the list a strategy would send; :class:`CompactionMiddleware`
  compacts each model call of a ``create_agent`` agent; :func:`pre_model_hook` is a LangGraph
  pre-model hook (``create_react_agent(pre_model_hook=...)`` or a node of a hand-built graph).
  All three change only what the model sees: the graph state keeps the full history, and the
  messages kept are the caller's own objects.
- **Controlled facts**: :class:`FactsMiddleware` puts the facts block into the system message of
  each model call (never into the state), takes the turn's ticket from the run's new user
  messages before the agent starts, extracts after the agent finished successfully, and forgets
  from the store and from the graph's stored state.

LangChain v1's ``before_model`` hook can only update the state, so the request view is made in
``wrap_model_call``, the hook that changes what one model call sends; ``before_model`` would
rewrite the history itself.

Where things live (every name is imported from here): ``_messages.py`` (conversion),
``_compaction.py`` (the runnable, the middleware, the LangGraph hook), ``_facts.py``
(:class:`FactsMiddleware`).
"""

from contextledger._extras import require_extra

# Checked first, so a missing extra says what to install before any submodule imports it.
require_extra("langchain_core", extra="langchain", feature="contextledger.integrations.langchain")
require_extra("langgraph", extra="langchain", feature="contextledger.integrations.langchain")
require_extra("langchain.agents", extra="langchain", feature="contextledger.integrations.langchain")

from contextledger.integrations.langchain._compaction import (  # noqa: E402
    CompactionMiddleware,
    compact_langchain,
    compaction_runnable,
    pre_model_hook,
)
from contextledger.integrations.langchain._facts import FactsMiddleware  # noqa: E402
from contextledger.integrations.langchain._messages import (  # noqa: E402
    LANGCHAIN_PROPERTY,
    METADATA_KEY,
    from_langchain,
    from_langchain_message,
    to_langchain,
    to_langchain_message,
)

__all__ = [
    "LANGCHAIN_PROPERTY",
    "METADATA_KEY",
    "CompactionMiddleware",
    "FactsMiddleware",
    "compact_langchain",
    "compaction_runnable",
    "from_langchain",
    "from_langchain_message",
    "pre_model_hook",
    "to_langchain",
    "to_langchain_message",
]
