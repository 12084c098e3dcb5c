"""The compaction package read as source: every attribute of an object is written in one module.

``MessageIndex`` is assembled from parts it owns (the table, the metrics, the marking, the
grouper), each a class of its own module.  That only helps a reader if each part's state is
written where the part is defined: these tests walk the package's syntax trees and fail when a
class and its ancestors assign one attribute through ``self`` in two modules, or when a module
assigns an attribute of an object that is not its own (``table.later = ...`` from elsewhere).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import contextledger.compaction

PACKAGE = Path(contextledger.compaction.__file__).parent

# Objects a module may write attributes on besides ``self``: a view of its own class made
# without ``__init__`` (``MessageGroup._of``), and a group re-pointed by its own table.
ALLOWED_OTHERS = {("_table.py", "view"), ("_table.py", "group")}


def modules() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text(), filename=str(path)) for path in sorted(PACKAGE.glob("*.py"))}


def targets(node: ast.AST) -> list[ast.expr]:
    """The expressions an assignment statement writes to, tuples unpacked."""
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        else:
            flat.append(target)
    return flat


def written(tree: ast.AST) -> list[tuple[str, str]]:
    """(object name, attribute) for every ``name.attribute = ...`` under ``tree``."""
    out = []
    for node in ast.walk(tree):
        for target in targets(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                out.append((target.value.id, target.attr))
    return out


def classes() -> dict[str, tuple[str, list[str], set[str]]]:
    """Each class of the package: its module, the names of its bases, the attributes it assigns
    through ``self``."""
    found: dict[str, tuple[str, list[str], set[str]]] = {}
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
                attributes = {attribute for owner, attribute in written(node) if owner == "self"}
                assert node.name not in found, f"two classes named {node.name} in the package"
                found[node.name] = (name, bases, attributes)
    return found


def test_each_attribute_of_a_class_and_its_ancestors_is_assigned_in_one_module() -> None:
    every = classes()
    assert {"MessageIndex", "Metrics", "Marking", "Grouper", "_Table"} <= set(every)
    clashes = []
    for name in every:
        where: dict[str, set[str]] = defaultdict(set)
        pending = [name]
        while pending:
            current = pending.pop()
            if current not in every:  # a base from outside the package
                continue
            module, bases, attributes = every[current]
            for attribute in attributes:
                where[attribute].add(module)
            pending.extend(bases)
        clashes += [f"{name}.{attribute}: {sorted(found)}" for attribute, found in where.items() if len(found) > 1]
    assert clashes == []


def test_no_module_writes_the_attributes_of_another_modules_objects() -> None:
    others = [
        f"{name}: {owner}.{attribute}"
        for name, tree in modules().items()
        for owner, attribute in written(tree)
        if owner not in {"self", "cls"} and (name, owner) not in ALLOWED_OTHERS
    ]
    assert others == []


def test_the_index_is_a_class_of_its_own_holding_its_parts() -> None:
    """No stacking: ``MessageIndex`` derives from nothing in the package, and builds its parts."""
    module, bases, attributes = classes()["MessageIndex"]
    assert (module, bases) == ("_index.py", [])
    assert {"_table", "_metrics", "_marking", "_grouper"} <= attributes


def test_the_checks_catch_an_attribute_written_in_two_modules() -> None:
    """The walk itself, on two made-up modules: a subclass writing its base's attribute, and a
    function writing an attribute of an object it was handed."""
    base = ast.parse("class Base:\n    def __init__(self):\n        self.count = 0\n")
    child = ast.parse("class Child(Base):\n    def more(self, table):\n        self.count += 1\n        table.x = 1\n")
    assert [attribute for owner, attribute in written(base) if owner == "self"] == ["count"]
    assert sorted(written(child)) == [("self", "count"), ("table", "x")]
