"""The README's serve section works as written: its command parses, its Python client and its
curl lines run against a real proxy (only the address is changed to the test's)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.serve.conftest import StartProxy

from contextledger.cli import _parser
from contextledger.serve._command import config_from_args

README = Path(__file__).resolve().parents[2] / "README.md"
KEY = "sk-readme-reader-1"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Any client, any language: `contextledger serve`")
    return text[start : text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), flags=re.DOTALL)


def test_the_command_shown_parses() -> None:
    command = shlex.split(blocks("sh")[0])
    assert command[:2] == ["contextledger", "serve"]
    config = config_from_args(_parser().parse_args(command[1:]))
    assert config.upstream == "https://api.openai.com/v1"
    assert config.strategy.build() is not None


def test_the_python_client_example_runs(
    start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Messages API example is driven by tests/serve/test_anthropic_sdk.py, the Postgres one by test_readme.py.
    sessions = blocks("py")[0]
    [responses] = [block for block in blocks("py") if "client.responses.create" in block]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with start_proxy() as proxy:
        namespace: dict[str, Any] = {}
        exec(compile(sessions.replace("http://127.0.0.1:8080/v1", proxy.base_url), "README.md", "exec"), namespace)
        assert proxy.facts("ticket-42", KEY) == {"module": "Billing", "database": "SQL Server 2022"}
        # The Responses example goes on with the first one's key, as a reader's script would.
        exec(compile(responses.replace("http://127.0.0.1:8080/v1", proxy.base_url), "README.md", "exec"), namespace)
        first, *answer = namespace["items"]
        assert first == {"role": "user", "content": "Summarise ticket 42"}
        assert [item["type"] for item in answer] == ["reasoning", "message"]
    assert capsys.readouterr().out == "echo: Which database do we use?\n"


def run_shell_block(calling: str, root: str) -> subprocess.CompletedProcess[str]:
    """The section's first shell block that calls the path ``calling``, run against the proxy at ``root``."""
    block = next(block for block in blocks("sh") if f"http://127.0.0.1:8080{calling}" in block)
    return subprocess.run(
        ["bash", "-euc", block.replace("http://127.0.0.1:8080", root)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"OPENAI_API_KEY": KEY, "PATH": "/usr/bin:/bin"},
        check=True,
    )


def test_the_responses_curl_line_runs(start_proxy: StartProxy) -> None:
    with start_proxy() as proxy:
        done = run_shell_block("/v1/responses", proxy.root)
    assert done.stdout.strip().lower() == "x-contextledger-compaction: skipped; text input"


def test_the_curl_lines_run(start_proxy: StartProxy) -> None:
    with start_proxy() as proxy:
        done = run_shell_block("/v1/contextledger/sessions", proxy.root)
        assert proxy.facts("ticket-7", KEY) == {"database": "PostgreSQL"}  # after forget module
    assert '"forgotten":[{"key":"module","value":"Reporting"}]' in done.stdout
