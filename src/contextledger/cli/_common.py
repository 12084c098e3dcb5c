"""What every command shares: its one-line usage error, and ``-`` as the standard stream.

A file argument of ``-`` means standard input where the command reads and standard output where
it writes, for every command, as users of other tools expect; nothing ever creates a file
named ``-``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["STANDARD_STREAM", "TOKENIZERS", "UsageError", "check_output", "read_text", "write_text"]

STANDARD_STREAM = "-"
TOKENIZERS = ["estimate", "cl100k_base", "o200k_base"]


class UsageError(Exception):
    """A command-line mistake, reported in one line with exit status 2."""


def read_text(path: str, *, what: str) -> str:
    """The whole text of ``path``, or of standard input for ``-``; ``what`` names it in errors."""
    if path == STANDARD_STREAM:
        if sys.stdin is None:
            raise UsageError(f"{what} is '-' (standard input), but there is no standard input")
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"cannot read {what} {path}: no such file; check the path") from None
    except UnicodeDecodeError as error:
        raise UsageError(f"cannot read {what} {path}: not UTF-8 text ({error.reason})") from None


def check_output(path: str) -> None:
    """Refuse an output path that cannot be written before any work is done (``-`` always can)."""
    if path == STANDARD_STREAM:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist; create it or choose another path")
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path``, or to standard output for ``-``."""
    if path == STANDARD_STREAM:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    Path(path).write_text(text, encoding="utf-8")
