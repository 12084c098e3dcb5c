"""Every Python block of the README runs on its own, as a reader pastes it into a fresh interpreter.

Each block runs in a namespace of its own, so a block that leans on one before it fails here.  A
block whose optional extra is not installed is skipped with the extra named (under ``CI=true``
it runs, and fails if the extra is missing).  A block may be left out only by a marker the README
shows right above it, ``<!-- not run alone: REASON -->``, and the reason must be given.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"(?:<!-- not run alone:(?P<reason>[^>]*)-->\n)?```(?:python|py)\n(?P<code>.*?)```", re.DOTALL)
# The optional packages a block may import, and the extra that installs each.
_EXTRAS = {
    "agent_framework": "maf",
    "agents": "openai-agents",
    "httpx": "serve",
    "langchain": "langchain",
    "langchain_core": "langchain",
    "langgraph": "langchain",
    "openai": "openai",
    "opentelemetry": "otel",
    "redis": "redis",
    "tiktoken": "exact",
}


def _heading(position: int) -> str:
    headings = re.findall(r"^#+ (.+)$", README[:position], flags=re.MULTILINE)
    return headings[-1] if headings else "top"


BLOCKS = [(match, _heading(match.start())) for match in _BLOCK.finditer(README)]


def _missing_extras(code: str) -> list[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return sorted({_EXTRAS[name] for name in modules if name in _EXTRAS and importlib.util.find_spec(name) is None})


def test_the_readme_shows_python_and_leaves_out_only_what_it_says_why() -> None:
    assert len(BLOCKS) >= 5
    for match, heading in BLOCKS:
        if match["reason"] is not None:
            assert match["reason"].strip(), f"the block under {heading!r} is left out without a reason"
    # Only the proxy's client examples (they need a server and a key: the tests they name drive
    # the same calls against a real proxy) are left out, one per endpoint: chat completions, the
    # Responses API and the Messages API.
    left_out = [heading for match, heading in BLOCKS if match["reason"]]
    assert all("serve" in heading or "/v1/" in heading for heading in left_out), left_out
    assert len(left_out) <= 3, left_out


RUN = [(number, match["code"], heading) for number, (match, heading) in enumerate(BLOCKS, 1) if not match["reason"]]


@pytest.mark.parametrize(("code"), [code for _, code, _ in RUN], ids=[f"{n}-{heading}" for n, _, heading in RUN])
def test_each_python_block_runs_alone(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = _missing_extras(code)
    if missing and os.environ.get("CI") != "true":
        pytest.skip(f"needs pip install 'contextledger[{','.join(missing)}]'")
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(code, "README.md", "exec"), namespace)
    if "request" in namespace and "messages" in namespace:  # the compaction example compacted something
        request, messages = namespace["request"], namespace["messages"]
        assert isinstance(request, list)
        assert isinstance(messages, list)
        assert 0 < len(request) < len(messages)
