"""Adapters that put contextledger inside other agent frameworks.

Each adapter is a package of its own and the only place that imports its framework,
so ``import contextledger`` never pulls one in.  Import the one you need, for example
``from contextledger.integrations import maf`` (the ``maf`` extra, Microsoft Agent
Framework for Python).

- ``maf/``: Microsoft Agent Framework;
- ``langchain/``: LangChain v1 agents and LangGraph graphs (the ``langchain`` extra);
- ``openai_agents/``: the OpenAI Agents SDK (the ``openai-agents`` extra);
- ``_shared.py``: the kit they share (plain data from frozen metadata, running a coroutine
  from a synchronous hook, the facts side of an adapter over
  :class:`~contextledger.facts.FactsHost`, a framework's history as a ``forget`` target).

Each adapter package is laid out alike: ``_messages.py`` (or ``_items.py``) converts, then one
module per feature (compaction, history or sessions, ``_facts.py``).
"""

__all__: list[str] = []
