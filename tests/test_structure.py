"""The shape of ``src/contextledger``, checked by reading the source: no import runs, nothing to install.

Four rules keep the package something a newcomer can find their way around:

1. **No import cycle.**  Module A imports B when A's code imports B, at import time or later:
   ``import contextledger.b``, ``from contextledger.b import x`` (an edge to ``contextledger.b``,
   or to ``contextledger.b.x`` when ``x`` is a module), ``from . import x``.  Importing a module
   runs its packages' ``__init__`` first, so an import of ``contextledger.b._c`` is an edge to
   ``contextledger.b`` too (unless the importer is inside ``contextledger.b`` already).  An import
   inside a function or method counts too: it hides a cycle from the interpreter, not from a
   reader, and the dependency still runs both ways.  Only imports under ``if TYPE_CHECKING:``
   (annotations, never run) do not count.  A lower module that needs something from above is
   handed it (a callable, a role it is taught) by the code above.
2. **No module over 600 lines** under ``src/``.  A module past that holds more than one concern.
3. **No private name of another package.**  A name starting with ``_`` (a module ``_x.py`` or an
   object ``_y``) belongs to the package that holds it, and only code inside that package may
   import it: ``contextledger.facts._writers`` may import ``contextledger.facts._parse``, and every
   module may import the root package's private modules (``contextledger._extras``), but nothing
   outside ``contextledger.clients`` may import ``contextledger.clients._offline``.  Here every
   import counts, in a function or not: what is private must stay so.  The one opening is plumbing
   the library shares between its packages: a private module lists it in its own ``__all__``, and
   another package may import exactly those names from it (``from contextledger.messages._responses
   import item_dict``), never the module itself nor anything else in it.
4. **Every package names its public names.**  Each name in a package's ``__all__`` appears in
   its ``__init__`` docstring, the map a reader opens first (``compaction/__init__.py`` is the
   model).
5. **A package's public names are its ``__all__``.**  ``from contextledger.x import y`` written
   outside ``contextledger.x`` names something in ``contextledger.x.__all__`` (or a submodule):
   what a package keeps importable only for an old release's sake warns when imported, and the
   library itself never leans on it.

Each test prints every offender as ``path:line: what is wrong``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src"
ROOT_PACKAGE = "contextledger"
MAX_LINES = 600


@dataclass(frozen=True)
class Module:
    """One ``.py`` file under ``src/``: its dotted name, its path, and its parsed tree."""

    name: str
    path: Path
    tree: ast.Module
    is_package: bool

    @property
    def package(self) -> str:
        """The package this module's code lives in (a package's ``__init__`` lives in itself)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    def where(self, line: int) -> str:
        return f"{self.path.relative_to(SOURCE.parent)}:{line}"


@dataclass(frozen=True)
class Import:
    """One imported module (and, for ``from m import n``, the name ``n``), where it was written."""

    module: str
    name: str | None
    line: int
    at_import_time: bool
    type_only: bool = False


