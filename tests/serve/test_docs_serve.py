"""The proxy's pages work as written: the command they show parses, and every Python block marked
``<!-- needs: proxy -->`` (in the README and the docs) and every curl line runs against a real proxy in
front of the fake upstream (only the address is changed to the test's).  Each Python block runs alone,
in a namespace of its own, as a reader pastes it."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.doc_blocks import ROOT, Block, blocks, python_blocks
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

from contextledger.cli import _parser
from contextledger.serve._command import config_from_args

KEY = "sk-docs-reader-1"
PROXY_PAGE = ROOT / "docs" / "guides" / "proxy.md"
SESSIONS_PAGE = ROOT / "docs" / "guides" / "sessions.md"
NEEDS_PROXY = python_blocks("proxy")


def shell_blocks(page: Path) -> list[str]:
    return [block.code for block in blocks(page) if block.language == "sh"]


@pytest.fixture(scope="module")
def docs_proxy(start_proxy_module: StartProxy, fake_upstream: FakeUpstream) -> Iterator[Proxy]:
    """One proxy for the module, serving chat completions, Responses and the Messages API."""
    with start_proxy_module("--anthropic-upstream", fake_upstream.base_url.removesuffix("/v1")) as proxy:
        yield proxy


def test_the_command_shown_parses() -> None:
    command = shlex.split(shell_blocks(PROXY_PAGE)[0])
    assert command[:2] == ["contextledger", "serve"]
    config = config_from_args(_parser().parse_args(command[1:]))
    assert config.upstream == "https://api.openai.com/v1"
    assert config.strategy.build() is not None


def test_each_block_that_needs_a_proxy_says_so() -> None:
    pages = {str(block.path.relative_to(ROOT)) for block in NEEDS_PROXY}
    assert {"README.md", "docs/guides/proxy.md", "docs/guides/sessions.md"} <= pages
    # A block that talks to the proxy's address and is not marked would run without one.
    unmarked = [block.label for block in python_blocks(None) if "127.0.0.1:8080" in block.code]
    assert unmarked == [], f"mark these blocks <!-- needs: proxy -->: {unmarked}"


@pytest.mark.parametrize("block", NEEDS_PROXY, ids=[block.label for block in NEEDS_PROXY])
def test_each_block_runs_alone_against_a_proxy(
    block: Block, docs_proxy: Proxy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    exec(compile(block.code.replace("http://127.0.0.1:8080", docs_proxy.root), block.label, "exec"), namespace)
    assert capsys.readouterr().out.strip(), f"{block.label} printed nothing"


def test_the_sessions_example_keeps_the_facts(
    start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    [sessions] = [block for block in NEEDS_PROXY if block.path == SESSIONS_PAGE]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with start_proxy() as proxy:
        exec(compile(sessions.code.replace("http://127.0.0.1:8080", proxy.root), sessions.label, "exec"), {})
        assert proxy.facts("ticket-42", KEY) == {"module": "Billing", "database": "SQL Server 2022"}
    assert capsys.readouterr().out == "echo: Which database do we use?\n"


def run_shell_block(page: Path, calling: str, root: str) -> subprocess.CompletedProcess[str]:
    """The page's first shell block that calls the path ``calling``, run against the proxy at ``root``."""
    block = next(block for block in shell_blocks(page) if f"http://127.0.0.1:8080{calling}" in block)
    return subprocess.run(
        ["bash", "-euc", block.replace("http://127.0.0.1:8080", root)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "PATH": "/usr/bin:/bin"},
        check=True,
    )


def test_the_responses_curl_line_runs(docs_proxy: Proxy) -> None:
    done = run_shell_block(PROXY_PAGE, "/v1/responses", docs_proxy.root)
    assert done.stdout.strip().lower() == "x-contextledger-compaction: skipped; text input"


def test_the_messages_curl_line_runs(docs_proxy: Proxy) -> None:
    done = run_shell_block(PROXY_PAGE, "/v1/messages", docs_proxy.root)
    assert re.search(r'"type":\s*"message"', done.stdout), done.stdout


def test_the_session_curl_lines_run(start_proxy: StartProxy) -> None:
    with start_proxy() as proxy:
        done = run_shell_block(SESSIONS_PAGE, "/v1/contextledger/sessions", proxy.root)
        assert proxy.facts("ticket-7", KEY) == {"database": "PostgreSQL"}  # after forget module
    assert '"forgotten":[{"key":"module","value":"Reporting"}]' in done.stdout
