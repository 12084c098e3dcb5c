"""The documentation works as written: the site builds with ``mkdocs build --strict`` and every
Python block of the README and of the docs runs alone, printing what its comment says.

A block whose optional extra is not installed is skipped with the extra named (under ``CI=true`` it
runs, and fails if the extra is missing).  Blocks that need a running proxy are run by
tests/serve/test_docs_serve.py.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import contextledger
from contextledger.cli import _parser
from tests.doc_blocks import ROOT, Block, all_blocks, python_blocks

# The optional packages a block may import, and the extra that installs each.
_EXTRAS = {
    "agent_framework": "maf",
    "agents": "openai-agents",
    "anthropic": "serve",
    "httpx": "serve",
    "langchain": "langchain",
    "langchain_core": "langchain",
    "langgraph": "langchain",
    "openai": "openai",
    "opentelemetry": "otel",
    "psycopg": "postgres",
    "redis": "redis",
    "tiktoken": "exact",
}
# A print whose line ends with a comment: the comment is what it prints.
_PRINTED = re.compile(r"^print\(.*\)\s+# (?P<shown>.+)$", re.MULTILINE)


def _missing_extras(code: str) -> list[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return sorted({_EXTRAS[name] for name in modules if name in _EXTRAS and importlib.util.find_spec(name) is None})


RUN = python_blocks(None)


def test_the_docs_show_python_and_each_page_a_block_runs() -> None:
    assert len(RUN) >= 15
    shown = {str(block.path.relative_to(ROOT)) for block in RUN}
    assert {"README.md", "docs/getting-started.md", "docs/guides/compact-messages.md"} <= shown
    # Every block names its language, so none is run or left out by accident.
    unnamed = [block.label for block in all_blocks() if not block.language]
    assert unnamed == [], f"name the language of these blocks (python, console, text, json): {unnamed}"


@pytest.mark.parametrize("block", RUN, ids=[block.label for block in RUN])
def test_each_python_block_runs_alone(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = _missing_extras(block.code)
    if missing and os.environ.get("CI") != "true":
        pytest.skip(f"needs pip install 'contextledger[{','.join(missing)}]'")
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.code, block.label, "exec"), namespace)
    shown = _PRINTED.findall(block.code)
    if len(shown) == 1 and block.code.count("print(") == 1:
        assert printed.getvalue().strip() == shown[0].strip(), f"{block.label} prints something else than it says"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None or importlib.util.find_spec("mkdocstrings") is None:
        message = "needs pip install 'contextledger[docs]'"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("design", "benchmarks", "reference/compaction", "guides/proxy", "changelog"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def _figures_module() -> object:
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "_hooks" / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_a_front_page_whose_figures_come_from_the_benchmarks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    build: object = _figures_module()
    expected = build.readme_figures()  # type: ignore[attr-defined]
    assert expected in readme, "the README's figures are not docs/benchmarks/run.json's: python docs/_hooks/build.py"
    assert "Agent Framework" in expected
    assert "| `" in expected, "docs/benchmarks/run.json holds no run beside Agent Framework"
    # Every link into the docs leads to a page that exists.
    for target in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", readme):
        assert (ROOT / target).is_file(), target


def test_the_changelog_names_the_current_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{contextledger.__version__}]" in changelog


def _commands(block: Block) -> list[list[str]]:
    """The ``contextledger`` command lines of a shell block (a prompt's ``$ `` and a trailing comment left out)."""
    found = []
    for written in block.code.replace("\\\n", " ").splitlines():
        line = written.removeprefix("$ ").strip()
        if line.startswith("contextledger "):
            found.append(shlex.split(line.split("  #")[0]))
    return found


COMMANDS = [
    (block, command) for block in all_blocks() if block.language in {"console", "sh"} for command in _commands(block)
]


@pytest.mark.parametrize(("block", "command"), COMMANDS, ids=[f"{block.label}-{cmd[1]}" for block, cmd in COMMANDS])
def test_each_command_line_shown_parses(block: Block, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A command a page shows is one the command line takes, flags and values as written."""
    try:
        _parser().parse_args(command[1:])
    except SystemExit:
        pytest.fail(f"{block.label}: {shlex.join(command)} does not parse: {capsys.readouterr().err}")
