"""The code blocks of the README and of every docs page, as a reader sees them.

A ```python block runs alone, as a reader pastes it into a fresh interpreter. A block that needs a
running proxy says so right above it, ``<!-- needs: proxy -->``, and is run by
tests/serve/test_docs_serve.py against a proxy the test starts (the address ``http://127.0.0.1:8080``
it shows is replaced by the proxy's).  ```console, ```text and ```sh blocks are commands or output
to read; the proxy's shell blocks are run by the same serve test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(
    r"^(?:<!-- needs: (?P<needs>[\w-]+) -->\n)?```(?P<language>[\w-]*)\n(?P<code>.*?)^```[ \t]*$",
    re.DOTALL | re.MULTILINE,
)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, what it needs and its code."""

    path: Path
    line: int
    heading: str
    language: str
    needs: str | None
    code: str

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        start = match.start("code")
        headings = re.findall(r"^#+ (.+)$", text[:start], flags=re.MULTILINE)
        found.append(
            Block(
                path,
                text.count("\n", 0, start),
                headings[-1] if headings else "top",
                match["language"],
                match["needs"],
                match["code"],
            )
        )
    return found


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in blocks(path)]


def python_blocks(needs: str | None) -> list[Block]:
    return [block for block in all_blocks() if block.language in {"python", "py"} and block.needs == needs]
