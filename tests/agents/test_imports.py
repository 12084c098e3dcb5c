"""The agents package is layered: no module of it imports, directly or through others, itself.

The walk reads every import statement of the modules' source: at module level, inside a
function, and under ``if TYPE_CHECKING:`` too, since a type-only import back up the layers is
the same tangle for a reader.  Bottom to top: ``_session``, ``_response`` and ``_tools``, then
``_context`` (what providers see, :class:`AgentView` included), ``_history`` (a session's copy of
its history), ``_view`` (the request view) and ``_retained`` (the retained history), then
``_compaction``, then ``_agent``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import contextledger.agents

PACKAGE = "contextledger.agents"
FOLDER = Path(contextledger.agents.__file__).parent


def imports_of(tree: ast.AST) -> set[str]:
    """Every module (and ``module.name``) an import statement anywhere in ``tree`` names."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of the package (``__init__`` aside) -> the package's modules it imports."""
    modules = {f"{PACKAGE}.{path.stem}": path for path in FOLDER.glob("*.py") if path.stem != "__init__"}
    return {
        name: {target for target in imports_of(ast.parse(path.read_text(encoding="utf-8"))) if target in modules}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := walk(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_the_agents_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert f"{PACKAGE}._agent" in graph
    assert f"{PACKAGE}._context" in graph[f"{PACKAGE}._agent"]  # the walk does see imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_walk_finds_a_cycle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_under_type_checking_and_in_functions_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from x import only_for_types\n"
        "def later():\n    from y import used\n"
    )
    found = imports_of(ast.parse(source))
    assert "x.only_for_types" in found
    assert "y.used" in found
