"""Build-time pages of the docs site: the reference from each package's ``__all__``, and the benchmark
tables from the benchmarks' own JSON output (docs/benchmarks/*.json), so neither is written by hand."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"
DATA = ROOT / "docs" / "benchmarks"

_REFERENCE = re.compile(r"<!-- reference: (?P<module>[\w.]+) -->")
_BENCHMARK = re.compile(r"<!-- benchmark: (?P<table>[\w-]+) -->")
# Docstrings are written with Sphinx roles (:class:`~a.b.C`); the site shows the name as code.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj|const):<code>~?(?:[\w.]*\.)?([^<]+)</code>")


def exported(module: str) -> list[str]:
    """The names ``module`` lists in its ``__all__``, read from its source without importing it
    (so the reference of an integration builds without its extra installed)."""
    parts = module.split(".")
    package = SOURCE.joinpath(*parts)
    path = package / "__init__.py" if package.is_dir() else package.with_suffix(".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets) and node.value:
            names = ast.literal_eval(node.value)
            return [str(name) for name in names if not str(name).startswith("__")]
    raise ValueError(f"{module} has no __all__ to document")


def reference(module: str) -> str:
    members = "\n".join(f"        - {name}" for name in exported(module))
    return f"::: {module}\n    options:\n      show_root_heading: false\n      members:\n{members}\n"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    rule = "|" + "|".join("---:" if side == "r" else "---" for side in align) + "|"
    return "\n".join([_row(header), rule, *map(_row, rows)])


def benchmark(table: str) -> str:
    run = _load("run")
    if table == "run-cold":
        rows = [
            [
                f"`{entry['strategy']}`",
                f"{entry['messages']:,}",
                f"{entry['ours_ms']:.1f}",
                f"{entry['maf_ms']:,.0f}" if "maf_ms" in entry else "",
                f"{entry['ratio']:,.0f}×" if "ratio" in entry else "",
                f"{entry['floor_ratio']:.1f}×",
            ]
            for entry in run["cold"]
        ]
        header = ["strategy", "messages", "contextledger ms", "Agent Framework ms", "ratio", "/floor"]
        return _table(header, rows, "lrrrrr")
    if table == "run-session":
        rows = [
            [
                f"`{entry['strategy']}`",
                f"{entry['turns']:,}",
                f"{entry['early_ms']:.3f}",
                f"{entry['late_ms']:.3f}",
                f"{entry['maf_early_ms']:.1f}" if "maf_early_ms" in entry else "",
                f"{entry['maf_late_ms']:.1f}" if "maf_late_ms" in entry else "",
            ]
            for entry in run["session"]
        ]
        header = ["strategy", "turns", "ms a turn, turns 100–199", "last 100", "Agent Framework, 100–199", "last 100"]
        return _table(header, rows, "lrrrrr")
    if table == "run-shapes":
        rows = [
            [
                f"`{entry['shape']}`",
                f"{entry['messages']:,}",
                f"{entry['index_ms']:.1f}",
                f"{entry['index_floor_ratio']:.1f}×",
            ]
            for entry in run.get("shapes", [])
        ]
        return _table(["shape", "messages", "index + projection ms", "/floor"], rows, "lrrr")
    if table.startswith("cache-"):
        return _cache_table(table.removeprefix("cache-"))
    raise ValueError(f"no benchmark table named {table!r}")


def _cache_table(workload: str) -> str:
    """One workload of ``benchmarks/cache.py --json``: each policy's share of the full history's tokens
    and cost, and the share of its input read from the cache, under each price profile."""
    data = _load("cache")
    prefix = {"tools": "tool session", "prompt": "10k-token prompt"}[workload]
    [found] = [entry for entry in data["workloads"] if entry["name"].startswith(prefix)]
    profiles = data["profiles"]
    header = ["policy", "mode", "sent", *(f"cost, {p}" for p in profiles), *(f"cached, {p}" for p in profiles)]
    rows = [
        [
            entry["policy"] + (" (exact, an opt-out)" if entry["exact"] else ""),
            entry["mode"],
            f"{entry['sent']:.2f}",
            *(f"{entry['cost'][p]:.2f}" for p in profiles),
            *(f"{entry['cached'][p]:.0%}" for p in profiles),
        ]
        for entry in found["policies"]
    ]
    return _table(header, rows, "llr" + "r" * 2 * len(profiles))


_NEEDS_PROXY = "<!-- needs: proxy -->\n"
_PROXY_NOTE = (
    '!!! note "Needs a running proxy"\n'
    "    Start one first with `contextledger serve --upstream URL` (it listens on 127.0.0.1:8080).\n\n"
)


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = markdown.replace(_NEEDS_PROXY, _PROXY_NOTE + _NEEDS_PROXY)
    if markdown.strip() == "<!-- include: CHANGELOG.md -->":  # its links start at the repository's root
        markdown = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").replace("](docs/", "](")
    markdown = _REFERENCE.sub(lambda match: reference(match["module"]), markdown)
    return _BENCHMARK.sub(lambda match: benchmark(match["table"]), markdown)


# A docstring's citation of a design decision (design.md#units) becomes a link to that section.
_DESIGN = re.compile(r"(?<![/\w\"'])design\.md#([\w-]+)")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    html = _ROLE.sub(r"<code>\1</code>", html)
    if page.file.src_uri.startswith("reference/"):
        design = "../" * page.url.count("/") + "design/"
        html = _DESIGN.sub(lambda match: f'<a href="{design}#{match[1]}">{match[0]}</a>', html)
    return html


# The README's figures ----------------------------------------------------------------------------

README = ROOT / "README.md"
FIGURES_BEGIN = "<!-- figures from docs/benchmarks/run.json: python docs/_hooks/build.py writes them -->"
FIGURES_END = "<!-- end of figures -->"
_SHOWN = ("truncation_tokens", "sliding_window", "tool_result_collapse", "context_window")


def readme_figures() -> str:
    """The README's speed table, from the benchmark run the docs show."""
    run = _load("run")
    compared = [entry for entry in run["cold"] if "maf_ms" in entry and entry["strategy"] in _SHOWN]
    rows = [
        [
            f"`{entry['strategy']}`",
            f"{entry['messages']:,}",
            f"{entry['ours_ms']:.1f}",
            f"{entry['maf_ms']:,.0f}",
            f"{entry['ratio']:,.0f}×",
        ]
        for entry in compared
    ]
    table = _table(["cold compaction", "messages", "contextledger ms", "Agent Framework ms", "ratio"], rows, "lrrrr")
    session = [entry for entry in run["session"] if "maf_late_ms" in entry]
    lines = [FIGURES_BEGIN, table]
    for entry in session[:1]:
        lines.append(
            f"\nIn a {entry['turns']:,}-turn session, `{entry['strategy']}` costs {entry['late_ms']:.3f} ms a turn over"
            f" the last 100 turns, against {entry['maf_late_ms']:.1f} ms in Agent Framework."
        )
    return "\n".join([*lines, FIGURES_END])


def write_readme_figures() -> bool:
    """Replace the README's figures block with the one the JSON gives; whether it changed."""
    text = README.read_text(encoding="utf-8")
    start, end = text.index(FIGURES_BEGIN), text.index(FIGURES_END) + len(FIGURES_END)
    updated = text[:start] + readme_figures() + text[end:]
    README.write_text(updated, encoding="utf-8")
    return updated != text


if __name__ == "__main__":
    print("README.md figures " + ("rewritten" if write_readme_figures() else "already current"))
