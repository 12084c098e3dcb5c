"""Reading JSON that the library can write back as it was read, from a proxy client or a file.

Python's ``json`` takes more than JSON: ``NaN`` and ``Infinity`` (which it would write back,
making text no other parser takes), numbers that overflow to infinity (``1e400``), lone
surrogates (``"\\ud800"``, text that cannot be written as UTF-8, so it fails only later, when a
reply or a store writes it), and nesting deep enough to exhaust the stack (``RecursionError``).
:func:`strict_loads` refuses each of them up front with :class:`UnwritableJSONError`, a
``ValueError`` whose message says what was wrong, so callers turn it into their own error (a 400
in the proxy, a transcript error in the command line).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_DEPTH", "UnwritableJSONError", "strict_loads"]

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects taken (a chat message nests a few levels; the
library's readers and writers recurse)."""


class UnwritableJSONError(ValueError):
    """Syntactically JSON (or close to it) but not a value the library can write back."""


def _no_constant(name: str) -> Any:
    raise UnwritableJSONError(f"{name} is not a JSON number; send numbers as finite decimals")


def strict_loads(text: str | bytes) -> Any:
    """``json.loads``, refusing what RFC 8259 or UTF-8 cannot carry (see the module docstring).

    A syntax error is ``json.JSONDecodeError`` as usual; everything this module adds is
    :class:`UnwritableJSONError`.
    """
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise UnwritableJSONError(f"it nests arrays and objects deeper than {MAX_DEPTH} levels") from None
    problem = _unwritable(value)
    if problem is not None:
        raise UnwritableJSONError(problem)
    return value


def _unwritable(value: Any) -> str | None:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                return f"it nests arrays and objects deeper than {MAX_DEPTH} levels"
            children = [*item, *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            return "a number is out of range (a double holds at most about 1.8e308)"
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                return f"a string holds a lone surrogate {item[error.start]!r}, which is not Unicode text"
    return None
