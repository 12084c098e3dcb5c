"""The code's citations point into the repository: each reference to design.md (its name, ``#``,
an anchor) names a heading of docs/design.md, and no citation of a document outside it is left."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
# Spelled in two parts so that this file does not cite it either.
OUTSIDE = "SPEC" + " §"
_REFERENCE = re.compile(r"design\.md#([A-Za-z0-9_-]+)")
_ANCHOR = re.compile(r"^#+ .*\{#([A-Za-z0-9_-]+)\}\s*$", re.MULTILINE)


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in ("src", "tests", "benchmarks", "scripts", "docs", "examples"):
        files += [path for path in (ROOT / folder).rglob("*") if path.suffix in {".py", ".md", ".js", ".toml", ".json"}]
    return [path for path in files if path.is_file()]


def test_no_citation_of_a_document_outside_the_repository() -> None:
    left = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE in line
    ]
    assert left == [], f"cite a section of docs/design.md instead: {left}"


def test_every_design_reference_lands_on_a_heading() -> None:
    anchors = set(_ANCHOR.findall(DESIGN.read_text(encoding="utf-8")))
    assert len(anchors) >= 20
    seen: set[str] = set()
    broken: list[str] = []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for anchor in _REFERENCE.findall(line):
                seen.add(anchor)
                if anchor not in anchors:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: design.md#{anchor}")
    assert broken == [], f"no such heading in docs/design.md: {broken}"
    # The code does cite it (the sections below hold the reasons most often given).
    assert {"units", "prefix-stability", "declarations", "forgetting"} <= seen


def test_anchors_are_unique() -> None:
    anchors = _ANCHOR.findall(DESIGN.read_text(encoding="utf-8"))
    assert len(anchors) == len(set(anchors))
