"""Adapters that put contextledger inside other agent frameworks.

Each adapter lives in its own module and is the only place that imports its
framework, so ``import contextledger`` never pulls one in.  Import the module you
need, for example ``from contextledger.integrations import maf`` (the ``maf``
extra, Microsoft Agent Framework for Python).
"""

__all__: list[str] = []
