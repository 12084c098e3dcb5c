"""The README's Python example is run as written, so the first thing a user copies works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_python_blocks_run(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "the README should show Python usage"
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    # The compaction example must actually have compacted something.
    request, messages = namespace["request"], namespace["messages"]
    assert isinstance(request, list)
    assert isinstance(messages, list)
    assert 0 < len(request) < len(messages)