def load_modules() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted((SOURCE / ROOT_PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        modules[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8")), is_package)
    return modules


MODULES = load_modules()


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_statements(
    body: list[ast.stmt], at_import_time: bool = True, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement in ``body``, whether it runs when the module is imported, and
    whether it never runs at all (under ``if TYPE_CHECKING:``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, at_import_time, type_only
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from import_statements(node.body, False, type_only)
        elif isinstance(node, ast.If):
            checking = is_type_checking(node.test)
            yield from import_statements(node.body, at_import_time and not checking, type_only or checking)
            yield from import_statements(node.orelse, at_import_time, type_only)
        else:  # class bodies, try/except, with, loops: run where they stand
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, ()):
                    inner = child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) else [child]
                    yield from import_statements(inner, at_import_time, type_only)


def imports_of(module: Module) -> Iterator[Import]:
    for node, at_import_time, type_only in import_statements(module.tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, None, node.lineno, at_import_time, type_only)
            continue
        base = node.module or ""
        if node.level:  # relative: ``from .x import y`` inside this module's package
            anchor = module.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            yield Import(base, alias.name, node.lineno, at_import_time, type_only)


def ancestors(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages whose ``__init__`` runs before ``a.b.c``."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def runtime_targets(module: Module, imported: Import) -> set[str]:
    """The modules of ours that this import runs, as edges of the import graph."""
    target = imported.module
    if imported.name is not None and f"{target}.{imported.name}" in MODULES:
        target = f"{target}.{imported.name}"
    own = {*ancestors(module.name), module.name}
    return {name for name in (*ancestors(target), target) if name in MODULES and name not in own}


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module -> line of the first import that runs it, now or later}."""
    graph: dict[str, dict[str, int]] = {}
    for module in MODULES.values():
        edges = graph.setdefault(module.name, {})
        for imported in imports_of(module):
            if not imported.type_only:
                for target in runtime_targets(module, imported):
                    edges.setdefault(target, imported.line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that each reach one another."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def private_owner(dotted: str) -> str | None:
    """The package that owns the first private part of a dotted path, or None if none is private.

    ``contextledger.facts._parse.read`` -> ``contextledger.facts``; ``contextledger.clients._x`` ->
    ``contextledger.clients``; ``contextledger.facts._parse._split`` -> ``contextledger.facts`` too
    (a private name in a private module is still the package's own business).
    """
    path = dotted.split(".")
    for position, part in enumerate(path):
        if part.startswith("_") and not part.startswith("__"):
            holder = ".".join(path[:position])
            module = MODULES.get(holder)
            return holder if module is None or module.is_package else module.package
    return None


def shared_plumbing(imported: Import) -> bool:
    """Whether ``from m import n`` takes a name that the private module ``m`` lists in its ``__all__``.

    Only the module's own last part may be private (``contextledger.facts._store``, not
    ``contextledger._x._y``), and the name must be public in form.
    """
    holder = MODULES.get(imported.module)
    if holder is None or holder.is_package or imported.name is None or imported.name.startswith("_"):
        return False
    if any(part.startswith("_") for part in imported.module.split(".")[:-1]):
        return False
    declared = all_names(holder)
    return declared is not None and imported.name in {name for name, _ in declared[0]}


def report(offenders: list[str], rule: str) -> None:
    """Fail with every offender on a line of its own (no traceback: the list is the message)."""
    if offenders:
        pytest.fail(f"{len(offenders)} {rule}:\n" + "\n".join(offenders), pytrace=False)


def test_modules_are_found() -> None:
    # The checks below pass vacuously on an empty tree; make sure they read the real one.
    assert f"{ROOT_PACKAGE}.messages" in MODULES
    assert f"{ROOT_PACKAGE}.compaction._index" in MODULES
    assert len(MODULES) > 50


def test_the_checks_read_imports_as_python_runs_them() -> None:
    # The rules are only as good as this reading; check it on code written for the purpose.
    source = """
import contextledger.a
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from contextledger import b
else:
    from contextledger import c
try:
    from contextledger.d import _e
except ImportError:
    from contextledger import f
class Holder:
    from contextledger import g
    def method(self):
        from contextledger.h import _i
async def later():
    from contextledger import j
"""
    read = [
        (node.names[0].name, at_import_time, type_only)
        for node, at_import_time, type_only in import_statements(ast.parse(source).body)
    ]
    assert read == [
        ("contextledger.a", True, False),
        ("TYPE_CHECKING", True, False),
        ("b", False, True),
        ("c", True, False),
        ("_e", True, False),
        ("f", True, False),
        ("g", True, False),
        ("_i", False, False),
        ("j", False, False),
    ]


def test_the_checks_find_a_cycle_and_the_owner_of_a_private_name() -> None:
    graph: dict[str, dict[str, int]] = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}, "e": {"e": 5}}
    assert sorted(strongly_connected(graph)) == [["a", "b", "c"], ["d"], ["e"]]
    assert private_owner("contextledger.facts._parse.read_message") == "contextledger.facts"
    assert private_owner("contextledger.facts._parse._split") == "contextledger.facts"
    assert private_owner("contextledger.clients._offline") == "contextledger.clients"
    assert private_owner("contextledger._extras.require_extra") == "contextledger"
    assert private_owner("contextledger.messages.Message") is None
    assert shared_plumbing(Import("contextledger.messages._responses", "item_dict", 1, True))
    assert not shared_plumbing(Import("contextledger.messages._responses", "responses_record", 1, True))
    assert not shared_plumbing(Import("contextledger.messages._responses", None, 1, True))


def test_no_import_cycle() -> None:
    graph = import_graph()
    offenders = []
    for group in strongly_connected(graph):
        members = set(group)
        if len(group) == 1 and group[0] not in graph[group[0]]:
            continue
        edges = [
            f"  {MODULES[source].where(line)}: {source} imports {target}"
            for source in group
            for target, line in sorted(graph[source].items())
            if target in members
        ]
        offenders.append(f"cycle through {', '.join(group)}:\n" + "\n".join(edges))
    report(offenders, "import cycles (break one edge: move what is shared below both, or hand it down from above)")


def test_no_module_over_the_line_limit() -> None:
    offenders = []
    for module in MODULES.values():
        lines = len(module.path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            offenders.append(f"{module.where(MAX_LINES + 1)}: {lines} lines, over {MAX_LINES}")
    report(offenders, f"modules over {MAX_LINES} lines (split them by concern)")


def test_no_private_name_of_another_package_is_imported() -> None:
    offenders = []
    for module in MODULES.values():
        for imported in imports_of(module):
            if not imported.module.startswith(ROOT_PACKAGE):
                continue
            path = imported.module.split(".")
            if imported.name is not None and imported.name != "*":
                path.append(imported.name)
            shown = ".".join(path)
            owner = private_owner(shown)
            if owner is not None and module.package != owner and not module.package.startswith(f"{owner}."):
                if shared_plumbing(imported):
                    continue
                offenders.append(f"{module.where(imported.line)}: {module.name} imports {shown}, private to {owner}")
    report(offenders, "imports of another package's private names (use or add a public name)")


def all_names(module: Module) -> tuple[list[tuple[str, int]], int] | None:
    """A module's ``__all__`` entries with their lines, and the line of ``__all__``; None without one."""
    for node in module.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node.value, (ast.List, ast.Tuple)), f"{module.where(node.lineno)}: __all__"
                entries = [(e.value, e.lineno) for e in node.value.elts if isinstance(e, ast.Constant)]
                return [(str(name), line) for name, line in entries], node.lineno
    return None


def names_in(text: str) -> set[str]:
    """The identifiers a docstring mentions, wherever they stand (``Message``, ``:func:`validate```)."""
    word: list[str] = []
    found: set[str] = set()
    for character in f"{text} ":
        if character.isalnum() or character == "_":
            word.append(character)
        elif word:
            found.add("".join(word))
            word.clear()
    return found


@pytest.mark.parametrize("package", sorted(name for name, module in MODULES.items() if module.is_package))
def test_every_public_name_of_a_package_is_in_its_docstring_map(package: str) -> None:
    module = MODULES[package]
    declared = all_names(module)
    if declared is None:
        report([f"{module.where(1)}: {package} has no __all__"], "packages without __all__ (declare one)")
        return
    entries, _ = declared
    mentioned = names_in(ast.get_docstring(module.tree) or "")
    offenders = [f"{module.where(line)}: {name}" for name, line in entries if name not in mentioned]
    report(offenders, f"public names of {package} missing from its __init__ docstring (add them to the map)")


def test_packages_are_imported_by_their_public_names_alone() -> None:
    offenders = []
    for module in MODULES.values():
        for imported in imports_of(module):
            target = MODULES.get(imported.module)
            if target is None or not target.is_package or imported.name in (None, "*"):
                continue
            if module.package == target.name or module.package.startswith(f"{target.name}."):
                continue
            if f"{target.name}.{imported.name}" in MODULES:
                continue
            declared = all_names(target)
            public = {name for name, _ in declared[0]} if declared else set()
            if imported.name not in public:
                offenders.append(
                    f"{module.where(imported.line)}: {module.name} imports {imported.name} from {target.name},"
                    " which does not list it in __all__"
                )
    report(offenders, "imports of names a package does not make public (import them from the module that lists them)")
